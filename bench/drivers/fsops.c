/* fsops: N file operations of one kind, timed by the program itself (`pmkit bench fs-layers`).
 *
 * Built twice by the bench with `cc -O2`: plainly, on the POSIX calls (for a kernel mount, a
 * FUSE mount or the LD_PRELOAD shim), and with -DPMFS_LIB on the PMFS C ABI (pmfs.h,
 * -lpmkit_fs: the library in process).
 *
 * Usage: fsops OP N PLACE
 *   OP     read4k | write4k | create | stat | stat_mapped | append4k_fsync
 *          (stat_mapped: stat with the path in an anonymous mmap'd buffer, where Python's and
 *          most multi-threaded programs' heaps put strings; stat's is a stack buffer)
 *   N      operations to time (0: the setup alone, the baseline of a traced run)
 *   PLACE  POSIX: a directory; PMFS_LIB: the pool file (the work goes to its root)
 * The work goes to a new directory OP-N there. The setup (a 16 MiB file written for read4k
 * and write4k, an empty file for the stats and the append, the directory for create) runs first;
 * then the program prints "ready", waits for a line on stdin (so a measurer can read the other
 * processes' counters), runs the N operations and prints one line: "ns=WALL user_us=U
 * sys_us=S" (its own wall clock and CPU over the N operations alone). Errors go to stderr with
 * exit status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Under valgrind's callgrind the N operations are counted alone: zeroed at "go", dumped (to
 * OUT.1) after the last one. Outside valgrind these are a few instructions that do nothing. */
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS
#endif

#ifdef PMFS_LIB
#include <pmfs.h>
static pmfs_t *fs;
#define OPEN(p, f, m) pmfs_open(fs, p, f, m)
#define CLOSE(fd) pmfs_close(fs, fd)
#define PREAD(fd, b, n, o) pmfs_pread(fs, fd, b, n, o)
#define PWRITE(fd, b, n, o) pmfs_pwrite(fs, fd, b, n, o)
#define WRITE(fd, b, n) pmfs_write(fs, fd, b, n)
#define FSYNC(fd) pmfs_fsync(fs, fd)
#define STAT(p, st) pmfs_stat(fs, p, st)
#define MKDIR(p, m) pmfs_mkdir(fs, p, m)
#define WHY() pmfs_errmsg()
#else
#define OPEN(p, f, m) open(p, f, m)
#define CLOSE(fd) close(fd)
#define PREAD(fd, b, n, o) pread(fd, b, n, o)
#define PWRITE(fd, b, n, o) pwrite(fd, b, n, o)
#define WRITE(fd, b, n) write(fd, b, n)
#define FSYNC(fd) fsync(fd)
#define STAT(p, st) stat(p, st)
#define MKDIR(p, m) mkdir(p, m)
#define WHY() strerror(errno)
#endif

#define BLOCK 4096
#define FILE_BYTES (16u << 20) /* the read/write file: 4096 blocks */
#define MAX_N 10000000L

#define CHECK(x)                                                                       \
    do {                                                                               \
        if ((long)(x) < 0) {                                                           \
            fprintf(stderr, "fsops: %s (line %d): %s\n", #x, __LINE__, WHY());         \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(uint64_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t usec(struct timeval t) { return (int64_t)t.tv_sec * 1000000 + t.tv_usec; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s read4k|write4k|create|stat|stat_mapped|append4k_fsync N PLACE\n",
                argv[0]);
        return 2;
    }
    const char *op = argv[1];
    long n = strtol(argv[2], NULL, 10);
    if (n < 0 || n > MAX_N) {
        fprintf(stderr, "fsops: N must be 0..%ld\n", MAX_N);
        return 2;
    }
    char dir[4096];
    /* several drivers at once on one file system each work in a directory of their own */
    const char *tag = getenv("FSOPS_TAG") ? getenv("FSOPS_TAG") : "";
#ifdef PMFS_LIB
    CHECK((fs = pmfs_mount(argv[3])) ? 0 : -1);
    snprintf(dir, sizeof dir, "/%s-%ld%s", op, n, tag);
#else
    snprintf(dir, sizeof dir, "%s/%s-%ld%s", argv[3], op, n, tag);
#endif
    CHECK(MKDIR(dir, 0755));
    char path[4200];
    snprintf(path, sizeof path, "%s/data", dir);
    static char buf[BLOCK];
    memset(buf, 0x5a, sizeof buf);
    int fd = -1;
    int kind = !strcmp(op, "read4k") ? 0 : !strcmp(op, "write4k") ? 1 : !strcmp(op, "create") ? 2
               : !strcmp(op, "stat") ? 3 : !strcmp(op, "append4k_fsync") ? 4
               : !strcmp(op, "stat_mapped") ? 5 : -1;
    if (kind < 0) {
        fprintf(stderr, "fsops: unknown operation %s\n", op);
        return 2;
    }
    if (kind <= 1) {
        CHECK(fd = OPEN(path, O_RDWR | O_CREAT | O_TRUNC, 0644));
        for (unsigned off = 0; off < FILE_BYTES; off += BLOCK)
            CHECK(PWRITE(fd, buf, BLOCK, off));
        CHECK(FSYNC(fd));
    } else if (kind == 3 || kind == 5) {
        CHECK(fd = OPEN(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
        CHECK(CLOSE(fd));
        fd = -1;
    } else if (kind == 4) {
        CHECK(fd = OPEN(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
        fprintf(stderr, "fsops: no go line on stdin\n");
        return 1;
    }
    struct rusage r0, r1;
    CALLGRIND_ZERO_STATS;
    getrusage(RUSAGE_SELF, &r0);
    int64_t t0 = now_ns();
    struct stat st;
    char name[4300];
    char *mapped = mmap(NULL, sizeof path, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (mapped == MAP_FAILED) {
        fprintf(stderr, "fsops: mmap: %s\n", strerror(errno));
        return 1;
    }
    memcpy(mapped, path, sizeof path);
    for (long i = 0; i < n; i++) {
        switch (kind) {
        case 0:
            if (PREAD(fd, buf, BLOCK, (off_t)next(FILE_BYTES / BLOCK) * BLOCK) != BLOCK) {
                fprintf(stderr, "fsops: short read: %s\n", WHY());
                return 1;
            }
            break;
        case 1:
            CHECK(PWRITE(fd, buf, BLOCK, (off_t)next(FILE_BYTES / BLOCK) * BLOCK));
            break;
        case 2: {
            snprintf(name, sizeof name, "%s/f%ld", dir, i);
            int f;
            CHECK(f = OPEN(name, O_WRONLY | O_CREAT | O_EXCL, 0644));
            CHECK(CLOSE(f));
            break;
        }
        case 3:
            CHECK(STAT(path, &st));
            break;
        case 4:
            CHECK(WRITE(fd, buf, BLOCK));
            CHECK(FSYNC(fd));
            break;
        case 5:
            CHECK(STAT(mapped, &st));
            break;
        }
    }
    int64_t t1 = now_ns();
    getrusage(RUSAGE_SELF, &r1);
    CALLGRIND_DUMP_STATS;
    if (fd >= 0)
        CHECK(CLOSE(fd));
#ifdef PMFS_LIB
    CHECK(pmfs_unmount(fs));
#endif
    printf("ns=%lld user_us=%lld sys_us=%lld\n", (long long)(t1 - t0),
           (long long)(usec(r1.ru_utime) - usec(r0.ru_utime)),
           (long long)(usec(r1.ru_stime) - usec(r0.ru_stime)));
    return 0;
}
