#ifndef CRESUMABLE_H
#define CRESUMABLE_H

#include <stddef.h>
#include <stdint.h>

#include "CResumableCurl.h"

/// Incremental SHA-256 (FIPS 180-4).
typedef struct {
    uint32_t state[8];
    uint64_t length;
    uint8_t buffer[64];
    size_t buffered;
} cresumable_sha256_context;

void cresumable_sha256_init(cresumable_sha256_context *context);
void cresumable_sha256_update(cresumable_sha256_context *context, const void *data, size_t count);
void cresumable_sha256_final(cresumable_sha256_context *context, uint8_t digest[32]);

/// Incremental SHA-256 through the system's libcrypto when it could be loaded (`dlopen` of `libcrypto.so.3`,
/// `libcrypto.so.1.1` or `libcrypto.so`, once per process; never linked), through the portable code otherwise.
/// A plain value: it may be moved in memory; only `evp` points at memory of libcrypto's.
typedef struct {
    void *evp;  ///< libcrypto's `EVP_MD_CTX`, or NULL when the portable code runs.
    int failed;  ///< Nonzero after libcrypto reported an error, or after a libcrypto digest was finalized.
    cresumable_sha256_context portable;
} cresumable_sha256_hasher;

/// Whether libcrypto and all six functions used (`EVP_MD_CTX_new`, `EVP_MD_CTX_free`, `EVP_sha256`,
/// `EVP_DigestInit_ex`, `EVP_DigestUpdate`, `EVP_DigestFinal_ex`) were found. Loads the library on first call;
/// thread-safe.
int cresumable_sha256_libcrypto_available(void);

/// Starts a digest: with libcrypto unless `portable_only` is nonzero or libcrypto is unavailable or fails to start
/// one. Never fails. Pair with `cresumable_sha256_hasher_destroy`.
void cresumable_sha256_hasher_init(cresumable_sha256_hasher *hasher, int portable_only);

/// 1 when the digest runs in libcrypto, 0 when it runs in the portable code.
int cresumable_sha256_hasher_uses_libcrypto(const cresumable_sha256_hasher *hasher);

/// Adds `count` bytes; a libcrypto error is remembered and reported by `cresumable_sha256_hasher_final`.
void cresumable_sha256_hasher_update(cresumable_sha256_hasher *hasher, const void *data, size_t count);

/// Writes the digest of everything added and returns 0, or returns -1 when libcrypto reported an error (or the
/// libcrypto digest was already finalized).
int cresumable_sha256_hasher_final(cresumable_sha256_hasher *hasher, uint8_t digest[32]);

/// Frees what libcrypto allocated for the digest; idempotent.
void cresumable_sha256_hasher_destroy(cresumable_sha256_hasher *hasher);

/// Starts writing back the dirty pages of `count` bytes at `offset` without waiting for them
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; nothing elsewhere). Returns 0 or an errno value.
int cresumable_start_writeback(int descriptor, int64_t offset, int64_t count);

/// Extends the file to `length` bytes with allocated blocks (`fallocate`, 8 MiB at a time so that writers are not held
/// for the whole length) where the file system allows, else as a sparse file (`ftruncate`), and always as a sparse file
/// on tmpfs, where allocating only zeroes memory the writes overwrite; never shrinks it. Returns 0 or an errno value
/// (`ENOSPC` when the free space cannot hold what is missing, checked first, so the disk is left as it was; only a disk
/// filled by someone else meanwhile leaves the file longer than before).
int cresumable_preallocate(int descriptor, int64_t length);

/// Whether the file behind `descriptor` lives in memory (tmpfs), where `cresumable_preallocate` reserves no pages:
/// 1 or 0 (0 also when it cannot tell).
int cresumable_is_in_memory(int descriptor);

/// Copies the bytes `offset..<offset + length` of `from` to the same offsets of `to`: in the kernel
/// (`copy_file_range`, which may share blocks where the file system can) or, where that cannot be used between these
/// files, with `pread`/`pwrite`. Returns how many bytes were copied (fewer than `length` when `from` ends first), or
/// a negated errno value.
int64_t cresumable_copy_range(int from, int to, int64_t offset, int64_t length);

/// Renames `from` to `to` unless `to` exists, atomically (`renameat2(RENAME_NOREPLACE)` on Linux). Returns 0 or
/// an errno value: `EEXIST` when `to` exists; `EINVAL`/`ENOSYS` where the file system or kernel cannot.
int cresumable_rename_noreplace(const char *from, const char *to);

/// Swaps the names `from` and `to` atomically, both of which must exist (`renameat2(RENAME_EXCHANGE)` on Linux,
/// `renamex_np(RENAME_SWAP)` on Darwin). Returns 0 or an errno value: `ENOENT` when either is missing;
/// `EINVAL`/`ENOSYS`/`ENOTSUP` where the file system or kernel cannot.
int cresumable_rename_exchange(const char *from, const char *to);

/// Catches the `count` signals in `numbers` with a handler that writes each signal's number, as one byte, to a
/// pipe (and unblocks them on the calling thread). Returns 0 or an errno value.
int cresumable_signals_install(const int *numbers, int count);

/// Waits for the next caught signal and returns its number; -1 when the pipe is unusable.
int cresumable_signals_next(void);

/// Fills `count` bytes with random bytes from the kernel's generator in one call (`getrandom` on Linux,
/// `arc4random_buf` on Darwin). Returns 0, or -1 when it could not (the bytes are then unspecified).
int cresumable_random_bytes(void *bytes, size_t count);

#endif
