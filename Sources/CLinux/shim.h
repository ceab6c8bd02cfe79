#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
/* Linux-only calls that Glibc's Swift overlay does not import (they need _GNU_SOURCE or linux/ headers). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

int pipe2(int pipefd[2], int flags);

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
#endif
