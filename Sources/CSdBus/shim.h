/* sd-bus's declarations (libsystemd, opened with dlopen only when a submit is sent: a command handed to the full CLI
 * does not load it and its five libraries) and the libc `bgtask`'s front needs: it is Embedded Swift, which
 * imports no Glibc module. */
#include <systemd/sd-bus.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SIG_IGN is a cast Swift does not import. */
static inline void bgt_front_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }
/* open(2) is variadic and errno a macro: neither is imported. */
#include <fcntl.h>
static inline int bgt_front_open_read(const char *path) { return open(path, O_RDONLY | O_CLOEXEC); }
static inline int bgt_front_errno(void) { return errno; }
