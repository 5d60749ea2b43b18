/* A tour of pmfs.h: make a pool, write a log with appends, read it back after a remount,
 * rename, and show the errors a second mount and a bad descriptor get.
 * Usage: pmfs_example POOL_FILE */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pmfs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        if ((x) < 0) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s (errno %d)\n", __FILE__, __LINE__, #x,      \
                    pmfs_errmsg(), errno);                                             \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static int count_entry(void *ctx, const char *name, uint64_t ino, unsigned char d_type) {
    (void)ino;
    printf("  %s%s\n", name, d_type == DT_DIR ? "/" : d_type == DT_LNK ? "@" : "");
    ++*(int *)ctx;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s POOL_FILE\n", argv[0]);
        return 2;
    }
    CHECK(pmfs_mkfs(argv[1], 64 << 20, 0));
    pmfs_t *fs = pmfs_mount(argv[1]);
    if (!fs) {
        fprintf(stderr, "mount: %s\n", pmfs_errmsg());
        return 1;
    }
    /* A second mount of the same pool is refused while this one lives. */
    pmfs_t *again = pmfs_mount(argv[1]);
    printf("second mount: %s (%s)\n", again ? "allowed?!" : "refused",
           errno == EBUSY ? "EBUSY" : strerror(errno));
    if (again)
        return 1;

    CHECK(pmfs_mkdir(fs, "/logs", 0755));
    int fd = pmfs_open(fs, "/logs/app.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
    CHECK(fd);
    for (int i = 0; i < 100; i++) {
        char line[64];
        int n = snprintf(line, sizeof line, "record %03d\n", i);
        CHECK(pmfs_write(fs, fd, line, (size_t)n));
    }
    CHECK(pmfs_fsync(fs, fd)); /* a fence: each write was durable already */
    CHECK(pmfs_close(fs, fd));
    CHECK(pmfs_rename(fs, "/logs/app.log", "/logs/app.log.1"));
    CHECK(pmfs_symlink(fs, "app.log.1", "/logs/latest"));
    CHECK(pmfs_unmount(fs));

    fs = pmfs_mount(argv[1]);
    if (!fs) {
        fprintf(stderr, "remount: %s\n", pmfs_errmsg());
        return 1;
    }
    struct stat st;
    CHECK(pmfs_stat(fs, "/logs/latest", &st));
    printf("size after remount: %lld bytes, links %lu\n", (long long)st.st_size,
           (unsigned long)st.st_nlink);
    fd = pmfs_open(fs, "/logs/latest", O_RDONLY, 0);
    CHECK(fd);
    char buf[16] = {0};
    CHECK(pmfs_pread(fs, fd, buf, 11, 11 * 42));
    printf("record 42 reads: %s", buf);
    CHECK(pmfs_close(fs, fd));
    char target[64] = {0};
    CHECK(pmfs_readlink(fs, "/logs/latest", target, sizeof target - 1));
    printf("latest -> %s\n", target);

    /* Direct access: the file's PM at an address, stores with no system call. */
    int m = pmfs_open(fs, "/mapped", O_RDWR | O_CREAT, 0644);
    CHECK(m);
    char *view = pmfs_map(fs, m, 0, 8192);
    if (!view) {
        fprintf(stderr, "map: %s\n", pmfs_errmsg());
        return 1;
    }
    memcpy(view + 4096, "direct store", 12);
    CHECK(pmfs_persist(fs, view + 4096, 12));
    CHECK(pmfs_unmap(fs, view));
    char back[13] = {0};
    CHECK(pmfs_pread(fs, m, back, 12, 4096));
    printf("through the map: %s\n", back);
    CHECK(pmfs_close(fs, m));

    /* 2 MiB blocks on request: once the file asks, a one-byte write takes a whole 2 MiB
     * block, and a map of the file gets 2 MiB-aligned extents (huge pages where the kernel
     * gives them: DAX, or tmpfs with shmem THP on). */
    int h = pmfs_open(fs, "/huge", O_RDWR | O_CREAT, 0644);
    CHECK(h);
    printf("huge flag of a new file: %d\n", pmfs_huge(fs, "/huge"));
    CHECK(pmfs_set_huge(fs, "/huge", 1));
    printf("huge flag after pmfs_set_huge: %d\n", pmfs_huge(fs, "/huge"));
    CHECK(pmfs_write(fs, h, "x", 1));
    struct stat hs;
    CHECK(pmfs_fstat(fs, h, &hs));
    printf("one byte written: %lld bytes allocated\n", (long long)hs.st_blocks * 512);
    char *hv = pmfs_map(fs, h, 0, 4 << 20);
    if (!hv) {
        fprintf(stderr, "map: %s\n", pmfs_errmsg());
        return 1;
    }
    printf("4 MiB mapped: %lld bytes in 2 MiB blocks, %s\n", pmfs_map_huge_bytes(fs, hv),
           (uintptr_t)hv % (2u << 20) == 0 ? "2 MiB-aligned" : "not 2 MiB-aligned");
    CHECK(pmfs_unmap(fs, hv));
    CHECK(pmfs_close(fs, h));
    printf("huge flag of a directory: %s\n",
           pmfs_huge(fs, "/logs") < 0 && errno == EINVAL ? "EINVAL" : "wrong");

    /* Data checksums: a summed file is read back checked, and cannot be mapped. */
    CHECK(pmfs_set_checksum(fs, "/logs/app.log.1", 1));
    int c = pmfs_open(fs, "/logs/app.log.1", O_RDWR, 0);
    CHECK(c);
    printf("checksummed: %d, first bytes read back: %s\n", pmfs_checksum(fs, "/logs/app.log.1"),
           pmfs_read(fs, c, buf, 6) == 6 ? "yes" : "no");
    printf("map of a checksummed file: %s\n",
           pmfs_map(fs, c, 0, 4096) == NULL && errno == EINVAL ? "EINVAL" : "wrong");
    CHECK(pmfs_close(fs, c));

    /* Listing a directory, and the metadata calls. */
    int entries = 0;
    CHECK(pmfs_readdir(fs, "/logs", count_entry, &entries));
    printf("entries in /logs: %d\n", entries);
    struct timespec times[2] = {{1000, 0}, {2000, 0}};
    CHECK(pmfs_utimens(fs, "/logs/app.log.1", times));
    CHECK(pmfs_chmod(fs, "/logs/app.log.1", 0600));
    CHECK(pmfs_stat(fs, "/logs/app.log.1", &st));
    printf("after chmod and utimens: mode %o, mtime %lld\n", (unsigned)(st.st_mode & 07777),
           (long long)st.st_mtime);

    /* Permissions are checked only for credentials given (a server acting for a user). */
    CHECK(pmfs_set_cred(fs, 54321, 54321, NULL, 0));
    printf("user 54321 opens a 0600 file it does not own: %s\n",
           pmfs_open(fs, "/logs/app.log.1", O_RDONLY, 0) < 0 && errno == EACCES ? "EACCES"
                                                                                : "wrong");
    printf("user 54321 chmods it: %s\n",
           pmfs_chmod(fs, "/logs/app.log.1", 0666) < 0 && errno == EPERM ? "EPERM" : "wrong");
    CHECK(pmfs_clear_cred(fs));
    CHECK(pmfs_chown(fs, "/logs/app.log.1", 54321, (uint32_t)-1));
    CHECK(pmfs_set_cred(fs, 54321, 54321, NULL, 0));
    printf("after chown to user 54321, read and write: %s\n",
           pmfs_access(fs, "/logs/app.log.1", R_OK | W_OK) == 0 ? "allowed" : "refused");
    CHECK(pmfs_clear_cred(fs));

    /* Errors are errno values, as from the system calls. */
    printf("read of a closed descriptor: %s\n",
           pmfs_read(fs, fd, buf, 1) < 0 && errno == EBADF ? "EBADF" : "wrong");
    printf("open of a missing file: %s\n",
           pmfs_open(fs, "/nope", O_RDONLY, 0) < 0 && errno == ENOENT ? "ENOENT" : "wrong");
    printf("rmdir of a non-empty directory: %s\n",
           pmfs_rmdir(fs, "/logs") < 0 && errno == ENOTEMPTY ? "ENOTEMPTY" : "wrong");
    CHECK(pmfs_unmount(fs));
    printf("ok\n");
    return 0;
}
