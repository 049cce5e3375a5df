// Early writeback, so that the flush before a finished file is moved into place has little left to do.
#define _GNU_SOURCE
#include "CResumable.h"

#include <errno.h>
#include <fcntl.h>

int cresumable_start_writeback(int descriptor, int64_t offset, int64_t count) {
#if defined(__linux__)
    if (sync_file_range(descriptor, (off_t)offset, (off_t)count, SYNC_FILE_RANGE_WRITE) != 0) return errno;
#else
    (void)descriptor;
    (void)offset;
    (void)count;
#endif
    return 0;
}
