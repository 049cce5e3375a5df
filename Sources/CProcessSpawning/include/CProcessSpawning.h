#ifndef C_PROCESS_SPAWNING_H
#define C_PROCESS_SPAWNING_H

#include <spawn.h>

/// posix_spawn_file_actions_addclosefrom_np: the child closes every descriptor from `from` on. glibc declares it
/// only under _GNU_SOURCE, which a Swift module's import of <spawn.h> does not define; 0 or an error number.
int resumable_spawn_add_close_from(posix_spawn_file_actions_t *actions, int from);

/// posix_spawn_file_actions_addchdir_np: the child changes to `path` before it runs; 0 or an error number.
int resumable_spawn_add_chdir(posix_spawn_file_actions_t *actions, const char *path);

/// Opens a new pseudo-terminal (posix_openpt, grantpt, unlockpt, ptsname_r): its primary side's descriptor, or -1
/// with errno set; the path of its terminal side in `name`. For tests that give a child a terminal.
int resumable_open_pseudo_terminal(char *name, unsigned long length);

#endif
