/*
 * slowfs: a FUSE file system that mirrors a directory, read-only, and adds
 * a fixed latency to every open and every read, as a network file system
 * or an object store gateway would. Tests and `make bench` mount it to make
 * storage slow for real: the latency is paid by whoever reads, through the
 * kernel, whatever the reader (prestod's io_uring, torchvision's PIL).
 *
 *   slowfs [--latency-ms MS] [--threads N] [--foreground] SOURCE MOUNTPOINT
 *
 * --latency-ms   added to each open(2) and each read request that reaches
 *                the file system (default 0); the sleeping is done by the
 *                request's own thread, so requests overlap
 * --threads      the most requests served at once (default 512): the
 *                file system is multi-threaded (libfuse's mt loop)
 * --foreground   stay in the foreground (otherwise slowfs returns once the
 *                mount is ready, and serves from the background)
 *
 * The page cache is dropped at every open (no keep_cache), so each epoch
 * pays the latency again. Unmount with `fusermount3 -u MOUNTPOINT` (or
 * umount as root); slowfs then exits. Exit status: 0, 1 on a usage or
 * mount error (with a message on stderr).
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

struct slowfs {
    int src;           /* O_PATH of SOURCE: every path is relative to it */
    long latency_ns;
};

static struct slowfs *fs(void)
{
    return fuse_get_context()->private_data;
}

static void slow(void)
{
    long ns = fs()->latency_ns;
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* "/a/b" -> "a/b", "/" -> "." */
static const char *rel(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* Many reads at once: the kernel's default is 12 in the background. */
    conn->max_background = 1024;
    conn->congestion_threshold = 768;
    cfg->kernel_cache = 0;
    cfg->entry_timeout = 60;
    cfg->attr_timeout = 60;
    cfg->negative_timeout = 0;
    return fs();
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    int rc = fi ? fstat((int)fi->fh, st) : fstatat(fs()->src, rel(path), st, AT_SYMLINK_NOFOLLOW);
    return rc < 0 ? -errno : 0;
}

static int fs_readlink(const char *path, char *buf, size_t size)
{
    ssize_t n = readlinkat(fs()->src, rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return -EROFS;
    slow();
    int fd = openat(fs()->src, rel(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 0;
    return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    (void)path;
    slow();
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int fs_opendir(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(fs()->src, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path;
    (void)off;
    (void)flags;
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    struct dirent *e;
    rewinddir(d);
    while ((e = readdir(d))) {
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type)};
        if (fill(buf, e->d_name, &st, 0, 0))
            break;
    }
    return 0;
}

static int fs_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int fs_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    int fd = openat(fs()->src, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fstatvfs(fd, st);
    int e = errno;
    close(fd);
    return rc < 0 ? -e : 0;
}

static const struct fuse_operations ops = {
    .init = fs_init,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .open = fs_open,
    .read = fs_read,
    .release = fs_release,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .releasedir = fs_releasedir,
    .statfs = fs_statfs,
};

static void usage(FILE *f)
{
    fprintf(f, "usage: slowfs [--latency-ms MS] [--threads N] [--foreground] SOURCE "
               "MOUNTPOINT\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"latency-ms", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 't'},
        {"foreground", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double latency_ms = 0;
    long threads = 512;
    int foreground = 0, c;
    char *end;
    while ((c = getopt_long(argc, argv, "l:t:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            latency_ms = strtod(optarg, &end);
            if (*end || latency_ms < 0 || latency_ms > 60000) {
                fprintf(stderr, "slowfs: --latency-ms wants 0 to 60000\n");
                return 1;
            }
            break;
        case 't':
            threads = strtol(optarg, &end, 10);
            if (*end || threads < 1 || threads > 100000) {
                fprintf(stderr, "slowfs: --threads wants 1 to 100000\n");
                return 1;
            }
            break;
        case 'f': foreground = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 1;
    }
    const char *source = argv[optind], *mnt = argv[optind + 1];
    static struct slowfs state;
    state.latency_ns = (long)(latency_ms * 1e6);
    state.src = open(source, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (state.src < 0) {
        fprintf(stderr, "slowfs: %s: %s\n", source, strerror(errno));
        return 1;
    }
    char *fargv[] = {argv[0], "-o", "ro,fsname=slowfs,subtype=slowfs", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse *f = fuse_new(&args, &ops, sizeof(ops), &state);
    if (!f) {
        fprintf(stderr, "slowfs: fuse_new failed\n");
        return 1;
    }
    if (fuse_mount(f, mnt) != 0) {
        fprintf(stderr, "slowfs: cannot mount on %s (is FUSE available here?)\n", mnt);
        fuse_destroy(f);
        return 1;
    }
    /* The parent returns once the mount is there; the child serves. */
    if (fuse_daemonize(foreground) != 0) {
        fuse_unmount(f);
        fuse_destroy(f);
        return 1;
    }
    struct fuse_session *se = fuse_get_session(f);
    if (fuse_set_signal_handlers(se) != 0) {
        fuse_unmount(f);
        fuse_destroy(f);
        return 1;
    }
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
    fuse_loop_cfg_set_idle_threads(cfg, (unsigned)(threads < 64 ? threads : 64));
    int rc = fuse_loop_mt(f, cfg);
    fuse_loop_cfg_destroy(cfg);
    fuse_remove_signal_handlers(se);
    fuse_unmount(f);
    fuse_destroy(f);
    close(state.src);
    return rc == 0 ? 0 : 1;
}
