#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
/* Linux-only calls that Glibc's Swift overlay does not import (they need _GNU_SOURCE or linux/ headers). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <signal.h>
#include <sched.h>
#include <spawn.h>
#include <sys/stat.h>
#include <stdio.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <malloc.h>
#include <linux/falloc.h>

int pipe2(int pipefd[2], int flags);
/* glibc ≥ 2.34 declares these only under _GNU_SOURCE, which the Swift importer does not set here. */
int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);
int fallocate(int fd, int mode, off_t offset, off_t len);

/* An unnamed regular file in `dir` (O_TMPFILE), write-only, 0600 before the umask; -errno where the kernel or the
 * filesystem has none. linkat(2) through /proc/self/fd gives it a name later. */
static inline int bgt_open_tmpfile(const char *dir) {
    int fd = open(dir, __O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);   /* O_TMPFILE, a _GNU_SOURCE name */
    return fd >= 0 ? fd : -errno;
}

/* Removes [0, len) of a file in one step, atomic against a writer appending to it: COLLAPSE_RANGE moves the
 * rest to the front (ext4, xfs; len a multiple of the block size); where that is not supported, PUNCH_HOLE
 * frees the range's blocks and keeps the length (tmpfs, btrfs). 1 collapsed, 2 punched, or -errno. */
static inline int bgt_drop_front(int fd, off_t len) {
    if (fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, len) == 0) return 1;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, len) == 0) return 2;
    return -errno;
}

/* Where a file's first data is (after a punched hole), 0 if it is all hole or lseek cannot tell. */
static inline off_t bgt_first_data(int fd) {
    off_t at = lseek(fd, 0, 3 /* SEEK_DATA: <unistd.h> has it only under _GNU_SOURCE */);
    return at < 0 ? 0 : at;
}

/* A non-blocking, close-on-exec pipe; 0 or -errno. */
static inline int bgt_pipe(int fds[2]) {
    return pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0 ? 0 : -errno;
}

/* rtnetlink socket subscribed to link and route changes; fd or -errno. */
static inline int bgt_rtnetlink_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd < 0) return -errno;
    struct sockaddr_nl addr;
    memset(&addr, 0, sizeof addr);
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { int e = errno; close(fd); return -e; }
    return fd;
}
/* Every signal whose default action ends a process and that can be caught: bgtask must never die of
 * one with a child left frozen. The fault signals are in it too, for when another process sends them
 * (kill -ABRT): a real fault is synchronous, and the kernel unblocks it and ends the process as before. */
static inline void bgt_terminating_signals(sigset_t *set) {
    int sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
                   SIGXCPU, SIGXFSZ, SIGPWR, SIGSTKFLT, SIGIO,
                   SIGABRT, SIGBUS, SIGTRAP, SIGSYS, SIGSEGV, SIGILL, SIGFPE };
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(set, sigs[i]);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++) sigaddset(set, s);
}

/* Blocks the signals bgtask forwards, and SIGCHLD, in this thread and every thread it starts later,
 * and returns a signalfd that reads them; -errno on failure. SIGPIPE is ignored: a closed stderr must
 * not kill bgtask (the spawned command gets every disposition reset to default). */
static inline int bgt_signalfd_forwarded(void) {
    sigset_t set;
    sigemptyset(&set);
    bgt_terminating_signals(&set);
    sigaddset(&set, SIGCHLD);
    signal(SIGPIPE, SIG_IGN);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) return -EINVAL;
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* The next pending signal number from a signalfd, or 0. */
static inline int bgt_signalfd_read(int fd) {
    struct signalfd_siginfo si;
    ssize_t n = read(fd, &si, sizeof si);
    return n == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
}

/* Where execvp would find `file` on the colon-separated `path_list` (NULL: glibc's default), for a child whose
 * working directory is `base` (NULL: this process's), into `buf`: 0, or the errno an exec would fail with (ENOENT:
 * nowhere; EACCES: found, not executable). No chdir: the caller may have threads. */
static inline int bgt_which(const char *file, const char *path_list, const char *base, char *buf, size_t size) {
    if (*file == 0) return ENOENT;
    if (path_list == NULL) path_list = "/bin:/usr/bin";
    int has_slash = strchr(file, '/') != NULL, denied = 0;
    for (const char *p = has_slash ? "" : path_list;;) {
        const char *end = has_slash ? NULL : strchr(p, ':');
        int len = end != NULL ? (int)(end - p) : (int)strlen(p);
        /* An empty element is the working directory, as for execvp; a relative one is relative to it. */
        const char *dir = len > 0 ? p : ".";
        int dlen = len > 0 ? len : 1;
        int w = has_slash
            ? (file[0] == '/' || base == NULL ? snprintf(buf, size, "%s", file) : snprintf(buf, size, "%s/%s", base, file))
            : (dir[0] == '/' || base == NULL ? snprintf(buf, size, "%.*s/%s", dlen, dir, file)
                                             : snprintf(buf, size, "%s/%.*s/%s", base, dlen, dir, file));
        if (w < (int)size) {
            struct stat st;
            if (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode)) {
                if (access(buf, X_OK) == 0) return 0;
                denied = 1;
            } else if (has_slash) {
                return stat(buf, &st) == 0 ? EACCES : errno;
            }
        } else if (has_slash) {
            return ENAMETOOLONG;
        }
        if (end == NULL) break;
        p = end + 1;
    }
    return denied ? EACCES : ENOENT;
}

/* Spawns argv[0] (searched in the PATH of envp, as the shell that runs it will) in a new process group with the
 * signal mask and dispositions reset; with idle != 0, then moved to the SCHED_IDLE class (glibc's
 * posix_spawnattr_setschedpolicy accepts only OTHER, FIFO and RR, so the parent sets it right after the spawn).
 * Returns the pid or -errno.
 *
 * The command is started through /bin/sh, which runs it only if its parent is still the spawning process: a
 * spawner killed while its child is between clone and exec (glibc's vfork child, which still shows the spawner's
 * environment, not the task's run token) would otherwise leave a command running that nothing knows of — the
 * crash recovery finds a task's processes by that token. After the shell's exec the token is in its environment,
 * so a spawner that dies after the check is found out by its recovery; one that died before it fails the check. */
/* out_fd >= 0: the child's stdout and stderr (and stdin from /dev/null); dir: its working directory. */
static inline pid_t bgt_spawn(char *const argv[], char *const envp[], int idle, int out_fd, const char *dir) {
    const char *path_list = NULL;
    for (char *const *e = envp; *e != NULL; e++) if (strncmp(*e, "PATH=", 5) == 0) { path_list = *e + 5; break; }
    char found[4096];
    int missing = bgt_which(argv[0], path_list, dir, found, sizeof found);
    if (missing != 0) return -missing;
    int n = 0;
    while (argv[n] != NULL) n++;
    char ppid[24];
    snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
    char *guarded[n + 5];
    int guard = access("/bin/sh", X_OK) == 0;
    if (guard) {
        guarded[0] = "/bin/sh";
        guarded[1] = "-c";
        guarded[2] = "[ \"$PPID\" = \"$0\" ] && exec \"$@\"";
        guarded[3] = ppid;
        for (int i = 0; i <= n; i++) guarded[4 + i] = argv[i];
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_fd >= 0) {
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
        posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
        /* A daemon's task inherits none of the daemon's descriptors (its bus, its database, its lock). */
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    }
    if (dir != NULL) posix_spawn_file_actions_addchdir_np(&fa, dir);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    int rc = guard ? posix_spawn(&pid, guarded[0], &fa, &attr, guarded, envp)
                   : posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -rc;
    if (idle) {
        struct sched_param sp = { .sched_priority = 0 };
        sched_setscheduler(pid, 5 /* SCHED_IDLE, a _GNU_SOURCE name */, &sp);
    }
    return pid;
}

/* Idle I/O class for a process group (ioprio_set(IOPRIO_WHO_PGRP, pgid, IOPRIO_CLASS_IDLE)). */
static inline int bgt_ioprio_idle(pid_t pgid) {
    long rc = syscall(SYS_ioprio_set, 2 /* IOPRIO_WHO_PGRP */, pgid, (3 /* IDLE */ << 13));
    return rc < 0 ? -errno : 0;
}

/* A pidfd for any process (not only a child): readable when it exits. -errno on failure. */
static inline int bgt_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
#else
    long fd = syscall(434, pid, 0);
#endif
    return fd < 0 ? -errno : (int)fd;
}

static inline int bgt_nice_group(pid_t pgid, int nice) {
    return setpriority(PRIO_PGRP, (id_t)pgid, nice) == 0 ? 0 : -errno;
}
#endif
