/*
 * presto wire protocol, version 1. This header is the protocol's only
 * definition; daemon and client both build from it.
 *
 * Transport: a Unix stream socket. Every message is one frame:
 *
 *   offset size field
 *   0      4    magic      0x54535250 ("PRST" little-endian on the wire)
 *   4      2    version    PROTO_VERSION
 *   6      2    type       enum proto_type
 *   8      4    flags      reserved, 0
 *   12     4    req_id     chosen by the client, echoed by every reply
 *   16     4    body_len   bytes following the header
 *
 * All integers are little-endian. The receiver checks magic, version and
 * body_len (against its own maximum) from the header alone, before it
 * allocates anything for the body. A frame with a bad magic or an oversized
 * body ends the connection after an ERROR reply; a frame with an unknown
 * version gets an ERROR reply (PROTO_E_VERSION) and the connection stays.
 *
 * Bodies are sequences of fields: u8/u16/u32/u64 (little-endian), i64, and
 * str (u32 length + bytes, no terminator). Message bodies:
 *
 *   ERROR          (d->c)  u32 code (enum proto_err), str message
 *   STATS          (c->d)  empty
 *   STATS_REPLY    (d->c)  str json
 *   METRICS        (c->d)  empty
 *   METRICS_REPLY  (d->c)  str text: the stats in Prometheus's text exposition
 *                          format (0.0.4)
 *   DATASETS       (c->d)  empty
 *   DATASETS_REPLY (d->c)  str json
 *   OPEN           (c->d)  str dataset, u32 batch_size, u64 seed, u64 epoch,
 *                          u32 rank, u32 world, u32 flags (PROTO_OPEN_*),
 *                          u32 prefetch (0 = daemon default), then, only
 *                          with PROTO_OPEN_START in flags, u64 start_batch:
 *                          the stream begins at that batch of the epoch
 *                          (see "Resuming" below)
 *   OPENED         (d->c)  u32 stream_id, u64 samples (this rank),
 *                          u64 batches, u32 h, u32 w, u32 c, u32 dtype:
 *                          what the epoch's plan holds; upper bounds, since
 *                          bad samples skipped under on_error: skip leave
 *                          the stream (END says what was sent); then
 *                          u32 layout (enum proto_layout), u32 transport
 *                          (enum proto_transport), u32 slots, u64 slot_bytes:
 *                          slots is the prefetch granted, which may be lower
 *                          than the OPEN asked (the daemon's client memory
 *                          budget) and is the ring's slots with shared
 *                          memory (at least 2); on the socket it is the
 *                          batches prepared ahead and slot_bytes is 0 (a
 *                          daemon from before said 0: not known); then, only when
 *                          the OPEN had PROTO_OPEN_INFO in flags, u64
 *                          dataset_samples (the whole dataset's) and u64
 *                          fingerprint (see "Resuming"). A client that asked
 *                          for them accepts an OPENED without them (a daemon
 *                          from before they existed ignores the flag): then
 *                          it knows neither; then, only when the OPEN had
 *                          PROTO_OPEN_LABELS in flags (the daemon then sends
 *                          dataset_samples and fingerprint too), the label
 *                          format (see "Labels" below): u32 label_dtype
 *                          (PROTO_DTYPE_I64 or PROTO_DTYPE_F32), u32
 *                          label_classes (0: int64 [n]; K: float32 [n, K]
 *                          soft targets), u32 lengths (0: none; 1: an int64
 *                          [n] lengths tensor follows the labels)
 *   BATCH_SHM      (d->c)  u32 stream_id, u64 index, u32 n, u32 h, u32 w,
 *                          u32 c, u32 dtype, u32 slot, u64 offset, then
 *                          n x i64 labels (or the label tensor and lengths
 *                          of the OPENED's label format): the batch's samples are at
 *                          [offset, offset + n*h*w*c*dtype_size) of the
 *                          shared ring (inside slot `slot`), until RELEASE
 *   RELEASE        (c->d)  u32 stream_id, u32 slot: the client is done with
 *                          a BATCH_SHM's slot; no reply (an ERROR when the
 *                          slot is not one the client holds); then, only
 *                          when not 0, u32 flags (PROTO_RELEASE_*), sent only
 *                          to a daemon whose OPENED carried dataset_samples
 *                          (older ones refuse the longer body)
 *   BATCH          (d->c)  u32 stream_id, u64 index, u32 n, u32 h, u32 w,
 *                          u32 c, u32 dtype, n x i64 labels (or the label
 *                          tensor and lengths of the OPENED's label
 *                          format), then the sample bytes (n*h*w*c*dtype_size, NHWC) to the
 *                          end of the body
 *   END            (d->c)  u32 stream_id, u64 batches, u64 samples,
 *                          u64 skipped: the epoch is complete; batches and
 *                          samples count what was sent, skipped the bad
 *                          samples left out (a short last batch dropped
 *                          under drop_last is in neither)
 *   CLOSE          (c->d)  u32 stream_id: stop a stream early
 *   CLOSED         (d->c)  u32 stream_id
 *   WARM           (c->d)  str dataset, u32 flags (0): materialize the whole
 *                          dataset through its offline steps into the cache
 *                          tiers (disk, and memory as its policy admits)
 *   PROGRESS       (d->c)  u64 done, u64 total, u64 bytes, u64 failed,
 *                          u64 computed: samples handled so far (bad ones
 *                          included) of total, materialized bytes of the
 *                          good ones, bad samples, and samples that had to
 *                          be computed (the rest were cached already)
 *   DONE           (d->c)  the same fields, final: the operation is complete
 *
 * An ERROR about the connection as a whole (bad magic, an oversized frame,
 * a refused connection) carries req_id 0 or the offending frame's, and the
 * daemon closes the connection after it.
 *
 * After OPEN/OPENED the daemon pushes BATCH frames in epoch order, at most
 * `prefetch` batches ahead of what the socket has taken, then END.
 * BATCH indices run 0, 1, 2, ... without gaps. Every batch holds batch_size
 * samples but the last, which may be short (and is not sent with
 * PROTO_OPEN_DROP_LAST): a bad sample skipped under on_error: skip is left
 * out of the epoch and the batches close up behind it. A stream
 * that fails mid-epoch gets an ERROR frame whose req_id is the OPEN's.
 *
 * Shared memory (PROTO_OPEN_SHM): the daemon makes a ring of `slots`
 * batch slots of `slot_bytes` each in a sealed memfd (it cannot shrink or
 * grow) and passes its descriptor with SCM_RIGHTS on the first byte of the
 * OPENED frame, whose transport then says PROTO_TRANSPORT_SHM; the client
 * maps it (MAP_SHARED) and gets BATCH_SHM frames instead of BATCH. Workers
 * write batches straight into free slots; a slot sent in a BATCH_SHM is
 * never written again until the client RELEASEs it, and a ring whose slots
 * are all held pauses that stream only. A client that holds slots and
 * releases none for the daemon's release_timeout gets an ERROR
 * (PROTO_E_LIMIT) and its connection is closed. Where the daemon cannot
 * pass the ring (no memfd, output already queued on the connection), the
 * OPENED says PROTO_TRANSPORT_SOCKET and the stream uses BATCH frames.
 * A connection keeps the ring of a shared-memory stream that ended (END)
 * for its next OPEN: one of the same geometry (slots, slot_bytes) gets it
 * back with PROTO_TRANSPORT_SHM_KEPT and no descriptor, which saves the
 * client a mapping and the daemon faulting in fresh pages every epoch; a
 * client must therefore be done with a stream's batches before it opens the
 * next one on that connection. Any other OPEN frees the kept ring.
 *
 * Resuming (PROTO_OPEN_START): an epoch's order is a pure function of the
 * dataset and (seed, epoch, shuffle, rank, world, batch_size, drop_last),
 * so a stream opened with start_batch k plans the whole epoch, computes
 * nothing before planned batch k, and sends batches k, k+1, ... with those
 * indices: the bytes the uninterrupted stream sent from batch k on, as long
 * as no sample before batch k was skipped as bad (on_error: skip moves the
 * later batches' boundaries; the daemon does not know about skips it has
 * not computed). start_batch at or past the epoch's batches gives an empty
 * stream (END at once). OPENED's counts stay the whole epoch's. The
 * fingerprint identifies everything the epoch's bytes depend on beyond the
 * stream's arguments (the dataset's files by path, size and mtime, their
 * labels, and every step with all its parameters), so a client resuming
 * from a saved position compares it with the one it saved; it is never 0.
 *
 * Labels (PROTO_OPEN_LABELS): a batch carries a label tensor, not only
 * int64 class indices. Its format is the dataset's, fixed for a stream and
 * said once in OPENED: int64 [n] (class indices, as without the flag), or
 * float32 [n, K] soft targets (K = label_classes: a dataset whose steps end
 * with mixup or cutmix), each row n's K floats; then, when lengths is 1,
 * n x i64 lengths (variable-length samples padded to a batch's longest: the
 * length of each along its last axis before padding; the daemon sends them
 * for datasets with batch: {pad: longest}, whose batches' w is then that
 * batch's longest, at most OPENED's w). In a BATCH or
 * BATCH_SHM the label tensor's n rows follow the fixed part, then the
 * lengths, then (BATCH) the samples; integers little-endian, floats IEEE
 * 754 binary32 little-endian. A client that does not set the flag gets
 * int64 [n] labels exactly as before; a dataset whose labels are anything
 * else refuses its OPEN (PROTO_E_INVAL, saying what the dataset delivers
 * and that the client is too old to take it). A daemon from before the
 * flag ignores it, and its OPENED has no label format: int64 [n].
 *
 * After WARM the daemon sends PROGRESS frames (the first at once, then at
 * most ten a second), then DONE, all with the WARM's req_id; or an ERROR
 * (unknown dataset, a warm of that dataset already running, shutdown).
 * Bad samples do not stop a warm: they are counted in failed. Closing the
 * connection stops the warm (what is materialized stays). A connection
 * runs one WARM at a time and nothing else meanwhile.
 *
 * Admin messages (types 20-29). RELOAD, DROP_CACHE, WARM and the profiler's
 * requests are admin operations: the daemon answers them only for a peer
 * (SO_PEERCRED at connect time) that is root, the daemon's own user, or in
 * the config's admin_group (primary or supplementary group); anyone else
 * gets ERROR PROTO_E_DENIED and the connection stays. Everyone who can
 * connect may stream (OPEN, CLOSE) and read STATS and DATASETS.
 *
 *   RELOAD         (c->d)  empty: re-read the config file now (as SIGHUP)
 *   RELOAD_REPLY   (d->c)  str json: what changed, e.g. {"config": PATH,
 *                          "datasets": N, "added": [..], "removed": [..],
 *                          "replaced": [..], "changed": [KEY, ..],
 *                          "restart_needed": [KEY, ..]}; a config that does
 *                          not load is an ERROR (PROTO_E_INVAL, "FILE:LINE:
 *                          key 'K': what") and the running one stays
 *   DROP_CACHE     (c->d)  empty: empty the memory tier (the disk tier
 *                          stays), returning its memory to the system
 *   DROP_CACHE_REPLY (d->c) str json: {"entries": N, "bytes": N} dropped
 *
 * Profiler messages (types 30-39): PROFILE is an admin operation.
 *
 *   PROFILE        (c->d)  str dataset, u32 samples (0: the daemon's default
 *                          sample size), u32 flags (PROTO_PROFILE_*),
 *                          f64 w_throughput, f64 w_offline, f64 w_storage
 *                          (weights of the objective; all 0: throughput
 *                          only), and with PROTO_PROFILE_VERIFY in flags
 *                          u32 verify_top (0: verify every strategy; K:
 *                          the K best): after ranking, each runs its real
 *                          epochs on the whole dataset; then, with
 *                          PROTO_PROFILE_BATCH in flags, u32 batch_size
 *                          (the online trial's batches, as the epochs'
 *                          will be; without it the daemon's default, 64). Measures every legal strategy (split point
 *                          with no random step offline x encoding raw,
 *                          zstd:1, zstd:3, zstd:9) on one sample of the
 *                          dataset and ranks them; with PROTO_PROFILE_APPLY
 *                          on a `split: auto` dataset, records the winner
 *                          (and switches to it when nothing is cached yet)
 *   PROFILE_PROGRESS (d->c) u32 strategy (index), u32 strategies (count),
 *                          str name, str phase ("offline", "load",
 *                          "memory", "disk"), f64 fraction (of the whole
 *                          profile, 0..1), f64 eta_s (-1: unknown); the
 *                          first at once, then at most ten a second
 *   PROFILE_RESULT (d->c)  str dataset, u64 samples (of the dataset),
 *                          u32 sample_size, u32 workers, u32 profile_workers,
 *                          u64 memory_budget, u64 disk_budget (0: no disk
 *                          tier), f64 w_throughput, f64 w_offline,
 *                          f64 w_storage, f64 seconds (the profile's run
 *                          time, a verification's aside), u32 winner (index), u32 applied (enum
 *                          proto_profile_applied), u32 count, then count
 *                          strategies, each: str name, u32 split, str
 *                          last_step ("" when nothing runs offline),
 *                          i32 zstd_level (0: raw), u32 samples (measured
 *                          good), u32 failed, f64 offline_s (worker seconds
 *                          per sample: read, offline steps, encode, store),
 *                          f64 stored_bytes (disk tier bytes per sample,
 *                          record headers included), f64 raw_bytes (memory
 *                          tier bytes per sample), f64 memory_rate,
 *                          f64 disk_rate (samples/s of warm epochs on the
 *                          profile's workers by the wall clock, online
 *                          steps included: the median of repetitions),
 *                          f64 memory_cpu_s, f64 disk_cpu_s (CPU seconds per
 *                          sample online), f64 total_offline_s,
 *                          f64 total_bytes (extrapolated to the dataset on
 *                          every worker), f64 memory_fraction (of the
 *                          dataset the memory tier holds), f64
 *                          epoch_memory_s, f64 epoch_disk_s (an epoch from
 *                          each tier), f64 expected_rate, f64
 *                          expected_epoch_s (with that memory fraction),
 *                          f64 score, f64 cold_rate (samples/s of a first
 *                          epoch: read, offline and online steps, store),
 *                          f64 memory_spread, f64 disk_spread,
 *                          f64 cold_spread (how far the repetitions of
 *                          each rate scattered: half their range over the
 *                          median, 0.1: +-10%), u32 fits_memory, u32 fits_disk,
 *                          u32 feasible (fits the disk budget), u32 rank
 *                          (1: the winner), f64 memory_interval,
 *                          f64 disk_interval, f64 cold_interval (appended:
 *                          the interval each predicted rate carries, 0.45:
 *                          a real epoch within +-45% of it; the spread
 *                          combined with the model's own error for that
 *                          kind of figure); then, when PROFILE asked
 *                          PROTO_PROFILE_VERIFY, count verifications, one
 *                          per strategy in the same order: u32 verified
 *                          (0: not run: not among the K best, over the
 *                          disk budget, no sample delivered), u32 samples
 *                          (the cold epoch's), f64 cold_rate,
 *                          f64 memory_rate, f64 disk_rate (samples/s of a
 *                          real first epoch, a warm one from memory, one
 *                          from disk, on the whole dataset, all workers),
 *                          f64 memory_fraction (of the dataset the memory
 *                          epoch found in memory: profile.memory bounds
 *                          it), f64 stored_bytes, f64 seconds, str note
 *
 * f64 is an IEEE 754 double sent as the u64 of its bits. After PROFILE the
 * daemon sends PROFILE_PROGRESS frames, then PROFILE_RESULT, all with the
 * PROFILE's req_id; or an ERROR (unknown dataset, a profile running
 * already, APPLY on a dataset with a fixed split, no trial store). Closing
 * the connection stops the profile. One profile runs at a time, and a
 * connection runs nothing else meanwhile.
 */
#ifndef PRESTO_PROTO_H
#define PRESTO_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_MAGIC 0x54535250u
#define PROTO_VERSION 1
#define PROTO_HEADER_SIZE 20
/* Largest request body a daemon accepts by default (requests are small);
 * its config's limits.frame_size sets it (512 B to 1 MiB). */
#define PROTO_MAX_REQUEST 65536u
/* Default largest reply body a client accepts (a batch). */
#define PROTO_MAX_REPLY (1u << 30)
#define PROTO_MAX_STR 4096u
/* Size of a BATCH body's fixed part; the labels follow it. */
#define PROTO_BATCH_FIXED_SIZE 32u

enum proto_type {
    PROTO_ERROR = 1,
    PROTO_STATS = 2,
    PROTO_STATS_REPLY = 3,
    PROTO_DATASETS = 4,
    PROTO_DATASETS_REPLY = 5,
    PROTO_OPEN = 6,
    PROTO_OPENED = 7,
    PROTO_BATCH = 8,
    PROTO_END = 9,
    PROTO_CLOSE = 10,
    PROTO_CLOSED = 11,
    PROTO_WARM = 12,
    PROTO_PROGRESS = 13,
    PROTO_DONE = 14,
    PROTO_BATCH_SHM = 15,
    PROTO_RELEASE = 16,
    PROTO_METRICS = 17,
    PROTO_METRICS_REPLY = 18,
    PROTO_RELOAD = 20,
    PROTO_RELOAD_REPLY = 21,
    PROTO_DROP_CACHE = 22,
    PROTO_DROP_CACHE_REPLY = 23,
    PROTO_PROFILE = 30,
    PROTO_PROFILE_PROGRESS = 31,
    PROTO_PROFILE_RESULT = 32,
    PROTO_TYPE_MAX
};

/* Error codes carried by ERROR frames; the client API returns them negated. */
enum proto_err {
    PROTO_OK = 0,
    PROTO_E_PROTO = 1,    /* malformed frame or body */
    PROTO_E_VERSION = 2,  /* unsupported protocol version */
    PROTO_E_TOOBIG = 3,   /* body larger than the receiver's maximum */
    PROTO_E_NODATASET = 4,/* unknown dataset name */
    PROTO_E_INVAL = 5,    /* bad argument (batch size, rank, ...) */
    PROTO_E_LIMIT = 6,    /* a configured limit was reached */
    PROTO_E_SAMPLE = 7,   /* a bad sample under on_error: fail */
    PROTO_E_SHUTDOWN = 8, /* daemon is stopping */
    PROTO_E_IO = 9,       /* connection or I/O failure */
    PROTO_E_NOMEM = 10,
    PROTO_E_INTERNAL = 11,
    PROTO_E_DENIED = 12,  /* an admin operation from a peer that is not an admin */
    PROTO_E_MAX
};

/* A tensor's element type: a batch's samples (OPENED, BATCH) and its label
 * tensor. I16: PCM audio as read (no step makes it yet). */
enum proto_dtype {
    PROTO_DTYPE_U8 = 1,
    PROTO_DTYPE_F32 = 2,
    PROTO_DTYPE_I16 = 3,
    PROTO_DTYPE_I64 = 4, /* labels and lengths (no sample is int64) */
};

#define PROTO_OPEN_SHUFFLE 0x1u
#define PROTO_OPEN_DROP_LAST 0x2u
#define PROTO_OPEN_SHM 0x4u /* ask for the shared-memory transport */
#define PROTO_OPEN_START 0x8u /* a u64 start_batch follows prefetch */
#define PROTO_OPEN_INFO 0x10u /* OPENED carries dataset_samples and fingerprint */
#define PROTO_OPEN_LABELS 0x20u /* the client takes a label tensor ("Labels") */

/* RELEASE flags. COPIED: the client copied the batch out of its slot
 * because it held every other slot of the ring (it keeps batches: a list
 * of them, a prefetch queue); the daemon counts it (shm.copies). */
#define PROTO_RELEASE_COPIED 0x1u

/* Element order of float output (u8 output is always NHWC). */
enum proto_layout { PROTO_LAYOUT_NHWC = 0, PROTO_LAYOUT_NCHW = 1 };
/* SHM_KEPT: shared memory on the ring the connection's previous stream used
 * (no descriptor comes with the OPENED; the client still has it mapped). */
enum proto_transport {
    PROTO_TRANSPORT_SOCKET = 0,
    PROTO_TRANSPORT_SHM = 1,
    PROTO_TRANSPORT_SHM_KEPT = 2,
};
/* Size of a BATCH_SHM body's fixed part; the labels follow it. */
#define PROTO_BATCH_SHM_FIXED_SIZE 44u

struct proto_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t flags;
    uint32_t req_id;
    uint32_t body_len;
};

/* Header codec. proto_header_decode returns 0, or -PROTO_E_PROTO (magic),
 * -PROTO_E_VERSION, -PROTO_E_TOOBIG (body_len > max_body). The decoded
 * header is filled in all cases but a bad magic. */
void proto_header_encode(uint8_t out[PROTO_HEADER_SIZE], uint16_t type,
                         uint32_t req_id, uint32_t body_len);
int proto_header_decode(const uint8_t in[PROTO_HEADER_SIZE], uint32_t max_body,
                        struct proto_header *h);

/* The rendezvous both ends agree on: $PRESTO_SOCKET, else
 * $XDG_RUNTIME_DIR/presto/prestod.sock, else /tmp/presto-$UID/prestod.sock.
 * Writes into buf; returns 0 or -ENAMETOOLONG. */
int proto_default_socket(char *buf, size_t len);

const char *proto_type_name(uint16_t type);
const char *proto_strerror(int code); /* accepts code or -code */
size_t proto_dtype_size(uint32_t dtype);

/* Body writer: a growable buffer. On allocation failure `failed` is set and
 * further writes are ignored; check it once at the end. */
struct proto_wbuf {
    uint8_t *data;
    size_t len, cap;
    int failed;
};
void proto_wbuf_init(struct proto_wbuf *w);
void proto_wbuf_free(struct proto_wbuf *w);
void proto_put_u8(struct proto_wbuf *w, uint8_t v);
void proto_put_u16(struct proto_wbuf *w, uint16_t v);
void proto_put_u32(struct proto_wbuf *w, uint32_t v);
void proto_put_u64(struct proto_wbuf *w, uint64_t v);
void proto_put_i64(struct proto_wbuf *w, int64_t v);
void proto_put_str(struct proto_wbuf *w, const char *s, size_t len);
void proto_put_bytes(struct proto_wbuf *w, const void *p, size_t len);
/* A whole frame: reserves the header, which proto_frame_finish fills in. */
void proto_frame_begin(struct proto_wbuf *w, uint16_t type, uint32_t req_id);
void proto_frame_finish(struct proto_wbuf *w);

/* Body reader over a received body. Every get returns 0 or -PROTO_E_PROTO
 * when the body is too short; after one failure all later gets fail. */
struct proto_rbuf {
    const uint8_t *p;
    size_t len, off;
    int failed;
};
void proto_rbuf_init(struct proto_rbuf *r, const void *p, size_t len);
int proto_get_u8(struct proto_rbuf *r, uint8_t *v);
int proto_get_u16(struct proto_rbuf *r, uint16_t *v);
int proto_get_u32(struct proto_rbuf *r, uint32_t *v);
int proto_get_u64(struct proto_rbuf *r, uint64_t *v);
int proto_get_i64(struct proto_rbuf *r, int64_t *v);
/* Points into the body (not NUL-terminated); len limited to PROTO_MAX_STR
 * unless max is larger. */
int proto_get_str(struct proto_rbuf *r, const char **s, uint32_t *len, uint32_t max);
int proto_get_bytes(struct proto_rbuf *r, const void **p, size_t len);
size_t proto_remaining(const struct proto_rbuf *r);

/* Message bodies shared by both ends. */
struct proto_open {
    char dataset[256];
    uint32_t batch_size;
    uint64_t seed, epoch;
    uint32_t rank, world, flags, prefetch;
    uint64_t start_batch; /* on the wire only with PROTO_OPEN_START */
};
struct proto_opened {
    uint32_t stream_id;
    uint64_t samples, batches;
    uint32_t h, w, c, dtype;
    uint32_t layout, transport, slots;
    uint64_t slot_bytes;
    /* On the wire only when has_info (the OPEN asked, PROTO_OPEN_INFO). */
    int has_info;
    uint64_t dataset_samples, fingerprint;
    /* On the wire only when has_labels (the OPEN asked, PROTO_OPEN_LABELS),
     * after the info, which then goes too. Without: int64 [n], no lengths. */
    int has_labels;
    struct proto_labels {
        uint32_t dtype;   /* PROTO_DTYPE_I64 (classes 0) or PROTO_DTYPE_F32 */
        uint32_t classes; /* 0: int64 [n]; K: float32 [n, K] */
        uint32_t lengths; /* 1: an int64 [n] lengths tensor follows */
    } labels;
};
/* Largest label_classes an OPENED may say (a row of soft targets). */
#define PROTO_LABEL_CLASSES_MAX (1u << 20)
/* The label format of a client that did not ask (and of older daemons). */
#define PROTO_LABELS_INT64 ((struct proto_labels){PROTO_DTYPE_I64, 0, 0})
/* Bytes of a batch of n samples' labels (label tensor and lengths) in a
 * BATCH or BATCH_SHM body; 0 for a format no OPENED may say. */
uint64_t proto_labels_size(const struct proto_labels *f, uint32_t n);
/* Bytes of one sample's row of the label tensor (8, or 4 K). */
uint64_t proto_label_row(const struct proto_labels *f);
/* 1 when f is a format an OPENED may say (above). */
int proto_labels_valid(const struct proto_labels *f);
struct proto_batch_hdr {
    uint32_t stream_id;
    uint64_t index;
    uint32_t n, h, w, c, dtype;
};
/* BATCH_SHM's fixed part. */
struct proto_batch_shm {
    uint32_t stream_id;
    uint64_t index;
    uint32_t n, h, w, c, dtype, slot;
    uint64_t offset;
};
struct proto_release {
    uint32_t stream_id, slot;
    uint32_t flags; /* PROTO_RELEASE_*; on the wire only when not 0 */
};
struct proto_end {
    uint32_t stream_id;
    uint64_t batches, samples, skipped;
};
struct proto_warm {
    char dataset[256];
    uint32_t flags;
};
/* PROGRESS and DONE. */
struct proto_progress {
    uint64_t done, total, bytes, failed, computed;
};

void proto_put_open(struct proto_wbuf *w, const struct proto_open *m);
int proto_get_open(struct proto_rbuf *r, struct proto_open *m);
void proto_put_opened(struct proto_wbuf *w, const struct proto_opened *m);
int proto_get_opened(struct proto_rbuf *r, struct proto_opened *m);
/* Only the fixed part; labels and data follow. proto_get_batch_hdr checks
 * that the rest of the body is exactly n int64 labels and n samples;
 * proto_get_batch_hdr_fmt the labels of format f and n samples. */
void proto_put_batch_hdr(struct proto_wbuf *w, const struct proto_batch_hdr *m);
int proto_get_batch_hdr(struct proto_rbuf *r, struct proto_batch_hdr *m);
int proto_get_batch_hdr_fmt(struct proto_rbuf *r, struct proto_batch_hdr *m,
                            const struct proto_labels *f);
/* A whole BATCH frame's prefix (header, fixed part, labels) written in
 * place in front of data_len bytes of samples that follow it in memory, so
 * a batch goes out without being copied. */
size_t proto_batch_prefix_size(uint32_t n);
void proto_batch_prefix_encode(uint8_t *out, uint32_t req_id,
                               const struct proto_batch_hdr *m,
                               const int64_t *labels, size_t data_len);
/* The same with labels_len bytes of labels in their wire form (the label
 * tensor and lengths of the stream's format, as they lie in a little-endian
 * host's memory). */
size_t proto_batch_prefix_size_raw(size_t labels_len);
void proto_batch_prefix_encode_raw(uint8_t *out, uint32_t req_id,
                                   const struct proto_batch_hdr *m, const void *labels,
                                   size_t labels_len, size_t data_len);
/* Only the fixed part; the labels follow. */
void proto_put_batch_shm(struct proto_wbuf *w, const struct proto_batch_shm *m);
int proto_get_batch_shm(struct proto_rbuf *r, struct proto_batch_shm *m);
void proto_put_release(struct proto_wbuf *w, const struct proto_release *m);
int proto_get_release(struct proto_rbuf *r, struct proto_release *m);
void proto_put_end(struct proto_wbuf *w, const struct proto_end *m);
int proto_get_end(struct proto_rbuf *r, struct proto_end *m);
void proto_put_warm(struct proto_wbuf *w, const struct proto_warm *m);
int proto_get_warm(struct proto_rbuf *r, struct proto_warm *m);
void proto_put_progress(struct proto_wbuf *w, const struct proto_progress *m);
int proto_get_progress(struct proto_rbuf *r, struct proto_progress *m);
/* ---- the profiler ---- */
#define PROTO_PROFILE_APPLY 0x1u
#define PROTO_PROFILE_VERIFY 0x2u /* then each strategy's real epochs (below) */
#define PROTO_PROFILE_DISK 0x4u /* then, last, the disk's figures (proto_profile_disk) */
#define PROTO_PROFILE_BATCH 0x8u  /* batch_size follows (set by proto_put_profile) */
enum proto_profile_applied {
    PROTO_APPLIED_NO = 0,        /* not asked, or not a split: auto dataset */
    PROTO_APPLIED_NOW = 1,       /* the dataset switched to the winner */
    PROTO_APPLIED_RESTART = 2,   /* recorded; in force from the next start */
    PROTO_APPLIED_UNCHANGED = 3, /* the winner is the strategy in force */
};
#define PROTO_PROFILE_NAME_MAX 64
struct proto_profile {
    char dataset[256];
    uint32_t samples, flags;
    double w_throughput, w_offline, w_storage;
    uint32_t verify_top; /* with PROTO_PROFILE_VERIFY: the K best (0: all) */
    uint32_t batch_size; /* the online trial's batch (0: the daemon's default) */
};
struct proto_profile_progress {
    uint32_t strategy, strategies;
    char name[PROTO_PROFILE_NAME_MAX];
    char phase[16];
    double fraction, eta_s;
};
struct proto_profile_strategy {
    char name[PROTO_PROFILE_NAME_MAX];
    uint32_t split;
    char last_step[32];
    int32_t zstd_level;
    uint32_t samples, failed;
    double offline_s, stored_bytes, raw_bytes;
    double memory_rate, disk_rate, memory_cpu_s, disk_cpu_s;
    double total_offline_s, total_bytes, memory_fraction;
    double epoch_memory_s, epoch_disk_s, expected_rate, expected_epoch_s, score;
    double cold_rate, memory_spread, disk_spread, cold_spread;
    uint32_t fits_memory, fits_disk, feasible, rank;
    /* Appended: how far a real epoch may be from each predicted rate, 0.45:
     * +-45% (the repetitions' spread and the model's own error; never in
     * the tie rule). */
    double memory_interval, disk_interval, cold_interval;
};
/* A strategy's real epochs on the whole dataset (PROTO_PROFILE_VERIFY). */
struct proto_profile_verified {
    uint32_t verified; /* 1: measured; 0: not (see note) */
    uint32_t samples;  /* delivered by the cold epoch */
    double cold_rate, memory_rate, disk_rate; /* samples/s of each epoch */
    double memory_fraction; /* of the dataset the memory epoch read from memory */
    double stored_bytes;    /* the disk tier's bytes after the cold epoch */
    double seconds;         /* the verification's run time */
    char note[128];         /* why not verified, or "" */
};
/* The disk figures behind a profile's disk and cold rates, appended after
 * everything else when PROFILE asked PROTO_PROFILE_DISK (a daemon that
 * knows it not sends none: all 0): f64 read_bw, f64 write_bw (the probe's
 * sustained O_DIRECT reads and written-back writes in cache.dir, bytes/s;
 * 0: not measured), f64 probe_bytes, u32 probe_depth (reads in flight),
 * f64 writeback_bw (what a first epoch's records are written back at,
 * bytes/s: the trials' own segments' write-back, or where the disk tier
 * writes behind (reads with O_DIRECT) and write_bw was measured, write_bw),
 * f64 source_s (seconds per sample the dropped source files took to read,
 * read ahead), f64 admit_bw (admission to the memory tier, bytes/s). */
struct proto_profile_disk {
    double read_bw, write_bw, probe_bytes;
    uint32_t probe_depth;
    double writeback_bw, source_s, admit_bw;
};
void proto_put_profile_disk(struct proto_wbuf *w, const struct proto_profile_disk *m);
/* Nothing may follow it. */
int proto_get_profile_disk(struct proto_rbuf *r, struct proto_profile_disk *m);
/* PROFILE_RESULT's fixed part; count strategies follow. */
struct proto_profile_result {
    char dataset[256];
    uint64_t samples;
    uint32_t sample_size, workers, profile_workers;
    uint64_t memory_budget, disk_budget;
    double w_throughput, w_offline, w_storage, seconds;
    uint32_t winner, applied, count;
    /* Not in the fixed part: with_disk (PROTO_PROFILE_DISK asked), disk
     * follows the strategies and verifications. */
    uint32_t with_disk;
    struct proto_profile_disk disk;
};
void proto_put_f64(struct proto_wbuf *w, double v);
int proto_get_f64(struct proto_rbuf *r, double *v);
void proto_put_profile(struct proto_wbuf *w, const struct proto_profile *m);
int proto_get_profile(struct proto_rbuf *r, struct proto_profile *m);
void proto_put_profile_progress(struct proto_wbuf *w, const struct proto_profile_progress *m);
int proto_get_profile_progress(struct proto_rbuf *r, struct proto_profile_progress *m);
/* The fixed part only (then proto_put_profile_strategy count times); the
 * get leaves the strategies to read. */
void proto_put_profile_result(struct proto_wbuf *w, const struct proto_profile_result *m);
int proto_get_profile_result(struct proto_rbuf *r, struct proto_profile_result *m);
void proto_put_profile_strategy(struct proto_wbuf *w, const struct proto_profile_strategy *m);
/* last: 1 for the body's last strategy (nothing may follow it). */
int proto_get_profile_strategy(struct proto_rbuf *r, struct proto_profile_strategy *m,
                               int last);
/* With PROTO_PROFILE_VERIFY asked, count of these follow the strategies,
 * one for each in order; last as above. */
void proto_put_profile_verified(struct proto_wbuf *w, const struct proto_profile_verified *m);
int proto_get_profile_verified(struct proto_rbuf *r, struct proto_profile_verified *m, int last);

void proto_put_error(struct proto_wbuf *w, uint32_t code, const char *msg);
/* msg is copied (truncated) into buf. */
int proto_get_error(struct proto_rbuf *r, uint32_t *code, char *buf, size_t bufsz);

#endif
