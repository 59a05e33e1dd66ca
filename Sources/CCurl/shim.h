// libcurl (Debian's libcurl4-openssl-dev) for the HTTP client shared by the outbox and telemetry.
// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: these typed
// wrappers are the only way in.
// No compile-time type checks on the variadic calls: each wrapper fixes the type itself.
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

typedef size_t (*vault_curl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*vault_curl_progress_callback)(
    void *context, curl_off_t download_total, curl_off_t downloaded, curl_off_t upload_total, curl_off_t uploaded);

static inline CURLcode vault_curl_set_long(CURL *handle, CURLoption option, long value) {
  return curl_easy_setopt(handle, option, value);
}

static inline CURLcode vault_curl_set_string(CURL *handle, CURLoption option, const char *value) {
  return curl_easy_setopt(handle, option, value);
}

static inline CURLcode vault_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
  return curl_easy_setopt(handle, option, value);
}

static inline CURLcode vault_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
  return curl_easy_setopt(handle, option, value);
}

static inline CURLcode vault_curl_set_data_callback(CURL *handle, CURLoption option, vault_curl_data_callback callback) {
  return curl_easy_setopt(handle, option, callback);
}

static inline CURLcode vault_curl_set_progress_callback(CURL *handle, vault_curl_progress_callback callback) {
  return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

static inline CURLcode vault_curl_response_code(CURL *handle, long *code) {
  return curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, code);
}

static inline CURLcode vault_curl_os_errno(CURL *handle, long *value) {
  return curl_easy_getinfo(handle, CURLINFO_OS_ERRNO, value);
}
