#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#if defined(__linux__)
#include <linux/magic.h>
#include <sys/vfs.h>
#endif
#include <unistd.h>

#include "CResumable.h"

int cresumable_is_in_memory(int descriptor) {
#if defined(__linux__)
    struct statfs kind;
    return fstatfs(descriptor, &kind) == 0 && kind.f_type == TMPFS_MAGIC;
#else
    (void)descriptor;
    return 0;
#endif
}

int cresumable_preallocate(int descriptor, int64_t length) {
    struct stat status;
    if (fstat(descriptor, &status) != 0) return errno;
    if (status.st_size >= length) return 0;
#if defined(__linux__)
    // A piece at a time fills the disk before the piece that does not fit fails, and a failure must leave the disk as
    // it was (the file keeps what the segments wrote meanwhile, so nothing allocated can be given back): the space is
    // checked first, as one fallocate of the whole length does.
    // A file system that does not count its blocks (tmpfs with size=0, ramfs, many FUSE ones) reports 0 of them: not
    // full, unknown. The blocks reserved for the superuser are not counted as free: a superuser without
    // CAP_SYS_RESOURCE (a container) cannot allocate them, and a download has no business filling them anyway.
    struct statvfs space;
    if (fstatvfs(descriptor, &space) == 0 && space.f_frsize > 0 && space.f_blocks > 0) {
        int64_t allocated = (int64_t)status.st_blocks * 512;
        int64_t needed = length - allocated;
        uint64_t available = (uint64_t)space.f_bavail;
        // Whole blocks, rounded up: a file one byte too large must not pass.
        if (needed > 0 && ((uint64_t)needed - 1) / space.f_frsize + 1 > available) return ENOSPC;
    }
    // tmpfs keeps files in memory: fallocate there zeroes every page (about 30 ms of CPU per 100 MiB, taken from the
    // connections that are starting), pages the segments overwrite anyway, and it brings no contiguous blocks. A sparse
    // file of the full length instead, after the space check above. What is given up: the pages are not reserved, so
    // another writer may fill the file system meanwhile; the download then fails with ENOSPC (diskFull) and a token
    // that lists what was written, as on a file system without fallocate.
    int inMemory = cresumable_is_in_memory(descriptor);
    // A piece at a time: fallocate holds the file's lock while it works, and the segments writing meanwhile would
    // wait for the whole length at once.
    const off_t piece = (off_t)8 << 20;
    off_t start = 0;
    while (!inMemory && start < (off_t)length) {
        off_t count = (off_t)length - start < piece ? (off_t)length - start : piece;
        if (fallocate(descriptor, 0, start, count) == 0) {
            start += count;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno != EOPNOTSUPP && errno != ENOSYS) return errno;
        break;
    }
    if (start >= (off_t)length) return 0;
#endif
    // No fallocate here: a sparse file of the full length; blocks are allocated as segments are written.
    while (ftruncate(descriptor, (off_t)length) != 0) {
        if (errno != EINTR) return errno;
    }
    return 0;
}
