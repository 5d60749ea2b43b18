/* nbdops: N block requests of one kind to an NBD server over libnbd, timed by the program
 * itself (`pmkit bench fs-layers`, its NBD layer: `pmkit serve` on a PMBD device).
 *
 * Usage: nbdops OP N URI
 *   OP   read4k (4 KiB nbd_pread at random aligned offsets of the first 16 MiB),
 *        write4k (4 KiB nbd_pwrite there, no FUA, no flush),
 *        append4k_fsync (4 KiB nbd_pwrite at sequential offsets, each followed by nbd_flush)
 *   N    requests to time (0: the setup alone)
 * Setup: connect, write the first 16 MiB in 256 KiB requests. Then "ready", a line on stdin,
 * the N requests, and "ns=WALL user_us=U sys_us=S" as fsops prints it. */
#define _GNU_SOURCE
#include <libnbd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* As in fsops.c: under callgrind the N requests are counted alone. */
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS
#endif

#define BLOCK 4096
#define AREA (16u << 20)
#define MAX_N 10000000L

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

static void fail(const char *what) {
    fprintf(stderr, "nbdops: %s: %s\n", what, nbd_get_error());
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s read4k|write4k|append4k_fsync N URI\n", argv[0]);
        return 2;
    }
    const char *op = argv[1];
    long n = strtol(argv[2], NULL, 10);
    if (n < 0 || n > MAX_N) {
        fprintf(stderr, "nbdops: N must be 0..%ld\n", MAX_N);
        return 2;
    }
    int kind = !strcmp(op, "read4k") ? 0 : !strcmp(op, "write4k") ? 1
               : !strcmp(op, "append4k_fsync") ? 4 : -1;
    if (kind < 0) {
        fprintf(stderr, "nbdops: unknown operation %s\n", op);
        return 2;
    }
    struct nbd_handle *h = nbd_create();
    if (!h)
        fail("nbd_create");
    if (nbd_connect_uri(h, argv[3]) == -1)
        fail("connect");
    if (nbd_get_size(h) < (int64_t)AREA + (int64_t)n * BLOCK)
        fail("the device is too small");
    static char big[256 << 10];
    memset(big, 0x5a, sizeof big);
    for (unsigned off = 0; off < AREA; off += sizeof big)
        if (nbd_pwrite(h, big, sizeof big, off, 0) == -1)
            fail("prefill");
    if (nbd_flush(h, 0) == -1)
        fail("flush");
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
        fprintf(stderr, "nbdops: no go line on stdin\n");
        return 1;
    }
    static char buf[BLOCK];
    struct rusage r0, r1;
    CALLGRIND_ZERO_STATS;
    getrusage(RUSAGE_SELF, &r0);
    int64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t off = next(AREA / BLOCK) * BLOCK;
        switch (kind) {
        case 0:
            if (nbd_pread(h, buf, BLOCK, off, 0) == -1)
                fail("pread");
            break;
        case 1:
            if (nbd_pwrite(h, big, BLOCK, off, 0) == -1)
                fail("pwrite");
            break;
        case 4:
            if (nbd_pwrite(h, big, BLOCK, AREA + (uint64_t)i * BLOCK, 0) == -1)
                fail("append");
            if (nbd_flush(h, 0) == -1)
                fail("flush");
            break;
        }
    }
    int64_t t1 = now_ns();
    getrusage(RUSAGE_SELF, &r1);
    CALLGRIND_DUMP_STATS;
    nbd_shutdown(h, 0);
    nbd_close(h);
    printf("ns=%lld user_us=%lld sys_us=%lld\n", (long long)(t1 - t0),
           (long long)(usec(r1.ru_utime) - usec(r0.ru_utime)),
           (long long)(usec(r1.ru_stime) - usec(r0.ru_stime)));
    return 0;
}
