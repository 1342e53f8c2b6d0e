/*
 * Little-endian reads and writes of unaligned bytes: the disk tier's
 * record headers (store.c) and XXH64's input (hash.c). On disk everything
 * is little-endian whatever the host.
 */
#ifndef PRESTO_BYTES_H
#define PRESTO_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return le16toh(v);
}

static inline void wr64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, 2);
}

#endif
