/* The benchmark's command: prints CLOCK_MONOTONIC (ns) as its first act, so the bench can time
 * from a uevent to the first instruction of the command that was waiting for it. */
#include <stdio.h>
#include <time.h>

int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return 0;
}
