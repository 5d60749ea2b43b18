/* The variadic exec calls (execl, execlp, execle): their argument lists are read with va_list
 * here, which stable Rust cannot do, and passed on to the shim's execv, execvp and execve (the
 * Rust definitions in this library), which hand the pool session over. Rust exports the
 * public names as jumps to these (exec.rs), so the caller's registers and stack arrive intact. */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* Most arguments one call may pass: the vector lives on the stack (a vfork child must not
 * allocate), 512 KiB at this limit. */
#define MAX_ARGS 65536

/* How many arguments follow `arg` up to and including the NULL; -1 past MAX_ARGS. */
static long count_args(const char *arg, va_list ap) {
    long n = 1;
    for (const char *a = arg; a != NULL; a = va_arg(ap, const char *)) {
        if (++n > MAX_ARGS)
            return -1;
    }
    return n;
}

/* Fill argv with `arg` and what follows, NULL included; returns what follows the NULL. */
static void fill_args(char **argv, const char *arg, va_list ap) {
    long i = 0;
    argv[i] = (char *)arg;
    while (argv[i] != NULL) {
        i++;
        argv[i] = va_arg(ap, char *);
    }
}

#define EXEC_L(fn, call)                                                                  \
    int fn(const char *path, const char *arg, ...) {                                      \
        va_list ap;                                                                       \
        va_start(ap, arg);                                                                \
        long n = count_args(arg, ap);                                                     \
        va_end(ap);                                                                       \
        if (n < 0) {                                                                      \
            errno = E2BIG;                                                                \
            return -1;                                                                    \
        }                                                                                 \
        char *argv[n];                                                                    \
        va_start(ap, arg);                                                                \
        fill_args(argv, arg, ap);                                                         \
        va_end(ap);                                                                       \
        return call;                                                                      \
    }

EXEC_L(pmkit_execl, execv(path, argv))
EXEC_L(pmkit_execlp, execvp(path, argv))

int pmkit_execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    long n = count_args(arg, ap);
    va_end(ap);
    if (n < 0) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n];
    va_start(ap, arg);
    fill_args(argv, arg, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
