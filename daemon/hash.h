/*
 * Hashing, checksums and the per-sample random numbers: the pure functions
 * the tiers, the planner and the steps share, so that none of them has to
 * include another for them.
 *
 *   hash_xxh64     XXH64 (seed 0) of a byte string: the disk tier's keys
 *                  (dataset name, sample path) and the memory tier's
 *                  admission subsets. Its values are stored on disk, so it
 *                  must never change.
 *   hash_crc32c    CRC32C (Castagnoli): the disk tier's record checksums
 *                  (SSE4.2's crc32 instruction where the CPU has it);
 *                  hash_crc32c_copy checks while it copies.
 *   hash_mix64     splitmix64's finalizer: mixes a 64-bit value.
 *   hash_combine   continues a hash h with a 64-bit value v: the content
 *                  fingerprints (dataset.c) and the profiler's record keys,
 *                  which are stored, so it must never change either.
 *   hash_rand01    a uniform double in [0, 1) from a splitmix64 stream.
 *   hash_sample_seed  the seed of one sample's random steps, a function of
 *                  (stream seed, epoch, sample id) only, so every epoch is
 *                  reproducible whatever the worker count, rank or cache.
 *   hash_batch_seed  the seed of a batch's batch-level steps (mixup,
 *                  cutmix), a function of (stream seed, epoch, the batch's
 *                  number in the epoch across ranks: index * world + rank)
 *                  only: hash_mix64(hash_mix64(hash_mix64(seed ^
 *                  HASH_BATCH_SALT) ^ epoch) ^ number).
 */
#ifndef PRESTO_HASH_H
#define PRESTO_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash_xxh64(const void *data, size_t len);
/* Continued from crc (0 to start). */
uint32_t hash_crc32c(uint32_t crc, const void *data, size_t len);
/* hash_crc32c of src while len bytes of it are copied to dst (which must
 * not overlap it): one pass over the bytes, each word stored from the
 * register the checksum read it into. */
uint32_t hash_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);
uint64_t hash_mix64(uint64_t x);
uint64_t hash_combine(uint64_t h, uint64_t v);
/* Advances *state. */
double hash_rand01(uint64_t *state);
uint64_t hash_sample_seed(uint64_t seed, uint64_t epoch, uint32_t sample);
#define HASH_BATCH_SALT 0x6261746368736565ull /* "batchsee" */
uint64_t hash_batch_seed(uint64_t seed, uint64_t epoch, uint64_t number);

#endif
