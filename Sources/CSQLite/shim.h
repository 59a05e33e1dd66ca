// SQLite for VaultQueue (the only module that will import it).
#ifndef VAULT_CSQLITE_SHIM_H
#define VAULT_CSQLITE_SHIM_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro casting -1 to a destructor pointer; Swift cannot import it.
static inline sqlite3_destructor_type vault_sqlite_transient(void) { return SQLITE_TRANSIENT; }

#endif
