// libcurl through dlopen (see CCurl.h): one table of function pointers, filled once.
#include "CCurl.h"

#include <stdlib.h>

#include "CDynamicLibrary.h"

static struct {
  CURLcode (*global_init)(long flags);
  CURL *(*easy_init)(void);
  void (*easy_cleanup)(CURL *handle);
  CURLcode (*easy_setopt)(CURL *handle, CURLoption option, ...);
  CURLcode (*easy_getinfo)(CURL *handle, CURLINFO info, ...);
  struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
  void (*slist_free_all)(struct curl_slist *list);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_add_handle)(CURLM *multi, CURL *easy);
  CURLMcode (*multi_remove_handle)(CURLM *multi, CURL *easy);
  CURLMcode (*multi_perform)(CURLM *multi, int *running);
  CURLMcode (*multi_poll)(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready);
  CURLMcode (*multi_wakeup)(CURLM *multi);
  CURLMsg *(*multi_info_read)(CURLM *multi, int *remaining);
  CURLMcode (*multi_cleanup)(CURLM *multi);
} api;

// Each pointer has the type of the function it holds (the compiler checks it against curl.h).
#define SAME_TYPE(field, function) \
  _Static_assert(__builtin_types_compatible_p(__typeof__(api.field), __typeof__(&function)), #function)
SAME_TYPE(global_init, curl_global_init);
SAME_TYPE(easy_init, curl_easy_init);
SAME_TYPE(easy_cleanup, curl_easy_cleanup);
SAME_TYPE(easy_setopt, curl_easy_setopt);
SAME_TYPE(easy_getinfo, curl_easy_getinfo);
SAME_TYPE(slist_append, curl_slist_append);
SAME_TYPE(slist_free_all, curl_slist_free_all);
SAME_TYPE(multi_init, curl_multi_init);
SAME_TYPE(multi_add_handle, curl_multi_add_handle);
SAME_TYPE(multi_remove_handle, curl_multi_remove_handle);
SAME_TYPE(multi_perform, curl_multi_perform);
SAME_TYPE(multi_poll, curl_multi_poll);
SAME_TYPE(multi_wakeup, curl_multi_wakeup);
SAME_TYPE(multi_info_read, curl_multi_info_read);
SAME_TYPE(multi_cleanup, curl_multi_cleanup);

#define RESOLVE(field, name) vault_library_resolve(library, handle, name, &api.field)

static int resolve_all(vault_library *library, void *handle) {
  // An older libcurl without curl_multi_poll (before 7.66) or curl_multi_wakeup (7.68) is refused
  // whole rather than half used.
  return RESOLVE(global_init, "curl_global_init") && RESOLVE(easy_init, "curl_easy_init") &&
         RESOLVE(easy_cleanup, "curl_easy_cleanup") && RESOLVE(easy_setopt, "curl_easy_setopt") &&
         RESOLVE(easy_getinfo, "curl_easy_getinfo") && RESOLVE(slist_append, "curl_slist_append") &&
         RESOLVE(slist_free_all, "curl_slist_free_all") && RESOLVE(multi_init, "curl_multi_init") &&
         RESOLVE(multi_add_handle, "curl_multi_add_handle") &&
         RESOLVE(multi_remove_handle, "curl_multi_remove_handle") &&
         RESOLVE(multi_perform, "curl_multi_perform") && RESOLVE(multi_poll, "curl_multi_poll") &&
         RESOLVE(multi_wakeup, "curl_multi_wakeup") && RESOLVE(multi_info_read, "curl_multi_info_read") &&
         RESOLVE(multi_cleanup, "curl_multi_cleanup");
}

static int start(vault_library *library) {
  // OpenSSL (through libcurl) would write every TLS session secret to this file: whoever has the
  // file and a capture of the traffic reads the token and the records.
  unsetenv("SSLKEYLOGFILE");
  if (api.global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK) return 1;
  vault_library_fail(library, "curl_global_init failed");
  return 0;
}

// The soname Debian 12's libcurl4-openssl installs.
static vault_library curl = VAULT_LIBRARY("libcurl.so.4", resolve_all, start);

int vault_curl_load(void) { return vault_library_load(&curl); }

void vault_curl_load_error(char *buffer, size_t size) { vault_library_error(&curl, buffer, size); }

CURL *vault_curl_easy_init(void) { return vault_curl_load() ? api.easy_init() : NULL; }

void vault_curl_easy_cleanup(CURL *handle) {
  if (vault_curl_load()) api.easy_cleanup(handle);
}

struct curl_slist *vault_curl_slist_append(struct curl_slist *list, const char *line) {
  return vault_curl_load() ? api.slist_append(list, line) : NULL;
}

void vault_curl_slist_free_all(struct curl_slist *list) {
  if (vault_curl_load()) api.slist_free_all(list);
}

CURLcode vault_curl_set_long(CURL *handle, CURLoption option, long value) {
  return vault_curl_load() ? api.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_set_string(CURL *handle, CURLoption option, const char *value) {
  return vault_curl_load() ? api.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
  return vault_curl_load() ? api.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
  return vault_curl_load() ? api.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_set_data_callback(CURL *handle, CURLoption option, vault_curl_data_callback callback) {
  return vault_curl_load() ? api.easy_setopt(handle, option, callback) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_set_progress_callback(CURL *handle, vault_curl_progress_callback callback) {
  return vault_curl_load() ? api.easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_response_code(CURL *handle, long *code) {
  return vault_curl_load() ? api.easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code) : CURLE_FAILED_INIT;
}

CURLcode vault_curl_os_errno(CURL *handle, long *value) {
  return vault_curl_load() ? api.easy_getinfo(handle, CURLINFO_OS_ERRNO, value) : CURLE_FAILED_INIT;
}

CURLM *vault_curl_multi_init(void) { return vault_curl_load() ? api.multi_init() : NULL; }

CURLMcode vault_curl_multi_add_handle(CURLM *multi, CURL *easy) {
  return vault_curl_load() ? api.multi_add_handle(multi, easy) : CURLM_INTERNAL_ERROR;
}

CURLMcode vault_curl_multi_remove_handle(CURLM *multi, CURL *easy) {
  return vault_curl_load() ? api.multi_remove_handle(multi, easy) : CURLM_INTERNAL_ERROR;
}

CURLMcode vault_curl_multi_perform(CURLM *multi, int *running) {
  return vault_curl_load() ? api.multi_perform(multi, running) : CURLM_INTERNAL_ERROR;
}

CURLMcode vault_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms,
                                int *ready_count) {
  return vault_curl_load() ? api.multi_poll(multi, extra, count, timeout_ms, ready_count) : CURLM_INTERNAL_ERROR;
}

CURLMcode vault_curl_multi_wakeup(CURLM *multi) {
  return vault_curl_load() ? api.multi_wakeup(multi) : CURLM_INTERNAL_ERROR;
}

CURLMsg *vault_curl_multi_info_read(CURLM *multi, int *remaining) {
  return vault_curl_load() ? api.multi_info_read(multi, remaining) : NULL;
}

CURLMcode vault_curl_multi_cleanup(CURLM *multi) {
  return vault_curl_load() ? api.multi_cleanup(multi) : CURLM_INTERNAL_ERROR;
}
