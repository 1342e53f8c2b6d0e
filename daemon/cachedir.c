/* The cache directory: see cachedir.h. */
#include "cachedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
