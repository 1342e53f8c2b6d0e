/* Hashing, checksums and the per-sample random numbers: see hash.h. */
#include "hash.h"

#include <endian.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <string.h>

#include "bytes.h"

/* ---- CRC32C ---- */

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli */

static uint32_t crc32c_table[8][256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^
                                 crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
}

/* Slicing-by-8 over the raw (not inverted) register. */
static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w = le64toh(w) ^ c;
        c = crc32c_table[7][w & 0xff] ^ crc32c_table[6][(w >> 8) & 0xff] ^
            crc32c_table[5][(w >> 16) & 0xff] ^ crc32c_table[4][(w >> 24) & 0xff] ^
            crc32c_table[3][(w >> 32) & 0xff] ^ crc32c_table[2][(w >> 40) & 0xff] ^
            crc32c_table[1][(w >> 48) & 0xff] ^ crc32c_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
/*
 * SSE4.2's crc32 instruction computes CRC32C, 8 bytes at a time, but each
 * one waits for the last (3 cycles on current x86 cores: about 2.7 bytes
 * per cycle, a fifth of a core at 1.5 GB/s). Three independent streams over
 * three adjacent blocks keep the unit busy every cycle; the streams are
 * then joined by shifting a block's CRC over the zeros the next blocks
 * would have fed it (crc(c, A|B) = shift_|B|(crc(c, A)) ^ crc(0, B) on the
 * raw register), with tables for the two block sizes used (as in Mark
 * Adler's crc32c.c).
 */
#define CRC32C_LONG 8192u /* bytes per stream in large buffers */
#define CRC32C_SHORT 256u /* ... in what is left of them */

static uint32_t crc32c_long[4][256], crc32c_short[4][256];
static pthread_once_t crc32c_shift_once = PTHREAD_ONCE_INIT;

/* The serial loop; with dst, each 8 bytes are stored there from the
 * register the crc32 instruction read them into (the copy costs no second
 * load). Inlined into its two users, where dst is NULL or not at compile
 * time. */
__attribute__((target("sse4.2"), always_inline)) static inline uint32_t
crc32c_hw_serial_to(uint32_t c, uint8_t *dst, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n && ((uintptr_t)p & 7)) {
        if (dst)
            *dst++ = *p;
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        if (dst) {
            memcpy(dst, &w, 8);
            dst += 8;
        }
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        n -= 8;
    }
    while (n--) {
        if (dst)
            *dst++ = *p;
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
    }
    return (uint32_t)c64;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_serial(uint32_t c,
                                                                   const uint8_t *p,
                                                                   size_t n)
{
    return crc32c_hw_serial_to(c, NULL, p, n);
}

/* The tables of the operator "feed len zero bytes" (linear in the register:
 * the XOR of its value on each set bit), one per byte of the register. */
static void crc32c_shift_table(uint32_t table[4][256], size_t len)
{
    static const uint8_t zeros[CRC32C_LONG];
    uint32_t bit[32];
    for (int i = 0; i < 32; i++)
        bit[i] = crc32c_hw_serial(1u << i, zeros, len);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b >> i & 1)
                    v ^= bit[8 * k + i];
            table[k][b] = v;
        }
}

static void crc32c_shift_init(void)
{
    crc32c_shift_table(crc32c_long, CRC32C_LONG);
    crc32c_shift_table(crc32c_short, CRC32C_SHORT);
}

static inline uint32_t crc32c_shift(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xff] ^ table[1][(c >> 8) & 0xff] ^ table[2][(c >> 16) & 0xff] ^
           table[3][c >> 24];
}

/* Three streams over blocks of len bytes (a multiple of 8) while at least
 * three of them are left; with dst (*dp), each word is also stored there
 * from the register it was loaded into. */
__attribute__((target("sse4.2"), always_inline)) static inline uint32_t
crc32c_hw_3way(uint32_t c, uint8_t **dp, const uint8_t **pp, size_t *np, size_t len,
               const uint32_t table[4][256])
{
    const uint8_t *p = *pp;
    uint8_t *d = dp ? *dp : NULL;
    size_t n = *np;
    while (n >= 3 * len) {
        uint64_t c0 = c, c1 = 0, c2 = 0;
        const uint8_t *end = p + len;
        do {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + len, 8);
            memcpy(&w2, p + 2 * len, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
            if (d) {
                memcpy(d, &w0, 8);
                memcpy(d + len, &w1, 8);
                memcpy(d + 2 * len, &w2, 8);
                d += 8;
            }
            p += 8;
        } while (p < end);
        c = crc32c_shift(table, (uint32_t)c0) ^ (uint32_t)c1;
        c = crc32c_shift(table, c) ^ (uint32_t)c2;
        p += 2 * len;
        if (d)
            d += 2 * len;
        n -= 3 * len;
    }
    *pp = p;
    if (dp)
        *dp = d;
    *np = n;
    return c;
}

/*
 * Where the CPU has VPCLMULQDQ on 512-bit registers (AVX-512), a large
 * buffer is folded instead, at about twice the three streams' rate (a
 * 150 KB record: 58 GB/s against 29 from L2, 25 against 11 from memory on
 * the EPYC the disk tier was measured on): four registers hold the CRC's
 * state over a window of CRC32C_FOLD bytes, and each 16-byte lane of it is
 * carried CRC32C_FOLD bytes on by two carry-less multiplications (its
 * low and high halves by x^(8 * CRC32C_FOLD + 32) and x^(8 * CRC32C_FOLD -
 * 32) mod P, bit-reflected, as in Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ"), then XORed into the next window's bytes.
 * The last window (CRC32C_FOLD bytes congruent to everything folded so
 * far) and what is left after it go through the crc32 instruction, so no
 * Barrett reduction is needed. The constants are computed, not copied:
 * crc32c_xpow(e) is x^e mod P (P not reflected).
 */
#define CRC32C_FOLD 256u            /* bytes in the folded window: four zmm registers */
#define CRC32C_FOLD_MIN (4u * 1024) /* below it, the three streams */

static uint64_t crc32c_fold_k[2]; /* the low and the high halves' multipliers */
static int crc32c_fold_ok;
static pthread_once_t crc32c_fold_once = PTHREAD_ONCE_INIT;

static uint32_t crc32c_xpow(uint32_t e)
{
    uint32_t r = 1;
    while (e--)
        r = r & 0x80000000u ? (r << 1) ^ 0x1EDC6F41u : r << 1;
    return r;
}

/* x^e mod P as the folding multiplies by it: bit-reflected, times x. */
static uint64_t crc32c_fold_const(uint32_t e)
{
    uint32_t v = crc32c_xpow(e), r = 0;
    for (int i = 0; i < 32; i++)
        if (v >> i & 1)
            r |= 1u << (31 - i);
    return (uint64_t)r << 1;
}

static void crc32c_fold_init(void)
{
    crc32c_fold_k[0] = crc32c_fold_const(8 * CRC32C_FOLD + 32);
    crc32c_fold_k[1] = crc32c_fold_const(8 * CRC32C_FOLD - 32);
    crc32c_fold_ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
}

static uint32_t crc32c_fold(uint32_t c, uint8_t *dst, const uint8_t *p, size_t n);

/* crc32c_hw, storing the bytes to dst as it goes when dst is not NULL. */
__attribute__((target("sse4.2"), always_inline)) static inline uint32_t
crc32c_hw_to(uint32_t c, uint8_t *dst, const uint8_t *p, size_t n)
{
    if (n < 3 * CRC32C_SHORT)
        return crc32c_hw_serial_to(c, dst, p, n);
    if (n >= CRC32C_FOLD_MIN) {
        pthread_once(&crc32c_fold_once, crc32c_fold_init);
        if (crc32c_fold_ok)
            return crc32c_fold(c, dst, p, n);
    }
    pthread_once(&crc32c_shift_once, crc32c_shift_init);
    while (n && ((uintptr_t)p & 7)) {
        if (dst)
            *dst++ = *p;
        c = __builtin_ia32_crc32qi(c, *p++);
        n--;
    }
    c = crc32c_hw_3way(c, dst ? &dst : NULL, &p, &n, CRC32C_LONG, crc32c_long);
    c = crc32c_hw_3way(c, dst ? &dst : NULL, &p, &n, CRC32C_SHORT, crc32c_short);
    return crc32c_hw_serial_to(c, dst, p, n);
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const uint8_t *p,
                                                            size_t n)
{
    return crc32c_hw_to(c, NULL, p, n);
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_copy(uint32_t c, uint8_t *dst,
                                                                 const uint8_t *p, size_t n)
{
    return crc32c_hw_to(c, dst, p, n);
}

/* One window's load (stored to dst too, when there is one), folded into
 * a register a: a's lanes carried CRC32C_FOLD bytes on, XORed into it. */
#define CRC32C_FOLD_STEP(a, k, p, dst, off)                                                     \
    do {                                                                                       \
        __m512i d_ = _mm512_loadu_si512((const void *)((p) + (off)));                          \
        if (dst)                                                                               \
            _mm512_storeu_si512((void *)((dst) + (off)), d_);                                  \
        (a) = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128((a), (k), 0x00),              \
                                        _mm512_clmulepi64_epi128((a), (k), 0x11), d_, 0x96);   \
    } while (0)

/* crc32c_hw_to over n >= CRC32C_FOLD_MIN bytes, folded (see above). */
__attribute__((target("sse4.2,avx512f,vpclmulqdq,pclmul"))) static uint32_t
crc32c_fold(uint32_t c, uint8_t *dst, const uint8_t *p, size_t n)
{
    const __m512i k = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)crc32c_fold_k[1], (long long)crc32c_fold_k[0]));
    /* The first window, the register c XORed into its first bytes (as the
     * crc32 instruction would feed them). */
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    CRC32C_FOLD_STEP(a0, k, p, dst, 0);
    CRC32C_FOLD_STEP(a1, k, p, dst, 64);
    CRC32C_FOLD_STEP(a2, k, p, dst, 128);
    CRC32C_FOLD_STEP(a3, k, p, dst, 192);
    a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    for (p += CRC32C_FOLD, n -= CRC32C_FOLD, dst = dst ? dst + CRC32C_FOLD : NULL;
         n >= CRC32C_FOLD; p += CRC32C_FOLD, n -= CRC32C_FOLD) {
        CRC32C_FOLD_STEP(a0, k, p, dst, 0);
        CRC32C_FOLD_STEP(a1, k, p, dst, 64);
        CRC32C_FOLD_STEP(a2, k, p, dst, 128);
        CRC32C_FOLD_STEP(a3, k, p, dst, 192);
        if (dst)
            dst += CRC32C_FOLD;
    }
    uint8_t w[CRC32C_FOLD];
    _mm512_storeu_si512((void *)w, a0);
    _mm512_storeu_si512((void *)(w + 64), a1);
    _mm512_storeu_si512((void *)(w + 128), a2);
    _mm512_storeu_si512((void *)(w + 192), a3);
    c = crc32c_hw_to(0, NULL, w, CRC32C_FOLD);
    return crc32c_hw_to(c, dst, p, n); /* n < CRC32C_FOLD: the three streams or serial */
}
#endif

uint32_t hash_crc32c(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc32c_hw(~crc, p, len);
#endif
    return ~crc32c_sw(~crc, p, len);
}

uint32_t hash_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
    const uint8_t *p = src;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc32c_hw_copy(~crc, dst, p, len);
#endif
    memcpy(dst, p, len);
    return ~crc32c_sw(~crc, p, len);
}

/* ---- XXH64 ---- */

#define XXP1 0x9E3779B185EBCA87ull
#define XXP2 0xC2B2AE3D27D4EB4Full
#define XXP3 0x165667B19E3779F9ull
#define XXP4 0x85EBCA77C2B2AE63ull
#define XXP5 0x27D4EB2F165667C5ull

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t in)
{
    return rotl64(acc + in * XXP2, 31) * XXP1;
}

static inline uint64_t xxh_merge(uint64_t acc, uint64_t v)
{
    return (acc ^ xxh_round(0, v)) * XXP1 + XXP4;
}

uint64_t hash_xxh64(const void *data, size_t len)
{
    const uint8_t *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = XXP1 + XXP2, v2 = XXP2, v3 = 0, v4 = -XXP1;
        do {
            v1 = xxh_round(v1, rd64(p));
            v2 = xxh_round(v2, rd64(p + 8));
            v3 = xxh_round(v3, rd64(p + 16));
            v4 = xxh_round(v4, rd64(p + 24));
            p += 32;
        } while (end - p >= 32);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = XXP5;
    }
    h += len;
    for (; end - p >= 8; p += 8)
        h = rotl64(h ^ xxh_round(0, rd64(p)), 27) * XXP1 + XXP4;
    if (end - p >= 4) {
        h = rotl64(h ^ (uint64_t)rd32(p) * XXP1, 23) * XXP2 + XXP3;
        p += 4;
    }
    for (; p < end; p++)
        h = rotl64(h ^ *p * XXP5, 11) * XXP1;
    h ^= h >> 33;
    h *= XXP2;
    h ^= h >> 29;
    h *= XXP3;
    h ^= h >> 32;
    return h;
}

/* ---- random numbers ---- */

uint64_t hash_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t hash_combine(uint64_t h, uint64_t v)
{
    return hash_mix64(h ^ v) + 0x9e3779b97f4a7c15ULL;
}

double hash_rand01(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return (double)(hash_mix64(*state) >> 11) * 0x1.0p-53;
}

uint64_t hash_sample_seed(uint64_t seed, uint64_t epoch, uint32_t sample)
{
    return hash_mix64(hash_mix64(hash_mix64(seed) ^ epoch) ^ sample);
}

uint64_t hash_batch_seed(uint64_t seed, uint64_t epoch, uint64_t number)
{
    return hash_mix64(hash_mix64(hash_mix64(seed ^ HASH_BATCH_SALT) ^ epoch) ^ number);
}
