#include "CResumable.h"

#include <errno.h>

#if defined(__APPLE__)
#include <stdlib.h>
#else
#include <sys/random.h>
#endif

int cresumable_random_bytes(void *bytes, size_t count) {
#if defined(__APPLE__)
    arc4random_buf(bytes, count);
    return 0;
#else
    size_t done = 0;
    while (done < count) {
        ssize_t got = getrandom((char *)bytes + done, count - done, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
#endif
}
