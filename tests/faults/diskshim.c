/* diskshim: LD_PRELOAD'ed into a real redis-server / valkey-server, it makes the
 * server's disk fail the ways real disks do, for tickwheel's Redis-fault tests.
 *
 *   TW_FAULT_DIR   only files under this directory are watched (the server's --dir)
 *   TW_FAULT_LOG   where each durable fact about them is appended, one line each:
 *                    O <size> <path>   opened: what it held then counts as on disk
 *                                      (unless this run already had it open)
 *                    T 0 <path>        opened with O_TRUNC, or created: nothing on disk
 *                    S <size> <path>   fsync/fdatasync returned: <size> bytes are on disk
 *                    R <old>\t<new>    renamed (Redis fsyncs the directory after)
 *                  A power cut (tests/faults/__init__.py) stops the process with
 *                  SIGSTOP, cuts every watched file back to its last line's size, and
 *                  kills it: exactly the data that was never fsynced is lost, as when
 *                  the power goes with it in the page cache.
 *   TW_FAULT_CTL   a 4 KiB control file, mapped shared: the test writes into it and the
 *                  server sees it at its next write or fsync, no signal needed.
 *                    int32 at 0: nonzero = the disk is full (write to a watched file
 *                                fails with ENOSPC, as on a full filesystem)
 *                    int32 at 4: milliseconds each fsync of a watched file stalls first
 *
 * Nothing here changes what the server does with a healthy disk: a watched write and
 * fsync go to the real calls. Built by the tests: cc -shared -fPIC -o diskshim.so
 * diskshim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 65536

static char watch_dir[PATH_MAX];
static size_t watch_len;
static int log_fd = -1;
static volatile int32_t *ctl;
static char *paths[MAX_FDS]; /* fd -> absolute path of a watched file */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);

__attribute__((constructor)) static void shim_init(void) {
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_close = dlsym(RTLD_NEXT, "close");
    real_write = dlsym(RTLD_NEXT, "write");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    const char *dir = getenv("TW_FAULT_DIR");
    const char *log = getenv("TW_FAULT_LOG");
    const char *ctl_path = getenv("TW_FAULT_CTL");
    if (dir && realpath(dir, watch_dir)) {
        watch_len = strlen(watch_dir);
    }
    if (log) {
        log_fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    if (ctl_path) {
        int fd = real_open(ctl_path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            void *page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
            if (page != MAP_FAILED) ctl = page;
            real_close(fd);
        }
    }
}

/* The absolute form of path (relative to dirfd or the working directory), or NULL if it
 * is not under the watched directory or is the server's log or pid file. */
static char *watched(int dirfd, const char *path) {
    if (!watch_len || !path) return NULL;
    char full[2 * PATH_MAX];
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return NULL;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return NULL;
            base[n] = 0;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    if (strncmp(full, watch_dir, watch_len) != 0 || (full[watch_len] && full[watch_len] != '/'))
        return NULL;
    size_t n = strlen(full);
    if ((n > 4 && !strcmp(full + n - 4, ".log")) || (n > 4 && !strcmp(full + n - 4, ".pid")))
        return NULL;
    return strdup(full);
}

static void record(const char *fmt, ...) {
    if (log_fd < 0) return;
    char line[2 * PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = real_write(log_fd, line, (size_t)n); /* O_APPEND: one line, whole */
        (void)w;
    }
}

static void track(int fd, char *path, int flags) {
    if (!path) return;
    if (fd < 0 || fd >= MAX_FDS) {
        free(path);
        return;
    }
    struct stat st;
    /* What a file held when opened is on disk (the last cut left only that); O_TRUNC
     * and a new file start at 0 until an fsync says more. */
    off_t size = (!(flags & O_TRUNC) && fstat(fd, &st) == 0) ? st.st_size : 0;
    pthread_mutex_lock(&lock);
    free(paths[fd]);
    paths[fd] = path;
    record("%c %lld %s\n", size ? 'O' : 'T', (long long)size, path);
    pthread_mutex_unlock(&lock);
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real_open(path, flags, mode);
    if (fd >= 0 && (flags & O_ACCMODE) != O_RDONLY) track(fd, watched(AT_FDCWD, path), flags);
    return fd;
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real_open64(path, flags, mode);
    if (fd >= 0 && (flags & O_ACCMODE) != O_RDONLY) track(fd, watched(AT_FDCWD, path), flags);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real_openat(dirfd, path, flags, mode);
    if (fd >= 0 && (flags & O_ACCMODE) != O_RDONLY) track(fd, watched(dirfd, path), flags);
    return fd;
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS && paths[fd]) {
        pthread_mutex_lock(&lock);
        free(paths[fd]);
        paths[fd] = NULL;
        pthread_mutex_unlock(&lock);
    }
    return real_close(fd);
}

static int disk_full(int fd) {
    return ctl && ctl[0] && fd >= 0 && fd < MAX_FDS && paths[fd];
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (disk_full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    if (disk_full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_writev(fd, iov, count);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    if (disk_full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite(fd, buf, n, off);
}

static int synced(int fd, int (*real)(int)) {
    char *path = (fd >= 0 && fd < MAX_FDS) ? paths[fd] : NULL;
    if (path && ctl && ctl[1] > 0) {
        struct timespec stall = {ctl[1] / 1000, (long)(ctl[1] % 1000) * 1000000L};
        nanosleep(&stall, NULL);
    }
    struct stat st;
    /* the size before the call: what a concurrent write adds may not be on disk */
    int sized = path && fstat(fd, &st) == 0;
    int rc = real(fd);
    if (rc == 0 && sized) {
        pthread_mutex_lock(&lock);
        if (paths[fd]) record("S %lld %s\n", (long long)st.st_size, paths[fd]);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

int fsync(int fd) { return synced(fd, real_fsync); }

int fdatasync(int fd) { return synced(fd, real_fdatasync); }

static void renamed(char *from, char *to) {
    if (from || to) record("R %s\t%s\n", from ? from : "-", to ? to : "-");
    free(from);
    free(to);
}

int rename(const char *from, const char *to) {
    int rc = real_rename(from, to);
    if (rc == 0) renamed(watched(AT_FDCWD, from), watched(AT_FDCWD, to));
    return rc;
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    int rc = real_renameat(fromfd, from, tofd, to);
    if (rc == 0) renamed(watched(fromfd, from), watched(tofd, to));
    return rc;
}
