/* Peer credentials, the admin rule and opens below a root: see access.h. */
#define _GNU_SOURCE /* struct ucred */
#include "access.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "stats.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

#define ACCESS_LOG_INTERVAL_NS 1000000000ull

/* "Groups:" of /proc/PID/status: the groups of a live process now. */
static int groups_from_proc(pid_t pid, gid_t **out, uint32_t *n)
{
    char path[64], line[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    int rc = -ENOENT;
    *out = NULL;
    *n = 0;
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Groups:", 7) != 0)
            continue;
        rc = 0;
        uint32_t cap = 0;
        for (char *p = line + 7, *end;; p = end) {
            while (*p == ' ' || *p == '\t')
                p++;
            if (!isdigit((unsigned char)*p))
                break;
            errno = 0;
            unsigned long g = strtoul(p, &end, 10);
            if (errno || g > UINT32_MAX)
                break;
            if (*n == cap) {
                gid_t *ng = realloc(*out, (cap = cap ? cap * 2 : 16) * sizeof(*ng));
                if (!ng) {
                    rc = -ENOMEM;
                    break;
                }
                *out = ng;
            }
            (*out)[(*n)++] = (gid_t)g;
        }
        break;
    }
    fclose(f);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* SO_PEERGROUPS, growing the buffer to what the kernel asks for. */
static int groups_from_socket(int fd, gid_t **out, uint32_t *n)
{
    socklen_t len = 32 * sizeof(gid_t);
    *out = NULL;
    *n = 0;
    for (int tries = 0; tries < 4; tries++) {
        gid_t *buf = malloc(len ? len : sizeof(gid_t));
        if (!buf)
            return -ENOMEM;
        socklen_t got = len;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, buf, &got) == 0) {
            if (got == 0) {
                free(buf);
                return 0;
            }
            *out = buf;
            *n = (uint32_t)(got / sizeof(gid_t));
            return 0;
        }
        int e = errno;
        free(buf);
        if (e != ERANGE)
            return -e;
        len = got > len ? got : len * 2; /* the kernel wrote the size it needs */
    }
    return -ERANGE;
}

int access_peer_read(int fd, struct access_peer *p)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    memset(p, 0, sizeof(*p));
    p->uid = (uid_t)-1;
    p->gid = (gid_t)-1;
    p->source = ACCESS_GROUPS_NONE;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return -errno;
    p->pid = cr.pid;
    p->uid = cr.uid;
    p->gid = cr.gid;
    int rc = groups_from_socket(fd, &p->groups, &p->ngroups);
    if (rc == 0) {
        p->source = ACCESS_GROUPS_PEERGROUPS;
    } else if (rc == -ENOPROTOOPT && groups_from_proc(p->pid, &p->groups, &p->ngroups) == 0) {
        p->source = ACCESS_GROUPS_PROC;
    }
    return 0;
}

void access_peer_free(struct access_peer *p)
{
    free(p->groups);
    p->groups = NULL;
    p->ngroups = 0;
}

int access_in_group(const struct access_peer *p, gid_t gid)
{
    if (p->gid == gid)
        return 1;
    for (uint32_t i = 0; i < p->ngroups; i++)
        if (p->groups[i] == gid)
            return 1;
    return 0;
}

int access_is_admin(const struct access_peer *p, uid_t daemon_uid, uint32_t admin_gid)
{
    if (p->uid == (uid_t)-1)
        return 0;
    if (p->uid == 0 || p->uid == daemon_uid)
        return 1;
    return admin_gid != ACCESS_NO_GROUP && access_in_group(p, (gid_t)admin_gid);
}

int access_log_take(struct access_log *l, char *more, size_t morelen)
{
    uint64_t now = stats_now_ns();
    if (l->last_ns && now - l->last_ns < ACCESS_LOG_INTERVAL_NS) {
        l->suppressed++;
        return 0;
    }
    more[0] = '\0';
    if (l->suppressed)
        snprintf(more, morelen, "; %llu more not logged since the last such line",
                 (unsigned long long)l->suppressed);
    l->last_ns = now;
    l->suppressed = 0;
    return 1;
}

void access_log_denied(struct access_log *l, const struct access_peer *p, const char *op,
                       uid_t daemon_uid, uint32_t admin_gid)
{
    char more[64];
    if (!access_log_take(l, more, sizeof(more)))
        return;
    char group[48] = "no admin_group is configured";
    if (admin_gid != ACCESS_NO_GROUP)
        snprintf(group, sizeof(group), "not in admin_group %u", admin_gid);
    log_warn("access: %s denied to pid %d uid %u gid %u: not root, not uid %u, %s%s%s", op,
             (int)p->pid, (unsigned)p->uid, (unsigned)p->gid, (unsigned)daemon_uid, group,
             p->source == ACCESS_GROUPS_NONE ? " (supplementary groups unknown)" : "", more);
}

int access_path_within(const char *real_root, const char *path)
{
    char *real = realpath(path, NULL);
    if (!real)
        return -errno;
    size_t n = strlen(real_root);
    int inside = strncmp(real, real_root, n) == 0 &&
                 (real[n] == '\0' || real[n] == '/' || (n == 1 && real_root[0] == '/'));
    free(real);
    return inside;
}

/* The opened file's real path is below real_root. */
static int fd_within(int fd, const char *real_root)
{
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n < 0) /* no /proc: the check at indexing time is what there is */
        return 1;
    real[n] = '\0';
    size_t r = strlen(real_root);
    return strncmp(real, real_root, r) == 0 &&
           (real[r] == '/' || (r == 1 && real_root[0] == '/'));
}

int access_open_beneath(int root_fd, const char *real_root, const char *rel)
{
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    int fd = (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
    if (fd >= 0)
        return fd;
    if (errno != EXDEV && errno != ENOSYS && errno != EPERM)
        return -errno;
    fd = openat(root_fd, rel, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (!fd_within(fd, real_root)) {
        close(fd);
        return -EXDEV;
    }
    return fd;
}
