#ifndef CRESUMABLE_CURL_H
#define CRESUMABLE_CURL_H

// A run-time binding to libcurl: the library is loaded with dlopen, so building needs no curl headers and a
// machine without libcurl still runs (the transport is then unavailable). Only what the transport uses is
// declared, with the values of curl's public headers (include/curl/curl.h, multi.h); each was checked against
// the installed libcurl 7.88 with curl_easy_option_by_name and curl_easy_strerror.
//
// Handles are opaque `void *`. Every call takes the loaded library first, so two libraries (a test may load a
// missing one on purpose) never mix.

#include <stddef.h>

/// A loaded libcurl: the dlopen handle and the resolved entry points. Never unloaded.
typedef struct cresumable_curl cresumable_curl;

/// The signature of CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION.
typedef size_t (*cresumable_curl_data_callback)(char *buffer, size_t size, size_t count, void *context);

// Options (CURLoption). LONG options are 0 + n, pointer options 10000 + n, function options 20000 + n.
// Macros, so Swift imports them as Int32 like the C int parameters.
#define CRESUMABLE_CURLOPT_WRITEDATA 10001
#define CRESUMABLE_CURLOPT_URL 10002
#define CRESUMABLE_CURLOPT_PROXY 10004
#define CRESUMABLE_CURLOPT_ERRORBUFFER 10010
#define CRESUMABLE_CURLOPT_WRITEFUNCTION 20011
#define CRESUMABLE_CURLOPT_LOW_SPEED_LIMIT 19
#define CRESUMABLE_CURLOPT_LOW_SPEED_TIME 20
#define CRESUMABLE_CURLOPT_HTTPHEADER 10023
#define CRESUMABLE_CURLOPT_HEADERDATA 10029
#define CRESUMABLE_CURLOPT_VERBOSE 41
#define CRESUMABLE_CURLOPT_FOLLOWLOCATION 52
#define CRESUMABLE_CURLOPT_HEADERFUNCTION 20079
#define CRESUMABLE_CURLOPT_HTTPGET 80
#define CRESUMABLE_CURLOPT_HTTP_VERSION 84
#define CRESUMABLE_CURLOPT_BUFFERSIZE 98
#define CRESUMABLE_CURLOPT_NOSIGNAL 99
#define CRESUMABLE_CURLOPT_ACCEPT_ENCODING 10102
#define CRESUMABLE_CURLOPT_CONNECTTIMEOUT_MS 156
#define CRESUMABLE_CURLOPT_HTTP_CONTENT_DECODING 158
#define CRESUMABLE_CURLOPT_PROTOCOLS 181
#define CRESUMABLE_CURLOPT_SUPPRESS_CONNECT_HEADERS 265
#define CRESUMABLE_CURLOPT_QUICK_EXIT 322
#define CRESUMABLE_CURLOPT_PROTOCOLS_STR 10318
// TLS (checked with curl_easy_option_by_name against libcurl 7.88.1).
#define CRESUMABLE_CURLOPT_SSLCERT 10025
#define CRESUMABLE_CURLOPT_KEYPASSWD 10026
#define CRESUMABLE_CURLOPT_SSL_VERIFYPEER 64
#define CRESUMABLE_CURLOPT_CAINFO 10065
#define CRESUMABLE_CURLOPT_SSL_VERIFYHOST 81
#define CRESUMABLE_CURLOPT_SSLKEY 10087
#define CRESUMABLE_CURLOPT_CAPATH 10097
#define CRESUMABLE_CURLOPT_PINNEDPUBLICKEY 10230

// Proxy options (checked against libcurl 7.88.1 with curl_easy_option_by_name).
#define CRESUMABLE_CURLOPT_PROXYUSERNAME 10175
#define CRESUMABLE_CURLOPT_PROXYPASSWORD 10176
#define CRESUMABLE_CURLOPT_NOPROXY 10177

// Values of options.
#define CRESUMABLE_CURL_HTTP_VERSION_1_1 2
/// HTTP/2 over TLS when the server offers it in ALPN, HTTP/1.1 otherwise and for plain http.
#define CRESUMABLE_CURL_HTTP_VERSION_2TLS 4
#define CRESUMABLE_CURLPROTO_HTTP 1
#define CRESUMABLE_CURLPROTO_HTTPS 2
/// CURL_ERROR_SIZE: the size CURLOPT_ERRORBUFFER must have.
#define CRESUMABLE_CURL_ERROR_SIZE 256

// Results of easy operations (CURLcode).
#define CRESUMABLE_CURLE_OK 0
#define CRESUMABLE_CURLE_UNSUPPORTED_PROTOCOL 1
#define CRESUMABLE_CURLE_URL_MALFORMAT 3
#define CRESUMABLE_CURLE_COULDNT_RESOLVE_PROXY 5
#define CRESUMABLE_CURLE_COULDNT_RESOLVE_HOST 6
#define CRESUMABLE_CURLE_COULDNT_CONNECT 7
#define CRESUMABLE_CURLE_WEIRD_SERVER_REPLY 8
#define CRESUMABLE_CURLE_HTTP2 16
#define CRESUMABLE_CURLE_PARTIAL_FILE 18
#define CRESUMABLE_CURLE_WRITE_ERROR 23
#define CRESUMABLE_CURLE_OUT_OF_MEMORY 27
#define CRESUMABLE_CURLE_OPERATION_TIMEDOUT 28
#define CRESUMABLE_CURLE_SSL_CONNECT_ERROR 35
#define CRESUMABLE_CURLE_ABORTED_BY_CALLBACK 42
#define CRESUMABLE_CURLE_BAD_FUNCTION_ARGUMENT 43
#define CRESUMABLE_CURLE_UNKNOWN_OPTION 48
#define CRESUMABLE_CURLE_GOT_NOTHING 52
#define CRESUMABLE_CURLE_SEND_ERROR 55
#define CRESUMABLE_CURLE_RECV_ERROR 56
#define CRESUMABLE_CURLE_PEER_FAILED_VERIFICATION 60
#define CRESUMABLE_CURLE_BAD_CONTENT_ENCODING 61
#define CRESUMABLE_CURLE_HTTP2_STREAM 92
#define CRESUMABLE_CURLE_PROXY 97

// Results of multi operations (CURLMcode).
#define CRESUMABLE_CURLM_OK 0

// Transfer information (CURLINFO): LONG values are 0x200000 + n, OFF_T values 0x600000 + n (curl 7.88's curl.h).
/// The status a proxy answered CONNECT with, 0 when there was none.
#define CRESUMABLE_CURLINFO_HTTP_CONNECTCODE 2097174
/// A CURLproxycode after CURLE_PROXY (7.73 and later).
#define CRESUMABLE_CURLINFO_PROXY_ERROR 2097211
/// Microseconds until the transfer could begin (connection, TLS and any proxy tunnel done), 0 before that.
#define CRESUMABLE_CURLINFO_PRETRANSFER_TIME_T 6291509

/// Loads libcurl from `name` (a soname such as "libcurl.so.4" or a path) and resolves every entry point the
/// transport needs, calling curl_global_init once. Returns NULL when the library or a symbol is missing, with
/// the reason in `error` (always NUL-terminated when `capacity` > 0). Thread-safe; loading the same name again
/// returns a new table over the same library.
cresumable_curl *cresumable_curl_open(const char *name, char *error, size_t capacity);

void *cresumable_curl_easy_init(const cresumable_curl *curl);
void cresumable_curl_easy_cleanup(const cresumable_curl *curl, void *easy);
int cresumable_curl_easy_setopt_long(const cresumable_curl *curl, void *easy, int option, long value);
int cresumable_curl_easy_setopt_pointer(const cresumable_curl *curl, void *easy, int option, const void *value);
int cresumable_curl_easy_setopt_callback(
    const cresumable_curl *curl, void *easy, int option, cresumable_curl_data_callback callback);
const char *cresumable_curl_easy_strerror(const cresumable_curl *curl, int code);

/// Appends a copy of `line` to a header list (NULL starts one); returns the new list, or NULL when out of memory.
void *cresumable_curl_slist_append(const cresumable_curl *curl, void *list, const char *line);
void cresumable_curl_slist_free_all(const cresumable_curl *curl, void *list);

void *cresumable_curl_multi_init(const cresumable_curl *curl);
int cresumable_curl_multi_add_handle(const cresumable_curl *curl, void *multi, void *easy);
int cresumable_curl_multi_remove_handle(const cresumable_curl *curl, void *multi, void *easy);
int cresumable_curl_multi_perform(const cresumable_curl *curl, void *multi, int *running);
/// Waits up to `timeout_ms` for activity on the transfers' sockets or a wakeup.
int cresumable_curl_multi_poll(const cresumable_curl *curl, void *multi, int timeout_ms);
/// Makes a running or the next cresumable_curl_multi_poll return at once. Callable from any thread.
int cresumable_curl_multi_wakeup(const cresumable_curl *curl, void *multi);
int cresumable_curl_multi_cleanup(const cresumable_curl *curl, void *multi);
const char *cresumable_curl_multi_strerror(const cresumable_curl *curl, int code);

/// Reads the multi handle's next message. Returns 1 and sets `easy` and `result` when a transfer is done,
/// 0 when no such message is queued.
int cresumable_curl_multi_done(const cresumable_curl *curl, void *multi, void **easy, int *result);

/// curl_easy_getinfo for a LONG information; returns the CURLcode (CURLE_BAD_FUNCTION_ARGUMENT for an unknown one).
int cresumable_curl_easy_getinfo_long(const cresumable_curl *curl, void *easy, int info, long *value);
/// curl_easy_getinfo for an OFF_T information (curl_off_t is 64 bits everywhere curl runs).
int cresumable_curl_easy_getinfo_off_t(const cresumable_curl *curl, void *easy, int info, long long *value);

#endif
