/* Trusted paths: see trust.h. */
#define _GNU_SOURCE /* O_PATH */
#include "trust.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directories resolved so far (fd[0] is /), and where that is. */
struct walk {
    const struct trust_opts *o;
    int fd[TRUST_MAX_DEPTH];
    unsigned char sticky[TRUST_MAX_DEPTH]; /* sticky and writable by others */
    unsigned depth;
    char at[PATH_MAX];
    char *why;
    size_t whylen;
};

__attribute__((format(printf, 3, 4)))
static int walk_fail(struct walk *w, int rc, const char *fmt, ...)
{
    va_list ap;
    if (w->whylen) {
        va_start(ap, fmt);
        vsnprintf(w->why, w->whylen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* A system call's errno as the walk returns it: -EPERM means "not trusted". */
static int sys_err(void)
{
    return errno == EPERM ? -EACCES : -errno;
}

static void walk_pop(struct walk *w)
{
    close(w->fd[--w->depth]);
    char *slash = strrchr(w->at, '/');
    if (slash && slash != w->at)
        *slash = '\0';
    else
        snprintf(w->at, sizeof(w->at), "/");
}

/* The checks of a directory, from its descriptor. last: nothing follows it. */
static int walk_check(struct walk *w, int fd, const char *path, int last)
{
    const struct trust_opts *o = w->o;
    int exact = last && (o->flags & TRUST_OWNER_EXACT);
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return walk_fail(w, sys_err(), "%s: %s", path, strerror(errno));
    if (sb.st_uid != o->uid && (sb.st_uid != 0 || exact))
        return walk_fail(w, -EPERM, "%s belongs to uid %u, not to %suid %u", path,
                         (unsigned)sb.st_uid, exact ? "" : "root or ", (unsigned)o->uid);
    if ((sb.st_mode & (S_IWGRP | S_IWOTH)) &&
        (last || !(sb.st_mode & S_ISVTX) || !(o->flags & (TRUST_STICKY_OK | TRUST_STICKY_ROOT))))
        return walk_fail(w, -EPERM, "%s is writable by %s (mode %04o)", path,
                         (sb.st_mode & S_IWOTH) ? "others" : "its group",
                         (unsigned)(sb.st_mode & 07777));
    return 0;
}

/* The directory fd, reached as name in the one on top (the first: /),
 * joins the walk once it passed its checks. Takes fd. */
static int walk_push(struct walk *w, int fd, const char *name, int last)
{
    char path[PATH_MAX];
    struct stat sb;
    int rc = 0;
    if (w->depth == 0)
        snprintf(path, sizeof(path), "/");
    else if ((size_t)snprintf(path, sizeof(path), "%s%s%s", w->at, strcmp(w->at, "/") ? "/" : "",
                              name) >= sizeof(path))
        rc = walk_fail(w, -ENAMETOOLONG, "%s/%s: too long", w->at, name);
    if (rc == 0 && w->depth == TRUST_MAX_DEPTH)
        rc = walk_fail(w, -ENAMETOOLONG, "%s: more than %d directories deep", path,
                       TRUST_MAX_DEPTH);
    if (rc == 0)
        rc = walk_check(w, fd, path, last);
    if (rc == 0 && fstat(fd, &sb) < 0)
        rc = walk_fail(w, sys_err(), "%s: %s", path, strerror(errno));
    if (rc < 0) {
        close(fd);
        return rc;
    }
    w->sticky[w->depth] = (sb.st_mode & S_ISVTX) && (sb.st_mode & (S_IWGRP | S_IWOTH));
    w->fd[w->depth++] = fd;
    memcpy(w->at, path, sizeof(path));
    return 0;
}

/* One component, name, of the directory on top: pushed (0), or a link
 * whose target now stands in todo in front of rest (1). */
static int walk_step(struct walk *w, const char *name, int last, char *todo, size_t todolen,
                     const char *rest, unsigned *links)
{
    const struct trust_opts *o = w->o;
    int dfd = w->fd[w->depth - 1];
    const char *sep = strcmp(w->at, "/") ? "/" : "";
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
            return walk_fail(w, sys_err(), "%s%s%s: %s", w->at, sep, name, strerror(errno));
        if (!(o->flags & TRUST_CREATE))
            return walk_fail(w, -ENOENT, "%s%s%s: %s", w->at, sep, name, strerror(ENOENT));
        if ((mkdirat(dfd, name, o->create) < 0 && errno != EEXIST) ||
            fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
            return walk_fail(w, sys_err(), "cannot create %s%s%s: %s", w->at, sep, name,
                             strerror(errno));
    }
    /* In a directory anyone may write, anyone may have made the entry. */
    if (w->sticky[w->depth - 1] && (o->flags & TRUST_STICKY_ROOT) && sb.st_uid != 0)
        return walk_fail(w, -EPERM, "%s%s%s belongs to uid %u, in a directory anyone may write "
                         "(sticky), where only root's entries are trusted", w->at, sep, name,
                         (unsigned)sb.st_uid);
    if (S_ISLNK(sb.st_mode)) {
        char target[PATH_MAX], next[PATH_MAX];
        if (sb.st_uid != o->uid && sb.st_uid != 0)
            return walk_fail(w, -EPERM, "%s%s%s is a symbolic link of uid %u, not of root or "
                             "uid %u", w->at, sep, name, (unsigned)sb.st_uid, (unsigned)o->uid);
        if (++*links > TRUST_MAX_LINKS)
            return walk_fail(w, -ELOOP, "%s%s%s: more than %d symbolic links", w->at, sep,
                             name, TRUST_MAX_LINKS);
        ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
        if (n < 0)
            return walk_fail(w, sys_err(), "%s%s%s: %s", w->at, sep, name, strerror(errno));
        target[n] = '\0';
        if ((size_t)snprintf(next, sizeof(next), "%s/%s", target, rest) >= todolen)
            return walk_fail(w, -ENAMETOOLONG, "%s%s%s: the path it leads to is too long",
                             w->at, sep, name);
        memcpy(todo, next, strlen(next) + 1);
        if (target[0] == '/')
            while (w->depth > 1)
                walk_pop(w);
        return 1;
    }
    if (!S_ISDIR(sb.st_mode))
        return walk_fail(w, -ENOTDIR, "%s%s%s: %s", w->at, sep, name, strerror(ENOTDIR));
    int fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return walk_fail(w, sys_err(), "%s%s%s: %s", w->at, sep, name, strerror(errno));
    return walk_push(w, fd, name, last);
}

/* Walks todo, an absolute path (rewritten as links are followed). */
static int walk_path(struct walk *w, char *todo, size_t todolen)
{
    unsigned links = 0;
    const char *p = todo;
    for (;;) {
        char name[NAME_MAX + 1], rest[PATH_MAX];
        while (*p == '/')
            p++;
        if (!*p)
            return 0;
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX)
            return walk_fail(w, -ENAMETOOLONG, "a name longer than %d bytes in the path",
                             NAME_MAX);
        memcpy(name, p, n);
        name[n] = '\0';
        p += n;
        if (strcmp(name, ".") == 0)
            continue;
        if (strcmp(name, "..") == 0) {
            if (w->depth > 1)
                walk_pop(w);
            continue;
        }
        snprintf(rest, sizeof(rest), "%s", p);
        int rc = walk_step(w, name, rest[strspn(rest, "/")] == '\0', todo, todolen, rest,
                           &links);
        if (rc < 0)
            return rc;
        if (rc == 1)
            p = todo;
    }
}

int trust_open_dir(const char *path, const struct trust_opts *o, char *why, size_t whylen)
{
    struct walk w = {.o = o, .why = why, .whylen = whylen};
    char todo[PATH_MAX];
    int rc;
    if (whylen)
        why[0] = '\0';
    if (!path || !*path)
        return walk_fail(&w, -EINVAL, "an empty path");
    if (path[0] == '/') {
        rc = snprintf(todo, sizeof(todo), "%s", path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
            return walk_fail(&w, sys_err(), "the working directory: %s", strerror(errno));
        rc = snprintf(todo, sizeof(todo), "%s/%s", cwd, path);
    }
    if (rc < 0 || (size_t)rc >= sizeof(todo))
        return walk_fail(&w, -ENAMETOOLONG, "%s: too long", path);
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return walk_fail(&w, sys_err(), "/: %s", strerror(errno));
    /* Each directory passes as one on the way, and the one the walk ends
     * in as the last (a path may end in "." or ".." or a link). */
    if ((rc = walk_push(&w, root, "", 0)) == 0 && (rc = walk_path(&w, todo, sizeof(todo))) == 0 &&
        (rc = walk_check(&w, w.fd[w.depth - 1], w.at, 1)) == 0) {
        if (o->flags & TRUST_RDONLY) {
            rc = openat(w.fd[w.depth - 1], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (rc < 0)
                rc = walk_fail(&w, sys_err(), "%s: %s", w.at, strerror(errno));
        } else {
            rc = w.fd[--w.depth];
        }
    }
    while (w.depth > 0)
        close(w.fd[--w.depth]);
    return rc;
}
