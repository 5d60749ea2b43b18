/* stdio on pool files through the shim: every line it prints is checked by tests/stdio.rs. */
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

int main(int argc, char **argv) {
    const char *dir = argv[1];
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/s.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) { perror("fopen w"); return 1; }
    fprintf(f, "one %d\n", 1);
    fputs("two\n", f);
    printf("fileno %s\n", fileno(f) >= 0 ? "yes" : "no");
    struct stat st;
    fflush(f);
    int r = fstat(fileno(f), &st);
    printf("fstat %d size %ld\n", r, (long)st.st_size);
    fclose(f);
    f = fopen(path, "a+");
    fputs("three\n", f);
    fseek(f, 0, SEEK_SET);
    while (fgets(line, sizeof line, f)) printf("read %s", line);
    printf("tell %ld\n", ftell(f));
    fclose(f);
    f = fopen(path, "r+");
    fseek(f, 4, SEEK_SET);
    fputc('1', f);
    rewind(f);
    size_t n = fread(line, 1, 5, f);
    line[n] = 0;
    printf("patched %s\n", line);
    fclose(f);
    snprintf(path, sizeof path, "%s/none/x", dir);
    FILE *m = fopen(path, "r");
    int e = errno;
    printf("missing %s errno %d\n", m ? "opened" : "null", e);
    snprintf(path, sizeof path, "%s/s.txt", dir);
    printf("excl %s\n", fopen(path, "wx") ? "opened" : "null");
    int fd = open(path, O_RDONLY);
    f = fdopen(fd, "r");
    printf("fdopen %s", fgets(line, sizeof line, f));
    fclose(f);
    printf("closed %d\n", close(fd) == -1 && errno == EBADF);
    snprintf(path, sizeof path, "%s/tmpXXXXXX", dir);
    int t = mkstemp(path);
    int named = strncmp(path + strlen(path) - 6, "XXXXXX", 6) != 0;
    printf("mkstemp %d %s\n", t >= 0, named ? "named" : "same");
    write(t, "tmp", 3);
    fstat(t, &st);
    printf("tmp mode %o size %ld\n", st.st_mode & 0777, (long)st.st_size);
    close(t);
    unlink(path);
    snprintf(path, sizeof path, "%s/dXXXXXX", dir);
    char *d = mkdtemp(path);
    int isdir = d && stat(d, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700;
    printf("mkdtemp %s\n", isdir ? "dir 700" : "no");
    rmdir(path);
    /* a popen stream closed with fclose, as glibc allows (its pclose is its fclose): the
     * shell is reaped then, not left a zombie */
    FILE *p = popen("echo popen", "r");
    printf("popen %s", p ? fgets(line, sizeof line, p) : "none\n");
    int pc = p ? fclose(p) : -1;
    int reaped = waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD;
    printf("fclosed %d reaped %d\n", pc, reaped);
    /* stdout reopened on a pool file, then closed twice (flex does): as with glibc's own
     * static stdout, the second close is EOF and the stream stays readable. */
    fflush(stdout);
    snprintf(path, sizeof path, "%s/re.txt", dir);
    if (!freopen(path, "w", stdout)) return 2;
    printf("reopened %d\n", fileno(stdout));
    int first = fclose(stdout);
    int err = ferror(stdout);
    int second = fclose(stdout);
    return first == 0 && err == 0 && second == EOF ? 0 : 3;
}
