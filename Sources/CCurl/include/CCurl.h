// libcurl (Debian's libcurl4-openssl-dev headers; libcurl.so.4 at run time) for the HTTP client
// shared by the outbox and telemetry.
//
// libcurl is loaded with dlopen on first use, not linked: a process that never sends (`vault scan`,
// `vault rotate`, an app that only queues) does not load it and the two dozen libraries it brings
// (GnuTLS, Kerberos, LDAP, SSH, ...), which were half of every `vault` command's start-up. Swift
// calls only the vault_curl_ functions below; curl.h is included for its types and constants, and
// a call to one of its functions would fail to link (nothing provides them), so none slips through.
//
// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: the typed setters
// and getters are the only way in. No compile-time type checks on those calls: each fixes the type.
#ifndef VAULT_CCURL_H
#define VAULT_CCURL_H

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

/// Loads libcurl.so.4, resolves every function below and calls curl_global_init(CURL_GLOBAL_DEFAULT)
/// (thread-safe). 1 when libcurl is ready, 0 when it could not be loaded, lacks a function, or
/// failed to initialise; every other function here then fails as libcurl itself would on a handle
/// it could not make (NULL, CURLE_FAILED_INIT, CURLM_INTERNAL_ERROR). Once ready it stays ready;
/// after a failure the next call tries again (the library may have been installed since).
int vault_curl_load(void);

/// Why the last vault_curl_load failed (the dynamic linker's message, or the function missing),
/// copied into `buffer` as a C string of at most `size` bytes; empty when none failed.
void vault_curl_load_error(char *buffer, size_t size);

CURL *vault_curl_easy_init(void);
void vault_curl_easy_cleanup(CURL *handle);
struct curl_slist *vault_curl_slist_append(struct curl_slist *list, const char *line);
void vault_curl_slist_free_all(struct curl_slist *list);

typedef size_t (*vault_curl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*vault_curl_progress_callback)(
    void *context, curl_off_t download_total, curl_off_t downloaded, curl_off_t upload_total, curl_off_t uploaded);

CURLcode vault_curl_set_long(CURL *handle, CURLoption option, long value);
CURLcode vault_curl_set_string(CURL *handle, CURLoption option, const char *value);
CURLcode vault_curl_set_pointer(CURL *handle, CURLoption option, void *value);
CURLcode vault_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value);
CURLcode vault_curl_set_data_callback(CURL *handle, CURLoption option, vault_curl_data_callback callback);
CURLcode vault_curl_set_progress_callback(CURL *handle, vault_curl_progress_callback callback);
CURLcode vault_curl_response_code(CURL *handle, long *code);
CURLcode vault_curl_os_errno(CURL *handle, long *value);

CURLM *vault_curl_multi_init(void);
CURLMcode vault_curl_multi_add_handle(CURLM *multi, CURL *easy);
CURLMcode vault_curl_multi_remove_handle(CURLM *multi, CURL *easy);
CURLMcode vault_curl_multi_perform(CURLM *multi, int *running);
CURLMcode vault_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms,
                                int *ready);
CURLMcode vault_curl_multi_wakeup(CURLM *multi);
CURLMsg *vault_curl_multi_info_read(CURLM *multi, int *remaining);
CURLMcode vault_curl_multi_cleanup(CURLM *multi);

#endif
