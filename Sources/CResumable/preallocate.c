#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "CResumable.h"

int cresumable_preallocate(int descriptor, int64_t length) {
    struct stat status;
    if (fstat(descriptor, &status) != 0) return errno;
    if (status.st_size >= length) return 0;
#if defined(__linux__)
    for (;;) {
        if (fallocate(descriptor, 0, 0, (off_t)length) == 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EOPNOTSUPP && errno != ENOSYS) return errno;
        break;
    }
#endif
    // No fallocate here: a sparse file of the full length; blocks are allocated as segments are written.
    while (ftruncate(descriptor, (off_t)length) != 0) {
        if (errno != EINTR) return errno;
    }
    return 0;
}
