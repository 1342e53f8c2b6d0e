/*
 * Shared-memory batch rings: one per shared-memory epoch stream, a sealed
 * memfd of `slots` equal slots that the workers write batches into and the
 * client maps. The seals (no shrinking, no growing, no new seals) keep a
 * client from truncating the file under the daemon's mapping.
 *
 * A ring holds memory until its last descriptor and mapping are gone, and
 * the client has both: the client memory budget (budget.h) keeps charging
 * a ring the daemon let go until then.
 */
#ifndef PRESTO_RING_H
#define PRESTO_RING_H

#include <stddef.h>
#include <stdint.h>

struct ring {
    int fd;              /* -1: no ring */
    uint8_t *base;
    uint32_t slots;
    size_t slot_bytes;   /* a multiple of the page size */
};

/* Creates the ring with room for `bytes` per slot. Returns 0 or a negative
 * errno (memfd_create, ftruncate, mmap or sealing failed); r->fd is -1
 * then. */
int ring_create(struct ring *r, uint32_t slots, size_t bytes, const char *name);
/* Unmaps the ring and closes the daemon's descriptor: its pages go with the
 * last descriptor or mapping, which may be a client's. */
void ring_destroy(struct ring *r);
/* Frees the ring's pages now, even those a client still maps (it reads
 * zeros after): 0 or -errno. The seals allow it. */
int ring_punch(struct ring *r);

/* The slot size ring_create makes for `bytes`: whole pages. */
size_t ring_slot_size(size_t bytes);

static inline size_t ring_bytes(const struct ring *r)
{
    return r->slots * r->slot_bytes;
}

static inline uint8_t *ring_slot(const struct ring *r, uint32_t slot)
{
    return r->base + (size_t)slot * r->slot_bytes;
}

#endif
