// Signals for the command-line tool, delivered through a pipe: the handler only writes one byte (async-signal
// safe), and a thread of the tool's reads it. libdispatch's signal sources on Linux can lose a signal that
// arrives while its own handler is being set up (swift-corelibs-libdispatch #695); this cannot.
#define _GNU_SOURCE
#include "CResumable.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int signal_pipe[2] = {-1, -1};

static void forward_signal(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    ssize_t ignored = write(signal_pipe[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

int cresumable_signals_install(const int *numbers, int count) {
    if (signal_pipe[0] < 0) {
#if defined(__linux__)
        if (pipe2(signal_pipe, O_CLOEXEC) != 0) return errno;
#else
        // No pipe2 on Darwin: pipe, then close-on-exec on each end (the tool starts no process in between).
        if (pipe(signal_pipe) != 0) return errno;
        if (fcntl(signal_pipe[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(signal_pipe[1], F_SETFD, FD_CLOEXEC) != 0) {
            return errno;
        }
#endif
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int index = 0; index < count; index++) {
        if (sigaction(numbers[index], &action, NULL) != 0) return errno;
        sigset_t unblocked;
        sigemptyset(&unblocked);
        sigaddset(&unblocked, numbers[index]);
        pthread_sigmask(SIG_UNBLOCK, &unblocked, NULL);
    }
    return 0;
}

int cresumable_signals_next(void) {
    unsigned char byte = 0;
    for (;;) {
        ssize_t count = read(signal_pipe[0], &byte, 1);
        if (count == 1) return byte;
        if (count < 0 && errno == EINTR) continue;
        return -1;
    }
}
