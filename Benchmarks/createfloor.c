// The kernel's cost of creating a tree's files, by how a file is made whole at its name
// (issue 52: the receiving end's floor against `tar xf`). Used by Benchmarks/createfloor.sh.
//
//   createfloor MODE DIR FILES
//
// Creates DIR, then FILES files of 1 KiB–64 KiB (a fixed sequence), ten to a subdirectory as in
// trees.sh's tree a, each written with one pwrite, given mode 0644 and an mtime, and closed.
// MODE is how each is made:
//   tar     open(O_CREAT | O_EXCL) at its final name: what `tar xf` does; the name shows a
//           half-written file meanwhile
//   proc    O_TMPFILE (mode 0600), fchmod, linkat of /proc/self/fd/N: sluice's receiver before
//           this last step (never half-written at its name)
//   sluice  O_TMPFILE with its final mode, fstat to check it, linkat(fd, "", AT_EMPTY_PATH):
//           sluice's receiver now, where the process may link by AT_EMPTY_PATH
//   rename  open(O_CREAT | O_EXCL) at a temporary name, renameat2(RENAME_NOREPLACE)
// Prints one line: MODE FILES wall-seconds system-µs-per-file user-µs-per-file.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double seconds(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int make(const char *mode, int dir, const char *name, const char *buf, size_t size) {
    static const struct timespec times[2] = {{0, UTIME_NOW}, {1700000000, 0}};
    char other[64];
    int fd;
    if (!strcmp(mode, "tar")) {
        fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    } else if (!strcmp(mode, "rename")) {
        snprintf(other, sizeof other, ".%s.part", name);
        fd = openat(dir, other, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    } else {
        fd = openat(dir, ".", O_RDWR | O_TMPFILE | O_CLOEXEC, !strcmp(mode, "sluice") ? 0644 : 0600);
    }
    if (fd < 0) return perror("open"), -1;
    if (pwrite(fd, buf, size, 0) != (ssize_t)size) return perror("pwrite"), -1;
    struct stat st;
    if (strcmp(mode, "sluice") != 0 || fstat(fd, &st) != 0 || (st.st_mode & 07777) != 0644) fchmod(fd, 0644);
    if (futimens(fd, times) != 0) return perror("futimens"), -1;
    int rc = 0;
    if (!strcmp(mode, "proc")) {
        snprintf(other, sizeof other, "/proc/self/fd/%d", fd);
        rc = linkat(AT_FDCWD, other, dir, name, AT_SYMLINK_FOLLOW);
    } else if (!strcmp(mode, "sluice")) {
        rc = linkat(fd, "", dir, name, AT_EMPTY_PATH);
    } else if (!strcmp(mode, "rename")) {
        rc = renameat2(dir, other, dir, name, RENAME_NOREPLACE);
    }
    if (rc != 0) return perror("name"), -1;
    return close(fd);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: createfloor tar|proc|sluice|rename DIR FILES\n");
        return 2;
    }
    const char *mode = argv[1];
    int files = atoi(argv[3]);
    if (mkdir(argv[2], 0755) != 0) return perror(argv[2]), 1;
    int root = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    static char buf[65536];
    memset(buf, 'x', sizeof buf);
    unsigned seed = 1;
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    int dir = -1;
    for (int i = 0; i < files; i++) {
        char name[32];
        if (i % 10 == 0) {
            if (dir >= 0) close(dir);
            snprintf(name, sizeof name, "d%d", i / 10);
            if (mkdirat(root, name, 0755) != 0) return perror("mkdir"), 1;
            dir = openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        seed = seed * 1103515245 + 12345;
        snprintf(name, sizeof name, "f%d", i % 10);
        if (make(mode, dir, name, buf, 1024 + (seed >> 8) % (65536 - 1024)) != 0) return 1;
    }
    close(dir);
    double wall = now() - start;
    getrusage(RUSAGE_SELF, &after);
    double sys = seconds(after.ru_stime) - seconds(before.ru_stime);
    double user = seconds(after.ru_utime) - seconds(before.ru_utime);
    printf("%s %d %.4f %.2f %.2f\n", mode, files, wall, sys * 1e6 / files, user * 1e6 / files);
    return 0;
}
