/* pmfs.h: PMFS (pmkit-fs) used in place by one process, no FUSE and no kernel on the data path.
 *
 * Link with -lpmfs (libpmfs.so, `cargo build -p pmkit-libpmfs`). The calls mirror the POSIX
 * calls of the same name: on failure they return -1 (pmfs_mount: NULL) and set errno;
 * pmfs_errmsg() then says what failed, in words. Descriptors are the pool's own (small
 * integers), not kernel descriptors: pass them only to pmfs_* calls.
 *
 * Guarantees (docs/fs.md): every call that changes metadata is atomic and durable when it
 * returns; data written by pmfs_write/pmfs_pwrite is durable when they return, so pmfs_fsync is
 * a no-op. Paths are taken from the pool's root ("/a/b" and "a/b" are the same file); there is
 * no current directory and no permission check: the process owns the pool.
 *
 * One process holds a pool at a time (a lock on the file): a second pmfs_mount, here or in
 * another process, or `pmkit fs mount` of the same pool, fails with EBUSY.
 * PMFS_PROTECT=auto|none|kernel|pkey|pt in the environment picks how the pool is protected
 * from stray stores (default auto: protection keys where the CPU has them, else read-only
 * mapping with writes through the kernel). PMFS_BARRIER_NS=N emulates a slower persistence
 * barrier: every fence takes at least N more nanoseconds. PMFS_FULL_WALK=1 walks and checks
 * the whole pool at mount even after a clean unmount (whose saved allocator is loaded
 * otherwise).
 *
 * Every call is thread-safe.
 */
#ifndef PMKIT_PMFS_H
#define PMKIT_PMFS_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PmfsHandle pmfs_t;

/* The calling thread's last error message (valid until its next failing call). */
const char *pmfs_errmsg(void);

/* Make a file system on the file `path`, created with `size` bytes if missing.
 * inodes: 0 for the default (4096). */
int pmfs_mkfs(const char *path, uint64_t size, uint32_t inodes);
/* Mount (recovering after a crash, always); NULL and errno on failure. */
pmfs_t *pmfs_mount(const char *path);
/* Close every descriptor, unmount (marks the pool clean), free `fs`. */
int pmfs_unmount(pmfs_t *fs);

/* flags: O_RDONLY, O_WRONLY, O_RDWR with O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY,
 * O_NOFOLLOW; others (O_CLOEXEC, O_SYNC, O_DIRECT, ...) change nothing. */
int pmfs_open(pmfs_t *fs, const char *path, int flags, unsigned mode);
int pmfs_close(pmfs_t *fs, int fd);
ssize_t pmfs_read(pmfs_t *fs, int fd, void *buf, size_t n);
ssize_t pmfs_write(pmfs_t *fs, int fd, const void *buf, size_t n);
ssize_t pmfs_pread(pmfs_t *fs, int fd, void *buf, size_t n, off_t off);
ssize_t pmfs_pwrite(pmfs_t *fs, int fd, const void *buf, size_t n, off_t off);
off_t pmfs_lseek(pmfs_t *fs, int fd, off_t off, int whence);
int pmfs_fsync(pmfs_t *fs, int fd);
int pmfs_ftruncate(pmfs_t *fs, int fd, off_t len);
int pmfs_fstat(pmfs_t *fs, int fd, struct stat *st);

int pmfs_stat(pmfs_t *fs, const char *path, struct stat *st);
int pmfs_lstat(pmfs_t *fs, const char *path, struct stat *st);
int pmfs_mkdir(pmfs_t *fs, const char *path, unsigned mode);
int pmfs_rmdir(pmfs_t *fs, const char *path);
int pmfs_unlink(pmfs_t *fs, const char *path);
int pmfs_rename(pmfs_t *fs, const char *from, const char *to);
int pmfs_link(pmfs_t *fs, const char *old_path, const char *new_path);
int pmfs_symlink(pmfs_t *fs, const char *target, const char *path);
ssize_t pmfs_readlink(pmfs_t *fs, const char *path, char *buf, size_t n);
int pmfs_truncate(pmfs_t *fs, const char *path, off_t len);
int pmfs_chmod(pmfs_t *fs, const char *path, unsigned mode);
/* (uint32_t)-1 leaves an id unchanged. */
int pmfs_chown(pmfs_t *fs, const char *path, uint32_t uid, uint32_t gid);
/* As utimensat(2): NULL sets both times to now; UTIME_NOW and UTIME_OMIT per entry. */
int pmfs_utimens(pmfs_t *fs, const char *path, const struct timespec times[2]);
/* Every entry of a directory ("." and ".." first), given to cb with its inode and DT_* type
 * until cb returns non-zero; name is valid during the call only. */
int pmfs_readdir(pmfs_t *fs, const char *path,
                 int (*cb)(void *ctx, const char *name, uint64_t ino, unsigned char d_type),
                 void *ctx);

/* Permissions: by default nothing is checked (the process owns the pool). After
 * pmfs_set_cred, every call is checked as the kernel would for a process with this user,
 * group and supplementary groups (search on each directory of a path, the open flags, write
 * on a directory to change its names, sticky directories, owner-only chmod/chown/explicit
 * times; uid 0 passes as root does), and new nodes belong to that user and group.
 * pmfs_access answers for them (F_OK, or a mix of R_OK, W_OK, X_OK). */
int pmfs_set_cred(pmfs_t *fs, uint32_t uid, uint32_t gid, const uint32_t *groups, size_t n);
int pmfs_clear_cred(pmfs_t *fs);
int pmfs_access(pmfs_t *fs, const char *path, int mode);

/* Direct access (XIP): map file bytes [off, off + len) of `fd` (opened O_RDWR) at one
 * address; loads and stores go straight to PM. off and len are multiples of 4096; holes are
 * allocated and the file grows to off + len if shorter. Stores are durable after
 * pmfs_persist() of their bytes (no journal: only aligned 8-byte stores are atomic). While
 * mapped, the file stays alive and its blocks stay put: a truncate into the range, or making the
 * file atomic, fails with EBUSY; an atomic file cannot be mapped (EINVAL). */
void *pmfs_map(pmfs_t *fs, int fd, off_t off, size_t len);
int pmfs_persist(pmfs_t *fs, const void *p, size_t len);
int pmfs_unmap(pmfs_t *fs, void *p);
/* Bytes of the range mapped at p that are whole 2 MiB blocks at 2 MiB-aligned addresses
 * (where the kernel can use 2 MiB pages; the rest gets 4 KiB pages), or -1. */
long long pmfs_map_huge_bytes(pmfs_t *fs, const void *p);

/* Per-file 2 MiB blocks (the inode's huge flag; one transaction, persistent): while set, every
 * write or fallocate that allocates inside an empty 2 MiB-aligned span of the file takes a
 * whole 2 MiB block (4 KiB blocks when no free 2 MiB chunk is left), so pmfs_map() of it gets
 * 2 MiB-aligned extents. pmfs_huge() answers 1 or 0 (-1 and EINVAL: not a regular file). */
int pmfs_set_huge(pmfs_t *fs, const char *path, int on);
int pmfs_huge(pmfs_t *fs, const char *path);

/* Per-file data checksums (format 6; one transaction, persistent): while set, every write to
 * the file is copy-on-write and every read checks a CRC32C per 4 KiB block, so data the media
 * changed reads as -1 and EIO, never as other bytes. Turning them on sums what the file holds.
 * A mapped file is refused (EINVAL), a pool made before format 6 too (EOPNOTSUPP).
 * pmfs_checksum() answers 1 or 0 (-1 and EINVAL: not a regular file). */
int pmfs_set_checksum(pmfs_t *fs, const char *path, int on);
int pmfs_checksum(pmfs_t *fs, const char *path);

#ifdef __cplusplus
}
#endif

#endif
