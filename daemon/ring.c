/* Shared-memory batch rings: see ring.h. */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

size_t ring_slot_size(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

int ring_create(struct ring *r, uint32_t slots, size_t bytes, const char *name)
{
    r->fd = -1;
    r->base = NULL;
    r->slots = slots;
    r->slot_bytes = ring_slot_size(bytes);
    if (slots == 0 || r->slot_bytes == 0 || r->slot_bytes > SIZE_MAX / slots)
        return -EINVAL;
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int err = 0;
    if (ftruncate(fd, (off_t)ring_bytes(r)) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        err = -errno;
    void *p = err ? MAP_FAILED
                  : mmap(NULL, ring_bytes(r), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        err = err ? err : -errno;
        close(fd);
        return err;
    }
    r->fd = fd;
    r->base = p;
    return 0;
}

int ring_punch(struct ring *r)
{
    if (r->fd < 0)
        return 0;
    if (fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  (off_t)ring_bytes(r)) < 0)
        return -errno;
    return 0;
}

void ring_destroy(struct ring *r)
{
    if (r->fd < 0)
        return;
    munmap(r->base, ring_bytes(r));
    close(r->fd);
    r->fd = -1;
    r->base = NULL;
}
