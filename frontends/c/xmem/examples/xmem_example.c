/* The C ABI end to end: two tags, allocation, calloc/realloc, a profile that makes the second tag
 * worth DRAM, a rebalance, statistics, and the errors. Usage: xmem_example PM_FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xmem.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "line %d: %s: %s\n", __LINE__, #c, xmem_errmsg()); return 1; } } while (0)

int main(int argc, char **argv) {
    char spec[512];
    CHECK(argc == 2);
    CHECK(xmalloc(0, 8) == NULL); /* before init */
    snprintf(spec, sizeof spec, "pm=%s,pm_size=32M,budget=2M,region=2M,reserve=64M", argv[1]);
    CHECK(xmem_init(spec) == XMEM_OK);
    CHECK(xmem_init(spec) == XMEM_EINIT);

    int log = xmem_tag("log"), hash = xmem_tag("hash");
    CHECK(log == 0 && hash == 1 && xmem_tag("hash") == hash);

    /* The log fills the one DRAM region; the hash table lands in PM. */
    char *l = xmalloc(log, 1 << 20);
    CHECK(l != NULL);
    memset(l, 'L', 1 << 20);
    long *h = xcalloc(hash, 1000, sizeof(long));
    CHECK(h != NULL);
    for (int i = 0; i < 1000; i++) CHECK(h[i] == 0);
    for (int i = 0; i < 1000; i++) h[i] = i;
    h = xrealloc(h, 4000 * sizeof(long));
    CHECK(h != NULL);
    for (int i = 0; i < 1000; i++) CHECK(h[i] == i);

    /* Profiles: the hash is pointer-chased, the log streamed; rebalance swaps them. */
    CHECK(xmem_profile(hash, 1000.0, 10.0, 0.0) == XMEM_OK);
    CHECK(xmem_profile(log, 0.0, 0.0, 1000.0) == XMEM_OK);
    CHECK(xmem_writebacks(log, 500.0) == XMEM_OK);
    CHECK(xmem_writebacks(log, -1.0) != XMEM_OK);
    CHECK(xmem_rebalance() == 2);
    CHECK(xmem_rebalance() == 0);
    for (int i = 0; i < 1000; i++) CHECK(h[i] == i);
    CHECK(l[12345] == 'L');

    char stats[4096];
    long n = xmem_stats_json(stats, sizeof stats);
    CHECK(n > 0 && n < (long)sizeof stats);
    printf("%s\n", stats);
    CHECK(strstr(stats, "\"name\":\"hash\",\"tier\":\"dram\"") != NULL);
    CHECK(strstr(stats, "\"name\":\"log\",\"tier\":\"pm\"") != NULL);

    /* Errors: clear codes, nothing changed. */
    long local = 0;
    CHECK(xmem_free(&local) == XMEM_EFOREIGN);
    printf("foreign free: %s\n", xmem_errmsg());
    CHECK(xmem_free((char *)h + 8) == XMEM_EFOREIGN);
    CHECK(xmalloc(99, 8) == NULL);
    CHECK(xmem_priority(-1, 1) == XMEM_ENOTAG);
    CHECK(xcalloc(hash, (size_t)-1, 16) == NULL);
    CHECK(xmalloc(hash, (size_t)64 << 20) == NULL); /* larger than a region */

    xfree(h);
    xfree(l);
    xfree(NULL);
    CHECK(xmem_free(h) == XMEM_EFOREIGN); /* double free is refused */
    printf("ok\n");
    return 0;
}
