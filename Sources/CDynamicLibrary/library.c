// See CDynamicLibrary.h.
#include "CDynamicLibrary.h"

#include <dlfcn.h>
#include <stdio.h>

// Called with `loading` held and the library not ready.
static void attempt(vault_library *library) {
  // Never unloaded: a library's global state (libcurl's, OpenSSL's, GLib's type system) stays for
  // the process.
  void *handle = dlopen(library->soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    vault_library_fail(library, reason ? reason : "could not be opened");
    return;
  }
  if (!library->resolve_all(library, handle)) return;
  if (library->start && !library->start(library)) return;
  library->failure[0] = 0;
  atomic_store_explicit(&library->ready, 1, memory_order_release);
}

int vault_library_load(vault_library *library) {
  if (atomic_load_explicit(&library->ready, memory_order_acquire)) return 1;
  pthread_mutex_lock(&library->loading);
  if (!atomic_load_explicit(&library->ready, memory_order_relaxed)) attempt(library);
  pthread_mutex_unlock(&library->loading);
  return atomic_load_explicit(&library->ready, memory_order_acquire);
}

int vault_library_resolve(vault_library *library, void *handle, const char *symbol, void *slot) {
  void *address = dlsym(handle, symbol);
  if (!address) {
    snprintf(library->failure, sizeof library->failure, "%s (or a library it loads) has no %s", library->soname,
             symbol);
    return 0;
  }
  // Through a void *: ISO C has no cast from an object pointer (dlsym's result) to a function pointer.
  *(void **)slot = address;
  return 1;
}

void vault_library_fail(vault_library *library, const char *reason) {
  snprintf(library->failure, sizeof library->failure, "%s", reason);
}

void vault_library_error(vault_library *library, char *buffer, size_t size) {
  if (size == 0) return;
  pthread_mutex_lock(&library->loading);
  snprintf(buffer, size, "%s", library->failure);
  pthread_mutex_unlock(&library->loading);
}
