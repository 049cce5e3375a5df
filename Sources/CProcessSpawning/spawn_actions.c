#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <unistd.h>

#include "CProcessSpawning.h"

int resumable_spawn_add_close_from(posix_spawn_file_actions_t *actions, int from) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
#else
    (void)actions;
    (void)from;
    return ENOSYS;
#endif
}

int resumable_spawn_add_chdir(posix_spawn_file_actions_t *actions, const char *path) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
    return posix_spawn_file_actions_addchdir_np(actions, path);
#else
    (void)actions;
    (void)path;
    return ENOSYS;
#endif
}

int resumable_open_pseudo_terminal(char *name, unsigned long length) {
    int primary = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (primary < 0) return -1;
    if (grantpt(primary) != 0 || unlockpt(primary) != 0 || ptsname_r(primary, name, length) != 0) {
        int saved = errno;
        close(primary);
        errno = saved;
        return -1;
    }
    return primary;
}
