/* A waiting record lock (F_SETLKW) and a signal handler, as the kernel treats them (signal(7)):
 * a handler installed without SA_RESTART ends the wait with EINTR; one with SA_RESTART runs and
 * the wait goes on until the lock is granted. Usage: restart FILE (on a served pool, through the
 * shim). The parent holds bytes 0..10 for a second; the child waits for them twice. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t rings;
static void ring(int s) { (void)s; rings++; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int child(const char *path) {
    int f = open(path, O_RDWR);
    if (f < 0) { perror("child open"); return 1; }
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    for (int restart = 0; restart <= 1; restart++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = ring;
        sa.sa_flags = restart ? SA_RESTART : 0;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, 0);
        rings = 0;
        struct itimerval it = {{0, 0}, {0, 200000}};
        setitimer(ITIMER_REAL, &it, 0);
        double t0 = now();
        int r = fcntl(f, F_SETLKW, &l);
        int e = errno;
        printf("%s r=%d errno=%s rings=%d waited=%s\n", restart ? "restart" : "interrupt", r,
               r == 0 ? "0" : e == EINTR ? "EINTR" : strerror(e), (int)rings,
               now() - t0 > 0.5 ? "long" : "short");
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_CREAT | O_RDWR, 0644);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    if (fd < 0 || fcntl(fd, F_SETLK, &l) != 0) { perror("hold"); return 1; }
    pid_t c = fork();
    if (c == 0) _exit(child(argv[1]));
    sleep(1);
    close(fd); /* lets go of the lock */
    int st;
    waitpid(c, &st, 0);
    printf("child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
