/*
 * Trusted paths: could anyone but root and one user change what a path
 * leads to? The daemon asks it of its cache directory and of its socket's
 * directory (the user: itself); the client asks it of the socket of a
 * daemon that runs as someone else (the user: the daemon's).
 *
 * trust_open_dir() resolves the path one component at a time from / (a
 * relative one from the working directory, itself resolved from /): each
 * directory is opened with O_NOFOLLOW relative to the one before and
 * checked through its own descriptor (fstat), so what is checked is what
 * is used. The path is trusted when
 *   - every directory on the way belongs to root or the user and is not
 *     writable by its group or others, unless it is sticky (/tmp: its
 *     entries can be renamed or removed only by their owners) and
 *     TRUST_STICKY_OK (the next component is then root's or the user's, as
 *     every one is) or TRUST_STICKY_ROOT (the next component is root's:
 *     anyone may make a directory there named like another user's);
 *   - the last directory belongs to the user (or root, without
 *     TRUST_OWNER_EXACT) and is not writable by group or others, sticky
 *     or not;
 *   - a symbolic link on the way belongs to root or the user (it lies in a
 *     directory that passed); it is followed by hand, at most
 *     TRUST_MAX_LINKS of them.
 * Missing directories are created with TRUST_CREATE (mkdirat, mode
 * `create`, then the same checks: one someone else made meanwhile fails
 * them), else reported as -ENOENT once everything before them passed.
 * A group- or other-writable directory is refused even where ACLs or the
 * group's members would make it safe: the mode bits are all it reads.
 */
#ifndef PRESTO_TRUST_H
#define PRESTO_TRUST_H

#include <stddef.h>
#include <sys/types.h>

#define TRUST_MAX_LINKS 40
#define TRUST_MAX_DEPTH 128 /* directories deep */

#define TRUST_CREATE 1u      /* make missing directories (mode: create) */
#define TRUST_STICKY_OK 2u   /* sticky directories writable by others may lie on the way */
#define TRUST_OWNER_EXACT 4u /* the last directory belongs to uid, not root */
#define TRUST_RDONLY 8u      /* an O_RDONLY descriptor (getdents, flock), not O_PATH */
#define TRUST_STICKY_ROOT 16u /* sticky ones too, if what is taken from them is root's */

struct trust_opts {
    uid_t uid;      /* trusted besides root */
    unsigned flags; /* TRUST_* */
    mode_t create;  /* TRUST_CREATE: the mode of the directories made */
};

/* A descriptor of the directory at path (O_DIRECTORY | O_CLOEXEC, O_PATH
 * unless TRUST_RDONLY), or a negative errno with one line in why naming the
 * directory at fault: -EPERM when it is not trusted (only that returns
 * -EPERM), -ENOENT when a directory is missing (not TRUST_CREATE), -ELOOP,
 * -ENOTDIR, -ENAMETOOLONG, or what the file system said. */
int trust_open_dir(const char *path, const struct trust_opts *o, char *why, size_t whylen);

#endif
