/* The libc `bgtask`'s front needs: it is Embedded Swift, which imports no Glibc module. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* SIG_IGN is a cast Swift does not import. */
static inline void bgt_front_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }
/* open(2) is variadic and errno a macro: neither is imported. */
static inline int bgt_front_open_read(const char *path) { return open(path, O_RDONLY | O_CLOEXEC); }
static inline int bgt_front_errno(void) { return errno; }
