// A C library loaded with dlopen on first use, for the loaders of CCurl and CLibSecret: the
// attempt serialised, success kept (read without a lock afterwards), and the reason of a failure
// kept for the error message; after a failure the next use tries again (the library may have been
// installed since). Not imported by Swift.
#ifndef VAULT_CDYNAMICLIBRARY_H
#define VAULT_CDYNAMICLIBRARY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct vault_library vault_library;

struct vault_library {
  /// The soname given to dlopen.
  const char *soname;
  /// Resolves every function the loader calls through (with vault_library_resolve); 1 when all were found.
  int (*resolve_all)(vault_library *library, void *handle);
  /// Run once all are resolved, or NULL: 1 when the library is ready (else vault_library_fail).
  int (*start)(vault_library *library);
  atomic_int ready;
  pthread_mutex_t loading;
  /// Why the last attempt failed; guarded by `loading`.
  char failure[256];
};

/// A static vault_library for `soname`.
#define VAULT_LIBRARY(soname, resolve_all, start) {(soname), (resolve_all), (start), 0, PTHREAD_MUTEX_INITIALIZER, ""}

/// 1 when the library is loaded and ready (loading it now if need be), else 0. Thread-safe.
int vault_library_load(vault_library *library);

/// Stores the address of `symbol` in `slot` (a function pointer) and returns 1; or records that the
/// library lacks it and returns 0. Only from `resolve_all`.
int vault_library_resolve(vault_library *library, void *handle, const char *symbol, void *slot);

/// Records why the attempt failed. Only from `resolve_all` or `start`.
void vault_library_fail(vault_library *library, const char *reason);

/// Copies why the last attempt failed into `buffer` (at most `size` bytes, a C string); empty when
/// none did.
void vault_library_error(vault_library *library, char *buffer, size_t size);

#endif
