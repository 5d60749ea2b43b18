/* xmem.h: C interface of pmkit's X-Mem, tiered DRAM/PM allocation by data structure.
 *
 * Tag each large data structure; its objects live in regions of their own. X-Mem places
 * regions in DRAM or PM by priority and by the benefit its model computes from each tag's access
 * profile, and moves them between tiers without changing their addresses (a write during a move
 * waits until the move is done; a write by a system call such as read(2) into memory being moved
 * fails with EFAULT instead).
 *
 * One X-Mem per process, set up by xmem_init. int-returning functions give XMEM_OK (0) or a
 * count, or a negative XMEM_E* code, and xmem_errmsg() then says what failed. Allocation
 * functions return NULL on failure, with a message. Link with -lxmem.
 */
#ifndef PMKIT_XMEM_H
#define PMKIT_XMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    XMEM_OK = 0,
    XMEM_EINVAL = -1,   /* bad argument, spec, size or alignment */
    XMEM_ENOTAG = -2,   /* unknown tag, or too many tags */
    XMEM_ENOMEM = -3,   /* address-space reservation or PM tier exhausted */
    XMEM_EFOREIGN = -4, /* pointer not handed out by X-Mem, or already freed */
    XMEM_EINIT = -5,    /* xmem_init not called, or called twice */
    XMEM_EIO = -6,      /* the OS refused a mapping, or the PM file cannot be used */
    XMEM_EINTERNAL = -7 /* a bug in pmkit */
};

/* spec: NULL or "key=value,..." with keys pm (PM file, or a device-dax device /dev/daxX.Y;
 * default /dev/shm/xmem-<pid>.img, removed when created by X-Mem), pm_size (1G), budget (DRAM,
 * 256M), region (64M, a power of two >= 2M), reserve (address space, 64G), thp (on/off),
 * fast_node (bind DRAM regions to this NUMA node), slow_node (the slow tier is this NUMA node,
 * pm_size of it, moved to by mbind; needs fast_node). Sizes take K, M, G, T. */
int xmem_init(const char *spec);
/* The tag named name (the same name gives the same tag): >= 0, or a negative code. */
int xmem_tag(const char *name);

void *xmalloc(int tag, size_t size);         /* 16-byte aligned, not zeroed */
void *xcalloc(int tag, size_t n, size_t size);/* zeroed; NULL if n * size overflows */
void *xrealloc(void *p, size_t size);         /* same tag; p != NULL, size > 0 */
void xfree(void *p);                          /* NULL: nothing; foreign pointer: abort */
int xmem_free(void *p);                       /* xfree with an error code instead */

int xmem_priority(int tag, int prio);        /* higher goes to DRAM first */
/* The tag's profile: average pointer-chasing, random and streaming accesses per region. */
int xmem_profile(int tag, double chase, double random, double streaming);
/* The tag's lines written back to memory per region: they cost the slow tier's write cost. */
int xmem_writebacks(int tag, double per_region);
int xmem_rebalance(void);                     /* regions moved, or a negative code */

/* Statistics as JSON (like snprintf: writes at most len bytes with the NUL, returns the full
 * length): {"region_size":..,"fast_slots":..,"fast_used":..,"regions":[{"index","tag","name",
 * "tier":"dram"|"pm","bytes","benefit","priority"}, ...]} */
long xmem_stats_json(char *buf, size_t len);
const char *xmem_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif
