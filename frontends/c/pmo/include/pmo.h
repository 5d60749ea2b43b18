/* pmo.h: C interface of pmkit's persistent memory objects (PMO) with atomic PMO Sync.
 *
 * A pool lives in a file (emulated PM, e.g. on /dev/shm), a DAX file or a device-dax device.
 * Objects are named. Attach one read-write and write it through pmo_ptr() (or pmo_write()):
 * the writes go to a shadow copy; pmo_sync() makes them durable and publishes them atomically,
 * several objects at once if you pass several handles. A crash leaves every object equal to its
 * last completed sync. Detached objects are not mapped accessible; read-only ones fault on write.
 *
 * The shadow is a DRAM buffer by default (stores are DRAM stores; pmo_sync streams the changed
 * pages to PM). PMO_SHADOW=pm in the environment at pmo_pool_create/open selects the thesis's
 * design instead (the shadow is the object's second PM slot); the file format is the same.
 * PMO_CHECKSUM=on at pmo_pool_create gives every page of object data a CRC32C, checked on read
 * (a mismatch is PMO_EIO, never data).
 *
 * Every int-returning function returns PMO_OK (0) or a negative PMO_E* code, and
 * pmo_errmsg() then says what failed. Link with -lpmo (libpmo.so or libpmo.a).
 */
#ifndef PMKIT_PMO_H
#define PMKIT_PMO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PmoPool pmo_pool;
typedef uint64_t pmo_handle;

enum {
    PMO_OK = 0,
    PMO_EINVAL = -1,       /* bad argument, name, range, or a handle twice in one sync */
    PMO_ENAMETOOLONG = -2, /* name longer than PMO_MAX_NAME bytes */
    PMO_EEXIST = -3,       /* an object of that name exists */
    PMO_ENOENT = -4,       /* no object of that name */
    PMO_ENOSPC = -5,       /* pool, object table or handle table full */
    PMO_EBUSY = -6,        /* attached elsewhere (one writer or many readers) */
    PMO_EBADF = -7,        /* handle not attached (detached, or never was) */
    PMO_EROFS = -8,        /* write or sync on a read-only handle */
    PMO_ECORRUPT = -9,     /* pool structures fail their checks; nothing was changed */
    PMO_ENOTPOOL = -10,    /* not a PMO pool, or one with a feature this build does not know */
    PMO_EIO = -11,         /* cannot open, create or map the media, the OS refused memory, a
                              media error (poisoned PM), or a data page that fails its CRC
                              (checksummed pools): no data was returned */
    PMO_EINTERNAL = -12    /* a bug in pmkit */
};

/* pmo_attach modes. Writes through pmo_ptr are found by write faults (one per page per sync);
 * PMO_RDWR | PMO_EXPLICIT skips the faults and syncs only what pmo_mark_dirty declared. */
enum { PMO_READ = 1, PMO_RDWR = 2, PMO_EXPLICIT = 4 };
#define PMO_MAX_NAME 80
#define PMO_MAX_SYNC 254

const char *pmo_errmsg(void);

int pmo_pool_create(const char *path, uint64_t size, uint32_t max_objects, pmo_pool **out);
int pmo_pool_open(const char *path, pmo_pool **out);
void pmo_pool_close(pmo_pool *pool);

int pmo_create(pmo_pool *pool, const char *name, uint64_t size);
int pmo_delete(pmo_pool *pool, const char *name);

int pmo_attach(pmo_pool *pool, const char *name, int mode, pmo_handle *out);
/* Valid until pmo_detach with the DRAM shadow (the default); with PMO_SHADOW=pm only until this
 * handle's next pmo_sync: portable code calls it again after a sync.
 * Threads: with protection keys (the default on CPUs with pku) the pointer works in the thread
 * that attached and in every thread that calls pmo_ptr itself; another thread faults. Threads
 * created while an object is attached inherit that access. PMO_PKEY=off makes the pointer work
 * in every thread: without keys PM stays read-only and pmo_sync writes it through the kernel
 * (detached objects stay readable), or, with PMO_KERNEL=off too, page rights (slower attach and
 * detach; detached objects fault on any access). */
void *pmo_ptr(pmo_pool *pool, pmo_handle h);
uint64_t pmo_size(pmo_pool *pool, pmo_handle h);
int pmo_read(pmo_pool *pool, pmo_handle h, uint64_t off, void *buf, size_t len);
int pmo_write(pmo_pool *pool, pmo_handle h, uint64_t off, const void *buf, size_t len);
int pmo_mark_dirty(pmo_pool *pool, pmo_handle h, uint64_t off, uint64_t len);
int pmo_sync(pmo_pool *pool, const pmo_handle *handles, size_t n);
int pmo_detach(pmo_pool *pool, pmo_handle h);

#ifdef __cplusplus
}
#endif
#endif
