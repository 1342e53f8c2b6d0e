/* The cache directory: see cachedir.h. */
#include "cachedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"
#include "trust.h"

int cachedir_open(const char *path, int create, char *err, size_t errlen)
{
    struct trust_opts o = {geteuid(), TRUST_STICKY_OK | TRUST_OWNER_EXACT | TRUST_RDONLY, 0750};
    char why[512];
    if (create)
        o.flags |= TRUST_CREATE;
    int fd = trust_open_dir(path, &o, why, sizeof(why));
    if (fd < 0)
        snprintf(err, errlen, "cache.dir %s: %s%s", path, why,
                 fd == -EPERM ? ": only the daemon's user and root may change it" : "");
    return fd;
}

int cachedir_check(const char *path, char *err, size_t errlen)
{
    int fd = cachedir_open(path, 0, err, errlen);
    if (fd >= 0)
        close(fd);
    return fd == -EPERM ? fd : 0;
}

int cachedir_open_file(int dir, const char *name, int flags, mode_t mode)
{
    /* O_NONBLOCK: a FIFO planted under the name does not block the open. */
    int fd = openat(dir, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) < 0)
        rc = -errno;
    else if (!S_ISREG(sb.st_mode))
        rc = -EINVAL;
    else if (sb.st_uid != geteuid() || sb.st_nlink != 1)
        rc = -EPERM;
    /* io_uring would not wait on a regular file opened O_NONBLOCK. */
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int cachedir_remove_dir(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) /* a link, or a file: itself */
        return unlinkat(parent, name, 0) < 0 ? -errno : 1;
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return rc;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        /* Never recursive: a subdirectory (trials hold none) stays. */
        if (unlinkat(dirfd(d), e->d_name, 0) < 0)
            log_warn("cache.dir: cannot remove %s/%s: %s", name, e->d_name, strerror(errno));
    }
    closedir(d);
    return unlinkat(parent, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* ---- small files of the daemon's own ---- */

static int read_all(int fd, unsigned char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, buf + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EBADMSG;
        got += (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

#define BLOB_HEAD 48 /* the fixed part of a blob's file */

void cachedir_blob_name(const struct cachedir_key *key, char *buf, size_t len)
{
    snprintf(buf, len, "%.16s-%016llx.idx", key->prefix,
             (unsigned long long)hash_xxh64(key->locator, strlen(key->locator)));
}

int cachedir_load_blob(const char *path, const struct cachedir_key *key, size_t max,
                       unsigned char **file, const unsigned char **body, size_t *len,
                       uint64_t *count)
{
    char err[600], name[64];
    struct stat sb;
    *file = NULL;
    if (!path || !*path)
        return -ENOENT;
    int dfd = cachedir_open(path, 0, err, sizeof(err));
    if (dfd < 0)
        return -ENOENT;
    cachedir_blob_name(key, name, sizeof(name));
    int fd = cachedir_open_file(dfd, name, O_RDONLY, 0);
    close(dfd);
    if (fd < 0)
        return -ENOENT;
    size_t ll = strlen(key->locator);
    if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size < BLOB_HEAD + ll + 8 ||
        (uint64_t)sb.st_size > max) {
        close(fd);
        return -ENOENT;
    }
    size_t flen = (size_t)sb.st_size;
    unsigned char *f = malloc(flen);
    if (!f) {
        close(fd);
        return -ENOMEM;
    }
    int rc = read_all(fd, f, flen);
    close(fd);
    uint32_t format, locator_len;
    uint64_t size, version, body_len, sum;
    memcpy(&format, f + 8, 4);
    memcpy(&locator_len, f + 12, 4);
    memcpy(&size, f + 16, 8);
    memcpy(&version, f + 24, 8);
    memcpy(count, f + 32, 8);
    memcpy(&body_len, f + 40, 8);
    memcpy(&sum, f + flen - 8, 8);
    if (rc < 0 || memcmp(f, key->magic, 8) != 0 || format != key->format ||
        locator_len != ll || memcmp(f + BLOB_HEAD, key->locator, ll) != 0 ||
        size != key->size || version != key->version ||
        body_len != flen - BLOB_HEAD - ll - 8 || sum != hash_xxh64(f, flen - 8)) {
        free(f);
        return -ENOENT;
    }
    *file = f;
    *body = f + BLOB_HEAD + ll;
    *len = (size_t)body_len;
    return 0;
}

int cachedir_save_blob(const char *path, const struct cachedir_key *key, uint64_t count,
                       const void *body, size_t len)
{
    static atomic_uint seq;
    char err[600], name[64], tmp[128];
    if (!path || !*path)
        return -ENOENT;
    size_t ll = strlen(key->locator);
    size_t flen = BLOB_HEAD + ll + len;
    unsigned char *f = malloc(flen + 8);
    if (!f)
        return -ENOMEM;
    uint32_t l32 = (uint32_t)ll;
    uint64_t body_len = len;
    memcpy(f, key->magic, 8);
    memcpy(f + 8, &key->format, 4);
    memcpy(f + 12, &l32, 4);
    memcpy(f + 16, &key->size, 8);
    memcpy(f + 24, &key->version, 8);
    memcpy(f + 32, &count, 8);
    memcpy(f + 40, &body_len, 8);
    memcpy(f + BLOB_HEAD, key->locator, ll);
    if (len)
        memcpy(f + BLOB_HEAD + ll, body, len);
    uint64_t sum = hash_xxh64(f, flen);
    memcpy(f + flen, &sum, 8);
    int dfd = cachedir_open(path, 1, err, sizeof(err));
    if (dfd < 0) {
        free(f);
        return dfd;
    }
    /* a name of this process's own: several daemons may share cache.dir */
    cachedir_blob_name(key, name, sizeof(name));
    snprintf(tmp, sizeof(tmp), "%s.%d.%u.tmp", name, (int)getpid(),
             atomic_fetch_add(&seq, 1));
    /* 0640 like the segments: the umask may narrow it, never widen it. */
    int fd = cachedir_open_file(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0640);
    int rc = fd < 0 ? fd : write_all(fd, f, flen + 8);
    free(f);
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
        rc = -errno;
    if (rc < 0 && fd >= 0)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}
