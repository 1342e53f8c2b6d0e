/*
 * Access control: who is on the other end of a connection, whether it may
 * run admin operations, and opening dataset files without leaving their
 * root.
 *
 * Peers. At accept the daemon reads the peer's credentials as the kernel
 * recorded them when the peer called connect(): SO_PEERCRED (pid, uid,
 * gid) and SO_PEERGROUPS (the supplementary groups). Both are fixed for
 * the connection's life and cannot be forged or raced by the peer. Only
 * on a kernel without SO_PEERGROUPS (before Linux 4.13) are the groups
 * read from /proc/PID/status ("Groups:") instead, which is a snapshot at
 * accept time of a process that may have changed or exited since; the
 * log says so once. No NSS lookup (getgrouplist) is done per connection:
 * it could block the event loop on a directory service, and it reports
 * the group database, not the groups the process really holds.
 *
 * Admins are root (uid 0), the daemon's own user (its effective uid),
 * and members of the configured admin group (primary or supplementary).
 * Admin operations: RELOAD, DROP_CACHE, WARM and the profiler's requests.
 * Everyone who can connect (the socket's mode and group decide that) may
 * stream and read stats.
 *
 * Dataset files. Clients name datasets, never paths; the daemon opens only
 * the files it indexed under a dataset's root (and its own cache dir).
 * With follow_symlinks off (the default), indexing refuses a symbolic link
 * whose target resolves outside the root (one pointing inside the root is
 * fine): it is counted (the dataset's "refused" in stats), logged, and
 * never served. dataset_open_file() opens through access_open_beneath(),
 * which refuses a path that leaves the root at open time too (a file
 * swapped for such a link after indexing); the batched reads of io.c do
 * the same in the kernel (io_uring OPENAT2 with RESOLVE_BENEATH), and a
 * link it refuses goes to access_open_beneath on the worker, which reads an
 * absolute link that stays inside and refuses one that leaves.
 */
#ifndef PRESTO_ACCESS_H
#define PRESTO_ACCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* No group configured (config admin_group, socket_group unset). */
#define ACCESS_NO_GROUP UINT32_MAX

enum access_groups_source {
    ACCESS_GROUPS_PEERGROUPS = 0, /* SO_PEERGROUPS: as at connect() */
    ACCESS_GROUPS_PROC,           /* /proc/PID/status at accept (old kernels) */
    ACCESS_GROUPS_NONE,           /* neither could be read: primary group only */
};

struct access_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint32_t ngroups;
    gid_t *groups; /* supplementary groups (malloc'ed, may be NULL) */
    enum access_groups_source source;
};

/* Reads the credentials of the peer of a connected Unix socket. Returns 0,
 * or a negative errno when SO_PEERCRED fails (then *p is zeroed, with uid
 * and gid (uid_t)-1: no one). */
int access_peer_read(int fd, struct access_peer *p);
void access_peer_free(struct access_peer *p);

/* 1 when p may run admin operations: root, the user daemon_uid, or a
 * member of admin_gid (ACCESS_NO_GROUP: no admin group). */
int access_is_admin(const struct access_peer *p, uid_t daemon_uid, uint32_t admin_gid);
/* 1 when gid is p's primary or one of its supplementary groups. */
int access_in_group(const struct access_peer *p, gid_t gid);

/* Denials, and refused or dropped connections, are logged at most once a
 * second per kind (the rest are counted and reported with the next line),
 * so a client that loops on a refused request or connect cannot flood the
 * log. One per kind and server, event loop thread only. */
struct access_log {
    uint64_t last_ns;
    uint64_t suppressed;
};
/* 1 when a line of this kind may be logged now, with "; N more not logged
 * since the last such line" (or "") in more; else 0, the line counted. */
int access_log_take(struct access_log *l, char *more, size_t morelen);
void access_log_denied(struct access_log *l, const struct access_peer *p, const char *op,
                       uid_t daemon_uid, uint32_t admin_gid);

/* 1 when path, resolved (realpath), is real_root or lies below it; 0 when
 * it resolves elsewhere; a negative errno when it cannot be resolved.
 * real_root must be a resolved path itself. */
int access_path_within(const char *real_root, const char *path);

/* Opens rel (relative, as indexed) below the directory root_fd (whose
 * resolved path is real_root) read-only, refusing to leave it: openat2()
 * with RESOLVE_BENEATH; where that says EXDEV (an absolute symlink, which
 * may still point inside) or is not available (ENOSYS, or EPERM from a
 * seccomp filter), openat() and then the opened file's real path
 * (/proc/self/fd) is checked against real_root. Returns the fd, -EXDEV
 * when the file lies outside the root, or another negative errno. */
int access_open_beneath(int root_fd, const char *real_root, const char *rel);

#endif
