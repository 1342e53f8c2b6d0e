/*
 * systemd's readiness protocol without libsystemd: datagrams such as
 * "READY=1" to $NOTIFY_SOCKET (a path, or "@name" for the abstract
 * namespace). A no-op when the variable is unset.
 */
#ifndef PRESTO_NOTIFY_H
#define PRESTO_NOTIFY_H

/* Returns 1 if sent, 0 when there is no NOTIFY_SOCKET, or a negative errno. */
int notify_send(const char *state);
/* Socket activation: the first fd passed by systemd when LISTEN_PID is us
 * and LISTEN_FDS >= 1, else -ENOENT (none passed) or -errno. */
int notify_listen_fd(void);

#endif
