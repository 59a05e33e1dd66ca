// SQLite for VaultQueue (the only module that will import it).
#ifndef VAULT_CSQLITE_SHIM_H
#define VAULT_CSQLITE_SHIM_H

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

// SQLITE_TRANSIENT is a macro casting -1 to a destructor pointer; Swift cannot import it.
static inline sqlite3_destructor_type vault_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// open(2) as SQLite's unix VFS calls it once vault installs it: never waits on a FIFO. The file
/// is opened non-blocking; a FIFO or a socket (something swapped in where a database, its WAL or
/// journal was expected) is closed again and refused with ENXIO, where a plain open would wait
/// for a writer forever; anything else is handed back with its flags as asked.
static inline int vault_sqlite_open_no_fifo(const char *path, int flags, mode_t mode) {
  int fd = open(path, flags | O_NONBLOCK, mode);
  if (fd < 0) return fd;
  struct stat info;
  if (fstat(fd, &info) == 0 && (S_ISFIFO(info.st_mode) || S_ISSOCK(info.st_mode))) {
    close(fd);
    errno = ENXIO;
    return -1;
  }
  if ((flags & O_NONBLOCK) == 0) {
    int current = fcntl(fd, F_GETFL);
    if (current >= 0) fcntl(fd, F_SETFL, current & ~O_NONBLOCK);
  }
  return fd;
}

/// Installs `vault_sqlite_open_no_fifo` as the open(2) of SQLite's unix VFS family, for every
/// connection of the process. SQLITE_OK, or SQLite's error (no unix VFS, or one too old).
static inline int vault_sqlite_refuse_fifos(void) {
  sqlite3_vfs *vfs = sqlite3_vfs_find("unix");
  if (vfs == NULL || vfs->iVersion < 3 || vfs->xSetSystemCall == NULL) return SQLITE_ERROR;
  return vfs->xSetSystemCall(vfs, "open", (sqlite3_syscall_ptr)vault_sqlite_open_no_fifo);
}

#endif
