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

/// Starts writing back the dirty pages of `count` bytes at `offset` without waiting for them
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; nothing elsewhere). Returns 0 or an errno value.
int cresumable_start_writeback(int descriptor, int64_t offset, int64_t count);

/// Renames `from` to `to` unless `to` exists, atomically (`renameat2(RENAME_NOREPLACE)` on Linux). Returns 0 or
/// an errno value: `EEXIST` when `to` exists; `EINVAL`/`ENOSYS` where the file system or kernel cannot.
int cresumable_rename_noreplace(const char *from, const char *to);

/// Catches the `count` signals in `numbers` with a handler that writes each signal's number, as one byte, to a
/// pipe (and unblocks them on the calling thread). Returns 0 or an errno value.
int cresumable_signals_install(const int *numbers, int count);

/// Waits for the next caught signal and returns its number; -1 when the pipe is unusable.
int cresumable_signals_next(void);

#endif
