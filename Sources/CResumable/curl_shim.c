// The run-time binding to libcurl declared in CResumableCurl.h: dlopen, dlsym, and thin typed wrappers around
// the variadic curl_easy_setopt (which Swift cannot call).
#include "CResumableCurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/// CURLMsg from multi.h: what curl_multi_info_read returns.
typedef struct {
    int msg;  // CURLMSG; CURLMSG_DONE is 1
    void *easy_handle;
    union {
        void *whatever;
        int result;  // CURLcode
    } data;
} cresumable_curl_message;

enum { CRESUMABLE_CURLMSG_DONE = 1, CRESUMABLE_CURL_GLOBAL_DEFAULT = 3 };

struct cresumable_curl {
    void *library;
    int (*global_init)(long flags);
    void *(*easy_init)(void);
    void (*easy_cleanup)(void *easy);
    int (*easy_setopt)(void *easy, int option, ...);
    const char *(*easy_strerror)(int code);
    void *(*slist_append)(void *list, const char *line);
    void (*slist_free_all)(void *list);
    void *(*multi_init)(void);
    int (*multi_add_handle)(void *multi, void *easy);
    int (*multi_remove_handle)(void *multi, void *easy);
    int (*multi_perform)(void *multi, int *running);
    int (*multi_poll)(void *multi, void *extra_fds, unsigned int extra_count, int timeout_ms, int *ready);
    int (*multi_wakeup)(void *multi);
    int (*multi_cleanup)(void *multi);
    const char *(*multi_strerror)(int code);
    cresumable_curl_message *(*multi_info_read)(void *multi, int *queued);
    int (*easy_getinfo)(void *easy, int info, ...);
};

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

static void set_error(char *error, size_t capacity, const char *format, const char *detail) {
    if (capacity == 0) return;
    snprintf(error, capacity, format, detail ? detail : "unknown reason");
}

cresumable_curl *cresumable_curl_open(const char *name, char *error, size_t capacity) {
    if (capacity > 0) error[0] = '\0';
    pthread_mutex_lock(&open_lock);
    cresumable_curl *curl = NULL;
    // RTLD_LOCAL: the symbols stay private to this table. When FoundationNetworking already loaded the same
    // library, dlopen returns that copy, so both share one libcurl.
    void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        set_error(error, capacity, "%s", dlerror());
        goto done;
    }
    curl = calloc(1, sizeof *curl);
    if (!curl) {
        set_error(error, capacity, "%s", "out of memory");
        goto done;
    }
    curl->library = library;
#define RESOLVE(field, symbol)                                                                     \
    do {                                                                                           \
        *(void **)(&curl->field) = dlsym(library, symbol);                                         \
        if (!curl->field) {                                                                        \
            set_error(error, capacity, "%s is missing (libcurl 7.68 or later is needed)", symbol); \
            goto failed;                                                                           \
        }                                                                                          \
    } while (0)
    RESOLVE(global_init, "curl_global_init");
    RESOLVE(easy_init, "curl_easy_init");
    RESOLVE(easy_cleanup, "curl_easy_cleanup");
    RESOLVE(easy_setopt, "curl_easy_setopt");
    RESOLVE(easy_strerror, "curl_easy_strerror");
    RESOLVE(slist_append, "curl_slist_append");
    RESOLVE(slist_free_all, "curl_slist_free_all");
    RESOLVE(multi_init, "curl_multi_init");
    RESOLVE(multi_add_handle, "curl_multi_add_handle");
    RESOLVE(multi_remove_handle, "curl_multi_remove_handle");
    RESOLVE(multi_perform, "curl_multi_perform");
    RESOLVE(multi_poll, "curl_multi_poll");
    RESOLVE(multi_wakeup, "curl_multi_wakeup");
    RESOLVE(multi_cleanup, "curl_multi_cleanup");
    RESOLVE(multi_strerror, "curl_multi_strerror");
    RESOLVE(multi_info_read, "curl_multi_info_read");
    RESOLVE(easy_getinfo, "curl_easy_getinfo");
#undef RESOLVE
    // Reference-counted by curl; never balanced by curl_global_cleanup, as the library is never unloaded.
    int initialized = curl->global_init(CRESUMABLE_CURL_GLOBAL_DEFAULT);
    if (initialized != CRESUMABLE_CURLE_OK) {
        set_error(error, capacity, "curl_global_init failed: %s", curl->easy_strerror(initialized));
        goto failed;
    }
    goto done;
failed:
    free(curl);
    curl = NULL;
    dlclose(library);
done:
    pthread_mutex_unlock(&open_lock);
    return curl;
}


void *cresumable_curl_easy_init(const cresumable_curl *curl) { return curl->easy_init(); }

void cresumable_curl_easy_cleanup(const cresumable_curl *curl, void *easy) { curl->easy_cleanup(easy); }

int cresumable_curl_easy_setopt_long(const cresumable_curl *curl, void *easy, int option, long value) {
    return curl->easy_setopt(easy, option, value);
}

int cresumable_curl_easy_setopt_pointer(const cresumable_curl *curl, void *easy, int option, const void *value) {
    return curl->easy_setopt(easy, option, value);
}

int cresumable_curl_easy_setopt_callback(
    const cresumable_curl *curl, void *easy, int option, cresumable_curl_data_callback callback) {
    return curl->easy_setopt(easy, option, callback);
}

const char *cresumable_curl_easy_strerror(const cresumable_curl *curl, int code) {
    return curl->easy_strerror(code);
}

void *cresumable_curl_slist_append(const cresumable_curl *curl, void *list, const char *line) {
    return curl->slist_append(list, line);
}

void cresumable_curl_slist_free_all(const cresumable_curl *curl, void *list) { curl->slist_free_all(list); }

void *cresumable_curl_multi_init(const cresumable_curl *curl) { return curl->multi_init(); }

int cresumable_curl_multi_add_handle(const cresumable_curl *curl, void *multi, void *easy) {
    return curl->multi_add_handle(multi, easy);
}

int cresumable_curl_multi_remove_handle(const cresumable_curl *curl, void *multi, void *easy) {
    return curl->multi_remove_handle(multi, easy);
}

int cresumable_curl_multi_perform(const cresumable_curl *curl, void *multi, int *running) {
    return curl->multi_perform(multi, running);
}

int cresumable_curl_multi_poll(const cresumable_curl *curl, void *multi, int timeout_ms) {
    int ready = 0;
    return curl->multi_poll(multi, NULL, 0, timeout_ms, &ready);
}

int cresumable_curl_multi_wakeup(const cresumable_curl *curl, void *multi) { return curl->multi_wakeup(multi); }

int cresumable_curl_multi_cleanup(const cresumable_curl *curl, void *multi) { return curl->multi_cleanup(multi); }

const char *cresumable_curl_multi_strerror(const cresumable_curl *curl, int code) {
    return curl->multi_strerror(code);
}

int cresumable_curl_multi_done(const cresumable_curl *curl, void *multi, void **easy, int *result) {
    int queued = 0;
    cresumable_curl_message *message;
    while ((message = curl->multi_info_read(multi, &queued)) != NULL) {
        if (message->msg == CRESUMABLE_CURLMSG_DONE) {
            *easy = message->easy_handle;
            *result = message->data.result;
            return 1;
        }
    }
    return 0;
}

int cresumable_curl_easy_getinfo_long(const cresumable_curl *curl, void *easy, int info, long *value) {
    *value = 0;
    return curl->easy_getinfo(easy, info, value);
}

int cresumable_curl_easy_getinfo_off_t(const cresumable_curl *curl, void *easy, int info, long long *value) {
    // curl_off_t is a 64-bit signed integer on every platform curl supports; long long is too.
    *value = 0;
    return curl->easy_getinfo(easy, info, value);
}
