/* sd_notify and socket activation: see notify.h. */
#include "notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int notify_send(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len;

    if (!path || !*path)
        return 0;
    len = strlen(path);
    if (len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
        return -EINVAL;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    int rc = n < 0 ? -errno : 1;
    close(fd);
    return rc;
}

int notify_listen_fd(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid || !fds || strtol(pid, NULL, 10) != (long)getpid() || strtol(fds, NULL, 10) < 1)
        return -ENOENT;
    int fd = 3; /* SD_LISTEN_FDS_START */
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0)
        return -errno;
    fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return fd;
}
