/* pmo_example: create a pool, write two objects through their pointers, publish both with one
 * atomic pmo_sync, reopen, check, and show the errors for bad requests. Usage: pmo_example POOL */
#include "pmo.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != PMO_OK) {                                                        \
            fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #call, \
                    rc_, pmo_errmsg());                                             \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define EXPECT(call, code)                                                          \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != (code)) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %d, expected %s\n", __FILE__, __LINE__, \
                    #call, rc_, #code);                                             \
            exit(1);                                                                \
        }                                                                           \
        printf("expected error from %s: %s\n", #call, pmo_errmsg());                \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s POOL\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    pmo_pool *pool;
    CHECK(pmo_pool_create(path, 4 << 20, 64, &pool));
    CHECK(pmo_create(pool, "ints", 4096));
    CHECK(pmo_create(pool, "meta", 64));

    pmo_handle ints, meta;
    CHECK(pmo_attach(pool, "ints", PMO_RDWR, &ints));
    CHECK(pmo_attach(pool, "meta", PMO_RDWR, &meta));
    int *a = pmo_ptr(pool, ints);
    for (int i = 0; i < 1024; i++) a[i] = 2 * i; /* plain stores into the shadow */
    uint64_t count = 1024;
    CHECK(pmo_write(pool, meta, 0, &count, sizeof count));
    pmo_handle both[2] = {ints, meta};
    CHECK(pmo_sync(pool, both, 2)); /* both objects published atomically */

    EXPECT(pmo_create(pool, "ints", 10), PMO_EEXIST);
    EXPECT(pmo_attach(pool, "ints", PMO_RDWR, &(pmo_handle){0}), PMO_EBUSY);
    EXPECT(pmo_attach(pool, "nope", PMO_READ, &(pmo_handle){0}), PMO_ENOENT);
    EXPECT(pmo_write(pool, meta, 60, &count, sizeof count), PMO_EINVAL);
    CHECK(pmo_detach(pool, ints));
    EXPECT(pmo_read(pool, ints, 0, &count, sizeof count), PMO_EBADF);
    a = pmo_ptr(pool, ints);
    if (a != NULL) { fprintf(stderr, "pointer of a detached handle\n"); return 1; }
    pmo_pool_close(pool);

    CHECK(pmo_pool_open(path, &pool));
    pmo_handle r;
    CHECK(pmo_attach(pool, "ints", PMO_READ, &r));
    const int *ra = pmo_ptr(pool, r);
    for (int i = 0; i < 1024; i++) {
        if (ra[i] != 2 * i) { fprintf(stderr, "ints[%d] = %d after reopen\n", i, ra[i]); return 1; }
    }
    EXPECT(pmo_write(pool, r, 0, &count, sizeof count), PMO_EROFS);
    CHECK(pmo_attach(pool, "meta", PMO_READ, &meta));
    uint64_t n = 0;
    CHECK(pmo_read(pool, meta, 0, &n, sizeof n));
    printf("reopened: meta.count = %llu, ints[1023] = %d\n", (unsigned long long)n, ra[1023]);
    CHECK(pmo_detach(pool, r));

    /* Explicit tracking: no write faults; only the declared bytes' pages are synced. */
    pmo_handle w;
    EXPECT(pmo_attach(pool, "ints", PMO_READ | PMO_EXPLICIT, &w), PMO_EINVAL);
    CHECK(pmo_attach(pool, "ints", PMO_RDWR | PMO_EXPLICIT, &w));
    int *wa = pmo_ptr(pool, w);
    wa[0] = 7;
    CHECK(pmo_mark_dirty(pool, w, 0, sizeof wa[0]));
    CHECK(pmo_sync(pool, &w, 1));
    CHECK(pmo_detach(pool, w));
    CHECK(pmo_attach(pool, "ints", PMO_READ, &r));
    ra = pmo_ptr(pool, r);
    if (ra[0] != 7 || ra[1] != 2) { fprintf(stderr, "explicit sync: %d %d\n", ra[0], ra[1]); return 1; }
    printf("explicit: ints[0] = %d\n", ra[0]);
    pmo_pool_close(pool);
    printf("pmo_example: ok\n");
    return n == 1024 ? 0 : 1;
}
