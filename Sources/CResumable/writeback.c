// Early writeback, so that the flush before a finished file is moved into place has little left to do.
#define _GNU_SOURCE
#include "CResumable.h"

#include <errno.h>
#include <fcntl.h>

int cresumable_start_writeback(int descriptor, int64_t offset, int64_t count) {
#if defined(__linux__)
    // Darwin has no sync_file_range and no equivalent that starts writeback without waiting: nothing there (the
    // final F_FULLFSYNC does all the writing).
    if (sync_file_range(descriptor, (off_t)offset, (off_t)count, SYNC_FILE_RANGE_WRITE) != 0) return errno;
#else
    (void)descriptor;
    (void)offset;
    (void)count;
#endif
    return 0;
}

#include <stdio.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

int cresumable_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    // RENAME_NOREPLACE (1): fails with EEXIST instead of replacing. Called through syscall(2) so that an
    // older C library without a renameat2 wrapper still builds.
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1) != 0) return errno;
    return 0;
#elif defined(__APPLE__)
    // Darwin's equivalent (macOS 10.12+, declared in <stdio.h>): fails with EEXIST instead of replacing.
    if (renamex_np(from, to, RENAME_EXCL) != 0) return errno;
    return 0;
#else
    (void)from;
    (void)to;
    return ENOSYS;
#endif
}

int cresumable_rename_exchange(const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    // RENAME_EXCHANGE (2): both names stay taken throughout; each now names the other's file.
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 2) != 0) return errno;
    return 0;
#elif defined(__APPLE__)
    if (renamex_np(from, to, RENAME_SWAP) != 0) return errno;
    return 0;
#else
    (void)from;
    (void)to;
    return ENOSYS;
#endif
}
