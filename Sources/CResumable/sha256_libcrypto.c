// SHA-256 through the system's libcrypto (OpenSSL), loaded at run time like libcurl: never linked, no headers.
// libcrypto picks the fastest code the CPU has (SHA-NI, AVX2); where it is missing, or lacks a function, or
// fails to start a digest, the portable code in sha256.c runs instead. Nothing here ever aborts.
#include "CResumable.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

/// The libcrypto entry points, resolved once; `available` is 1 only when every one of them was found.
static struct {
    int available;
    void *(*md_ctx_new)(void);
    void (*md_ctx_free)(void *context);
    const void *(*sha256)(void);
    int (*digest_init_ex)(void *context, const void *type, void *engine);
    int (*digest_update)(void *context, const void *data, size_t count);
    int (*digest_final_ex)(void *context, unsigned char *digest, unsigned int *count);
} libcrypto;

static pthread_once_t libcrypto_once = PTHREAD_ONCE_INIT;

static void load_libcrypto(void) {
    // OpenSSL 3, then 1.1 (same EVP API; EVP_MD_CTX_new exists since 1.1), then the development symlink.
    static const char *const names[] = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        // RTLD_LOCAL: the symbols stay private to this table. When libcurl already loaded the same library,
        // dlopen returns that copy. The library is never unloaded.
        void *library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!library) continue;
        int resolved = 1;
#define RESOLVE(field, symbol)                                           \
    do {                                                                 \
        *(void **)(&libcrypto.field) = dlsym(library, symbol);           \
        if (!libcrypto.field) resolved = 0;                              \
    } while (0)
        RESOLVE(md_ctx_new, "EVP_MD_CTX_new");
        RESOLVE(md_ctx_free, "EVP_MD_CTX_free");
        RESOLVE(sha256, "EVP_sha256");
        RESOLVE(digest_init_ex, "EVP_DigestInit_ex");
        RESOLVE(digest_update, "EVP_DigestUpdate");
        RESOLVE(digest_final_ex, "EVP_DigestFinal_ex");
#undef RESOLVE
        if (resolved && libcrypto.sha256()) {
            libcrypto.available = 1;
            return;
        }
        memset(&libcrypto, 0, sizeof libcrypto);
        dlclose(library);
    }
}

int cresumable_sha256_libcrypto_available(void) {
    pthread_once(&libcrypto_once, load_libcrypto);
    return libcrypto.available;
}

void cresumable_sha256_hasher_init(cresumable_sha256_hasher *hasher, int portable_only) {
    hasher->evp = NULL;
    hasher->failed = 0;
    cresumable_sha256_init(&hasher->portable);
    if (portable_only || !cresumable_sha256_libcrypto_available()) return;
    void *context = libcrypto.md_ctx_new();
    if (!context) return;
    if (libcrypto.digest_init_ex(context, libcrypto.sha256(), NULL) != 1) {
        libcrypto.md_ctx_free(context);
        return;
    }
    hasher->evp = context;
}

int cresumable_sha256_hasher_uses_libcrypto(const cresumable_sha256_hasher *hasher) { return hasher->evp != NULL; }

void cresumable_sha256_hasher_update(cresumable_sha256_hasher *hasher, const void *data, size_t count) {
    if (count == 0 || hasher->failed) return;
    if (!hasher->evp) {
        cresumable_sha256_update(&hasher->portable, data, count);
        return;
    }
    if (libcrypto.digest_update(hasher->evp, data, count) != 1) hasher->failed = 1;
}

int cresumable_sha256_hasher_final(cresumable_sha256_hasher *hasher, uint8_t digest[32]) {
    if (hasher->failed) return -1;
    if (!hasher->evp) {
        cresumable_sha256_context copy = hasher->portable;
        cresumable_sha256_final(&copy, digest);
        return 0;
    }
    unsigned int count = 0;
    if (libcrypto.digest_final_ex(hasher->evp, digest, &count) != 1 || count != 32) {
        hasher->failed = 1;
        return -1;
    }
    // A libcrypto context cannot be finalized twice; a second call reports failure instead.
    hasher->failed = 1;
    return 0;
}

void cresumable_sha256_hasher_destroy(cresumable_sha256_hasher *hasher) {
    if (hasher->evp) libcrypto.md_ctx_free(hasher->evp);
    hasher->evp = NULL;
}
