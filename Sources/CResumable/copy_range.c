#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "CResumable.h"

/// Copies with pread/pwrite, for file systems and kernels without copy_file_range between these files.
static int64_t copy_by_reading(int from, int to, int64_t offset, int64_t length) {
    enum { chunk = 1 << 20 };
    char *buffer = malloc(chunk);
    if (buffer == NULL) return -ENOMEM;
    int64_t copied = 0;
    while (copied < length) {
        size_t wanted = (size_t)(length - copied < chunk ? length - copied : chunk);
        ssize_t count = pread(from, buffer, wanted, (off_t)(offset + copied));
        if (count < 0) {
            if (errno == EINTR) continue;
            int error = errno;
            free(buffer);
            return -error;
        }
        if (count == 0) break;
        ssize_t done = 0;
        while (done < count) {
            ssize_t written = pwrite(to, buffer + done, (size_t)(count - done), (off_t)(offset + copied + done));
            if (written < 0) {
                if (errno == EINTR) continue;
                int error = errno;
                free(buffer);
                return -error;
            }
            if (written == 0) {
                free(buffer);
                return -EIO;
            }
            done += written;
        }
        copied += count;
    }
    free(buffer);
    return copied;
}

int64_t cresumable_copy_range(int from, int to, int64_t offset, int64_t length) {
    if (offset < 0 || length < 0) return -EINVAL;
    int64_t copied = 0;
#if defined(__linux__)
    while (copied < length) {
        loff_t in = (loff_t)(offset + copied);
        loff_t out = in;
        size_t wanted = (size_t)(length - copied < (1 << 30) ? length - copied : (1 << 30));
        ssize_t count = copy_file_range(from, &in, to, &out, wanted, 0);
        if (count > 0) {
            copied += count;
            continue;
        }
        if (count == 0) return copied;  // The source ends here.
        if (errno == EINTR) continue;
        if (errno != ENOSYS && errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != EPERM) {
            return -errno;
        }
        break;  // Not between these files: copy the rest by reading.
    }
#endif
    if (copied == length) return copied;
    int64_t rest = copy_by_reading(from, to, offset + copied, length - copied);
    return rest < 0 ? rest : copied + rest;
}
