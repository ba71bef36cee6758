#ifndef SLUICE_LINUX_SHIM_H
#define SLUICE_LINUX_SHIM_H

/* Linux interfaces that Glibc's Swift module leaves out. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/resource.h>

/* accept4(2) is declared only under _GNU_SOURCE, which Swift's Glibc module does not set. */
extern int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);

/* renameat2(2) and extended attributes, for the transfer receiver: likewise left out. */
#include <sys/xattr.h>
extern int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* The calling thread's name (what ps, top and perf show; 15 bytes at most): prctl(2) is
   variadic, which Swift cannot call. */
#include <sys/prctl.h>
static inline void sluice_set_thread_name(const char *name) {
    (void)prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}

/* O_DIRECT, defined by <fcntl.h> only under _GNU_SOURCE (its value differs between
   architectures). For the receiver's direct writes. */
#include <fcntl.h>
static inline int sluice_o_direct(void) {
#ifdef O_DIRECT
    return O_DIRECT;
#elif defined(__x86_64__) || defined(__i386__)
    return 040000;
#elif defined(__aarch64__) || defined(__arm__)
    return 0200000;
#else
    return 0;
#endif
}

/* O_TMPFILE (an unnamed file in a directory, Linux 3.11), likewise under _GNU_SOURCE only; it
   includes O_DIRECTORY. 0 where it is not known, and the receiver names its files as before. */
static inline int sluice_o_tmpfile(void) {
#ifdef O_TMPFILE
    return O_TMPFILE;
#elif defined(__x86_64__) || defined(__i386__)
    return 020000000 | 0200000; /* __O_TMPFILE | O_DIRECTORY */
#elif defined(__aarch64__)
    return 020000000 | 040000;
#else
    return 0;
#endif
}

/* O_PATH and AT_EMPTY_PATH, likewise under _GNU_SOURCE only: the receiver holds an existing
   entry by a descriptor of its own that opens nothing (O_PATH | O_NOFOLLOW) and changes it
   through that descriptor (EntryHandle). The same values on every architecture Swift runs on. */
static inline int sluice_o_path(void) {
#ifdef O_PATH
    return O_PATH;
#else
    return 010000000;
#endif
}

static inline int sluice_at_empty_path(void) {
#ifdef AT_EMPTY_PATH
    return AT_EMPTY_PATH;
#else
    return 0x1000;
#endif
}

/* cachestat(2) (Linux 6.5): how many of a file's cached pages are dirty. Before a replaced
   file's pages are dropped: dropping dirty ones would start writing back a file about to be
   deleted. Returns -1 with errno ENOSYS on older kernels. */
#include <errno.h>
#include <unistd.h>
#include <sys/syscall.h>
#if !defined(__NR_cachestat) && (defined(__x86_64__) || defined(__aarch64__))
#define __NR_cachestat 451 /* newer than Debian 12's kernel headers; the same on both */
#endif
static inline int sluice_dirty_pages(int fd, unsigned long long *dirty) {
#ifdef __NR_cachestat
    struct { unsigned long long off, len; } range = {0, 0};
    struct { unsigned long long cache, dirty, writeback, evicted, recently_evicted; } stat;
    long rc = syscall(__NR_cachestat, fd, &range, &stat, 0);
    if (rc == 0) *dirty = stat.dirty + stat.writeback;
    return (int)rc;
#else
    (void)fd; (void)dirty;
    errno = ENOSYS;
    return -1;
#endif
}

/* sync_file_range(2), likewise: the receiver starts writeback of a file while it arrives, so
   the fsync at its end waits for the tail only. */
#include <fcntl.h>
extern int sync_file_range(int fd, __off64_t offset, __off64_t nbytes, unsigned int flags);
#ifndef SYNC_FILE_RANGE_WRITE
#define SYNC_FILE_RANGE_WRITE 2
#endif

/* openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS: opens the
   directory `path` below `dirfd` in one call, refusing any symbolic link on the way or a path
   that would leave `dirfd` (the receiver's walk of one component at a time does the same in
   several calls). -1 with errno (ENOSYS where the kernel or headers lack it). */
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
static inline int sluice_open_directory_beneath(int dirfd, const char *path) {
#ifdef __NR_openat2
    struct { unsigned long long flags, mode, resolve; } how = {
        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0, 0x08 | 0x04 | 0x02
    };
    return (int)syscall(__NR_openat2, dirfd, path, &how, sizeof how);
#else
    (void)dirfd; (void)path;
    errno = ENOSYS;
    return -1;
#endif
}

/* syncfs(2), likewise: the receiver flushes a batch of files with one call, not an fsync each. */
extern int syncfs(int fd);

/* fallocate(2), likewise: the receiver reserves a file's blocks when it starts (a full disk is
   then told before the data is sent, and the file system allocates once, not page by page). */
extern int fallocate(int fd, int mode, __off64_t offset, __off64_t len);
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

/* The zero-copy calls, likewise declared only under _GNU_SOURCE (sendfile(2) has a header of its
   own that the Glibc module leaves out): a copy whose bytes nothing transforms moves them with
   these, inside the kernel. */
#include <sys/sendfile.h>
extern ssize_t splice(int fd_in, __off64_t *off_in, int fd_out, __off64_t *off_out, size_t len, unsigned int flags);
extern ssize_t copy_file_range(int fd_in, __off64_t *off_in, int fd_out, __off64_t *off_out, size_t len,
                               unsigned int flags);
extern int pipe2(int pipefd[2], int flags);
#ifndef SPLICE_F_MOVE
#define SPLICE_F_MOVE 1
#endif
#ifndef SPLICE_F_NONBLOCK
#define SPLICE_F_NONBLOCK 2
#endif
#ifndef SPLICE_F_MORE
#define SPLICE_F_MORE 4
#endif
#ifndef F_SETPIPE_SZ
#define F_SETPIPE_SZ 1031
#endif
#ifndef F_GETPIPE_SZ
#define F_GETPIPE_SZ 1032
#endif

/* preadv2(2) with RWF_NOWAIT, likewise under _GNU_SOURCE only: a read that takes what the page
   cache holds and never waits for the disk (-1 with errno EAGAIN then; EOPNOTSUPP where the
   file system cannot tell). The sender reads a small cached file on its loop this way, straight
   into the connection's buffer, and leaves the others to a worker. */
#include <sys/uio.h>
extern ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, __off64_t offset, int flags);
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
static inline ssize_t sluice_pread_nowait(int fd, void *buffer, size_t count, long long offset) {
    struct iovec vector = {buffer, count};
    return preadv2(fd, &vector, 1, (__off64_t)offset, RWF_NOWAIT);
}

/* A device's numbers (major, minor) and back: macros of <sys/sysmacros.h>, which Swift cannot
   call. */
#include <sys/sysmacros.h>
static inline unsigned int sluice_major(unsigned long long dev) { return major(dev); }
static inline unsigned int sluice_minor(unsigned long long dev) { return minor(dev); }
static inline unsigned long long sluice_makedev(unsigned int major, unsigned int minor) {
    return makedev(major, minor);
}

#endif
