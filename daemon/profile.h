/*
 * The strategy profiler: PROFILE requests (prestoctl profile) and
 * `split: auto`.
 *
 * A strategy is a split point (steps[0..split) run offline and are cached)
 * with a disk tier encoding. The legal ones are split 0 (everything
 * online; nothing is cached, so it has no encoding) and every split s >= 1
 * that step_split_check() allows (no random step offline; a dct_scale
 * decode with its resize) times each of PROFILE_LEVELS (raw, zstd 1, 3, 9).
 *
 * A profile measures every legal strategy of one dataset on the same
 * deterministic sample: PROFILE's sample size, else profile.samples, else
 * 2% of the dataset, at least PROFILE_MIN_SAMPLES and at most
 * PROFILE_MAX_SAMPLES (all of it when smaller), spread evenly over the
 * sample ids (so over the classes). Per strategy, on the live daemon's
 * worker pool, through the real pipeline (pipeline_warm, pipeline_batch)
 * and the real tier code, on trial tiers of its own:
 *
 *   offline  the sample's files dropped from the page cache (a first epoch
 *            reads them from the disk), then read on a worker as a first
 *            epoch's read-ahead reads them (PROFILE_SOURCE_WINDOW at a time
 *            asked of the kernel at once, then read through), timed apart:
 *            seconds per sample; then, hot, run through the offline
 *            steps, encoded and stored in a trial disk store
 *            (pipeline_warm), admitted to the trial memory tier as a first
 *            epoch admits them (where the daemon has a memory tier: on
 *            make bench's VM the admission of decode/raw's 583 KB records
 *            cost its real first epoch ~30%): worker seconds per sample by
 *            the phase's wall clock, and the store's segment bytes per
 *            sample (record headers included). Then, on a worker, its
 *            segments written back (fdatasync), timed apart: the profile's
 *            write-back bandwidth (all its strategies' bytes over their
 *            time), and a record's admission to memory timed apart (fresh
 *            anonymous memory, the record copied in, as cache_put does:
 *            the admission bandwidth);
 *   load     (not timed) the records read into a trial memory tier of
 *            profile.memory bytes, as several copies of the sample (at most
 *            PROFILE_MAX_COPIES, each its own entry of the same record): as
 *            many as hold the bytes an epoch of the dataset reads from the
 *            memory tier, up to twice the CPU's last-level cache (and half
 *            of profile.memory). The dataset's entries come from DRAM; 64
 *            samples alone fit in the cache (9.6 MB of 224x224 crops in a
 *            32 MiB L3) and timed the fastest strategies' memory epochs as
 *            cache hits, 1.4-2.5x over what their real epochs delivered;
 *   memory   warm epochs from that memory tier (every copy), online steps included,
 *            delivered into batch buffers as a stream's worker does it
 *            (pipeline_batch) and delivered to a client stood in for by a
            thread (sink.h: a message of the BATCH_SHM frame's bytes each,
            answered as a RELEASE), in batches of the epochs' size (PROFILE's
 *            batch_size; by default PROFILE_BATCH, the default of prestoctl
 *            epoch and of the C and Python clients): a batch's fixed costs
 *            (its job handed to a worker and back to the event loop, its
 *            read-ahead) are paid per batch as the stream pays them, and
 *            tiny records (mel spectrograms, ~1.5 us of work each) are
 *            mostly such costs. An epoch of the sample alone (a buffered
 *            disk's) is cut so that each worker gets a batch. Samples/s
 *            by the wall clock, the median of
 *            at least PROFILE_MIN_REPS repetitions (stretches of at least
 *            PROFILE_REP_MS) and their spread, and CPU seconds per sample
 *            (thread CPU clock). Then PROFILE_TRIPS epochs of one sample,
            each opened by a round trip to the sink (a client's OPEN) and
            over when its batch goes out: their median, the sample's work
            apart, is what every epoch costs beyond its samples, added once
            per epoch of the dataset to the memory and disk rates (make
            bench's VM: 0.04-0.13 ms, ~10% of a 600-clip mel-spectrogram
            epoch). The memory tier holds the same decoded bytes whatever
 *            the disk encoding, so this (and load) runs once per split
 *            point, for its first encoding, and the others share it;
 *   disk     the same from the trial disk store, read as the daemon's disk
 *            tier reads (O_DIRECT where cache.direct_io gives it to the
 *            daemon's store) and as a stream reads it: each batch's first
 *            chunk through the streams' read-ahead (readahead.h: on the
 *            event loop's ring, io.depth reads in flight, io.readahead
 *            bytes), `prefetch` batches ahead of the profile's workers.
 *            With O_DIRECT the epochs follow each other without a pause,
 *            measured as memory's are (the read-ahead stays in flight
 *            across the sample's short epochs as it does through a real
 *            epoch's thousands of samples; dropping the reads between
 *            the 2-batch epochs of a 64-sample trial, each worker waiting
 *            for its batch's reads before computing, predicted
 *            center_crop/raw at 5,075 samples/s against 7,142 delivered);
 *            a buffered store's segment files are written back and
 *            dropped from the page cache before every epoch (fdatasync,
 *            POSIX_FADV_DONTNEED): each epoch one repetition, at least
 *            PROFILE_MIN_REPS of them. Where the sample stands for
 *            PROFILE_PROBE_FACTOR times its size or more, the phase goes
 *            on past PROFILE_MIN_PHASE_MS while its repetitions' median is
 *            uncertain by more than PROFILE_DISK_SETTLE_PCT (up to
 *            PROFILE_DISK_MAX_MS): a quiet disk stops at the minimum, a
 *            scattered one is read longer (disk_phase_ns).
 *            Every online phase reads through the read-ahead likewise
 *            (memory hits read nothing ahead; split 0 its source files).
 *
 * Split 0 has no offline phase; its "memory" epochs read the source files
 * hot in the page cache and its "disk" epochs read them dropped from it.
 * An online phase repeats whole epochs of the sample (epoch 0, 1, ...)
 * until PROFILE_MIN_PHASE_MS (memory: PROFILE_MEMORY_PHASE_MS) have passed
 * and PROFILE_MIN_REPS repetitions were measured (at most
 * PROFILE_MAX_PASSES). Rates are by the wall clock
 * on all the workers the profile runs on (profile.worker_share, 100% by
 * default: the daemon's real worker count, so that what the workers share,
 * cores, memory bandwidth, the event loop, shows as it will in an epoch),
 * and each comes with its spread over the repetitions (half their range
 * over the median): on a busy machine the figure is uncertain, and says
 * so, rather than a CPU-time figure that no epoch delivers.
 *
 * Trial tiers are private: a struct tiers (a memory tier and a store) and
 * a struct pipeline of the profile's own, the store in
 * CACHE_DIR/profile-trial-PID/ (removed after each strategy and at the end;
 * left-overs of a crashed daemon are removed at start-up). Nothing of a
 * trial ever enters the daemon's cache tiers, and its counters and step
 * timings are the trial pipeline's and tiers', not the daemon's. At most profile.worker_share percent of the workers (at least
 * one) run a profile's jobs at a time, so streams keep the rest.
 *
 * Extrapolation to the dataset (N samples, W workers, the profile ran on
 * P of them, rates scaling with workers): offline time N x offline_s / W;
 * storage N x stored bytes; the memory tier's fraction of the dataset
 * (its budget less the index over N x raw bytes, capped at 1; for split 0
 * the source bytes stand in, as the page cache holds those); an epoch from
 * memory N / (memory_rate x W / P), from disk likewise; the expected epoch
 * mixes them by that fraction (without a disk tier the rest is recomputed:
 * offline_s / W more per sample); the first (cold) epoch takes
 * offline_s / W + 1 / memory rate per sample (less (1 - fraction) x
 * raw bytes / admission bandwidth of offline_s: the trial admitted every
 * record, a first epoch admits only what the budget holds, cache.c never
 * evicting), or the sources' read time per sample, or its stored bytes
 * over the write-back bandwidth, whichever is longest: the read-ahead
 * reads the files and the kernel writes the records back while the
 * workers compute (make bench: counting the write-back's time on top
 * under-predicted every cold rate but decode/raw's, audio
 * decode_audio/raw's by 1.45x; reading the files inside the offline jobs
 * made that row's prediction 1,927-2,818 samples/s from run to run against
 * a steady 2,830) (split 0: the disk rate, the files read from the disk).
 * Two write bandwidths: a buffered disk tier's records are written back
 * as the trials' (a few MiB of records, fdatasync'd) were while they fit
 * the kernel's dirty limits (the point); the probe's write_bw is the
 * device's sustained rate over up to PROFILE_PROBE_BYTES, which a dataset
 * past those limits is written at (the interval reaches down to it). A
 * disk tier read with O_DIRECT writes behind (store.c write_behind): its
 * records go to the disk as they are written, at write_bw, the point's
 * figure there where the probe ran. Where a strategy's stored dataset is many
 * times what the trial stored (PROFILE_PROBE_*), the disk's sustained
 * bandwidth is measured once per file system of cache.dir (disk_probe, on
 * a worker, in cache.dir, O_DIRECT reads into huge-page buffers as the
 * pipeline's arenas are; its figures are in PROFILE_RESULT with
 * PROTO_PROFILE_DISK; tests' datasets are too small for it): a disk
 * rate over read bandwidth / stored bytes per sample, or a cold epoch
 * faster than write bandwidth / stored bytes, keeps the trial's figure
 * with its spread widened down to the disk's (the trial's few MiB may sit
 * in a cache the dataset's GiB do not; but on make bench's VM the real
 * disk epochs read faster than the probe on a quiet machine and slower
 * beside other jobs' I/O, so the bound is the interval's, not the point's).
 * tests/bench/profile_accuracy.py (make bench's
 * profile-accuracy) sets these against real epochs, each in a daemon of its
 * own.
 *
 * Verification (PROTO_PROFILE_VERIFY, prestoctl profile --verify): after
 * ranking, the K best strategies (all with K 0) run their real epochs on
 * the whole dataset in the profile's trial tiers, through the same pipeline
 * code: a first epoch (the files dropped from the page cache; stored in the
 * trial store, admitted to a trial memory tier of profile.memory bytes),
 * warm epochs of what that tier holds and from the trial store dropped from
 * the page cache (the median of PROFILE_VERIFY_PASSES each), on the
 * profile's workers, timed by the wall clock, reported per strategy in PROFILE_RESULT (proto_profile_verified).
 * The trial store is bounded by cache.disk (a strategy predicted over it
 * is skipped), the memory tier by profile.memory; progress goes on and a
 * stop or the requester leaving cancels it.
 *
 * Ranking. A strategy is feasible unless its storage exceeds the disk
 * budget (with a disk tier; split 0 stores nothing). Over the feasible
 * ones, score = wt x rate / best rate + wo x (1 - offline / most offline)
 * + ws x (1 - storage / most storage); weights from PROFILE (all 0:
 * throughput only). Scores within PROFILE_TIE_PCT percent of the best, or
 * within wt x the two expected rates' spreads (each counted up to
 * PROFILE_TIE_SPREAD_PCT), are a tie (timings on a
 * busy machine vary that much from run to run), won
 * by the cheapest encoding (raw, then zstd by level: compression buys
 * nothing when the rates tie, and costs encoding time), then the least
 * storage, then the first: fixed by the pipeline and the data, so ties
 * are decided the same way every time.
 *
 * split: auto. At start-up (profile_restore) a dataset declared with
 * `split: auto` looks for CACHE_DIR/profile-NAME.txt, the choice recorded
 * by an earlier profile, and takes it when its key matches: a hash of the
 * dataset's files (paths, sizes, mtimes, labels), all its steps and their
 * parameters, and the memory and disk budgets; so a restart does not
 * profile again, and a change of any of those does. Without a matching
 * record the dataset is PENDING: it serves with the default split (before
 * the first random or float32 step) and caches nothing (entries of a split
 * about to be abandoned would hold the never-evicting memory tier), and its
 * first OPEN or WARM (a WARM is refused meanwhile) starts a profile in the
 * background (profiler_first_use; one profile at a time, others queue).
 * When a profile of a PENDING dataset ends, the winner is recorded, logged
 * with its figures and switched to at once: dataset_switch() publishes the
 * new strategy for the batches that start from then on (those in flight
 * finish with the one they pinned: streams go on, the same bytes whatever
 * the split), and the disk tier is rescanned for it. PROFILE with PROTO_PROFILE_APPLY does
 * the same for a split: auto dataset; when one was chosen already and the
 * memory tier may hold its entries, a different winner is recorded and
 * takes effect at the next start. `prestoctl datasets` shows the state.
 */
#ifndef PRESTO_PROFILE_H
#define PRESTO_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dataset.h"
#include "proto.h"
#include "reply.h"
#include "step.h"
#include "tiers.h"
#include "workers.h"

#define PROFILE_NLEVELS 4
#define PROFILE_LEVELS {0, 1, 3, 9} /* zstd levels; 0 is raw */
#define PROFILE_MAX_STRATEGIES (1 + CONFIG_MAX_STEPS * PROFILE_NLEVELS)
#define PROFILE_MIN_SAMPLES 64u
#define PROFILE_MAX_SAMPLES 300u
#define PROFILE_SAMPLE_PCT 2u
#define PROFILE_LIMIT_SAMPLES 100000u /* largest sample a PROFILE may ask for */
#define PROFILE_JOB_SAMPLES 16u       /* offline and load jobs */
#define PROFILE_MAX_COPIES 16u /* of the sample in the memory epochs (see above) */
#define PROFILE_BATCH 64u             /* online jobs: a batch, when PROFILE names none */
#define PROFILE_MIN_PHASE_MS 200u
/* The memory phase: one per split point, its figure shared by the split
 * point's encodings; 200 ms of it gave center_crop 31,053 samples/s in one
 * bench run and 50,823 in the next (their real epochs: 42-57k both). */
#define PROFILE_MEMORY_PHASE_MS 600u
#define PROFILE_REP_MS 40u      /* a memory phase's repetition: at least this long */
#define PROFILE_MIN_REPS 5u     /* repetitions of an online phase, at least */
#define PROFILE_MAX_REPS 64u
/* The O_DIRECT disk phase ends with this many epochs of the sample each
 * started alone (see epoch_start_s in profile.c). */
#define PROFILE_ISO_PASSES 3u
#define PROFILE_TRIPS 32u /* one-sample epochs after the memory phase: an epoch's fixed cost */
/* The offline phase is run again, on fresh trial tiers, while its passes
 * add up to less than PROFILE_MIN_PHASE_MS, up to this many; the median
 * pass is the figure (see phase_end in profile.c). */
#define PROFILE_OFFLINE_PASSES 5u
#define PROFILE_MAX_PASSES 10000u
/* The disk phase (disk_phase_ns): on past PROFILE_MIN_PHASE_MS, up to
 * PROFILE_DISK_MAX_MS, while its repetitions' median is uncertain by more
 * than PROFILE_DISK_SETTLE_PCT. */
#define PROFILE_DISK_MAX_MS 600u
#define PROFILE_DISK_SETTLE_PCT 3u
#define PROFILE_TIE_PCT 10u
#define PROFILE_VERIFY_PASSES 3u /* --verify: warm epochs from each tier (the median) */
#define PROFILE_TIE_SPREAD_PCT 15u /* a rate's spread counts in a tie up to this */
/* The model's own error per kind of figure, beyond what the repetitions
 * show. Each predicted rate's interval is its spread and this error
 * combined (as independent errors: the root of the sum of their squares),
 * so that about 9 in 10 real epochs fall inside; --verify and
 * profile-accuracy count how many do. Calibrated on make bench's
 * profile-accuracy on the 2-core VM, three runs of its 30 strategies
 * (images and audio; profiler5's two, profiler6's one): per kind the least
 * error that puts 90% of those 90 measured rates inside hypot(their
 * row's spread, error): memory 51%, disk 56%, cold 39% (the 90th
 * percentile of |measured / predicted - 1| alone: 52%, 62%, 39%). The disk
 * term still holds two runs of the profile before its disk epochs read
 * through the read-ahead (1.2-1.4x under); the run after needed 21%.
 * Kept out of the tie rule (rate_spread). */
#define PROFILE_ERR_MEMORY_PCT 51u
#define PROFILE_ERR_DISK_PCT 56u
#define PROFILE_ERR_COLD_PCT 39u
/* The disk's bandwidth (disk_probe): measured where a strategy's stored
 * dataset is at least PROFILE_PROBE_MIN_BYTES and PROFILE_PROBE_FACTOR
 * times the trial's records, on at most PROFILE_PROBE_BYTES written
 * (written back every PROFILE_PROBE_SYNC) then read back with O_DIRECT
 * (PROFILE_PROBE_CHUNK each, io.depth per worker in flight, at most
 * PROFILE_PROBE_DEPTH), each direction for at most PROFILE_PROBE_MS. */
#define PROFILE_PROBE_MIN_BYTES (64ull << 20)
#define PROFILE_PROBE_FACTOR 8.0
#define PROFILE_PROBE_BYTES (256ull << 20)
#define PROFILE_PROBE_DEPTH 64u
#define PROFILE_PROBE_CHUNK (256u << 10)
#define PROFILE_PROBE_SYNC (16u << 20)
#define PROFILE_PROBE_MS 400u
/* The offline phase's sources: read PROFILE_SOURCE_WINDOW files at a time
 * read ahead; a record's admission timed on up to PROFILE_ADMIT_BYTES. */
#define PROFILE_SOURCE_WINDOW 32u
#define PROFILE_ADMIT_BYTES (64ull << 20)
#define PROFILE_PROGRESS_MS 100u
#define PROFILE_SEED 0x70726f66696c65ull /* the online epochs' stream seed */

struct event_base;
struct json;
struct profiler;

/* ---- pure parts (unit-tested) ---- */

/* The legal strategies of a pipeline into out (at most cap): name, split,
 * last_step and zstd_level set, the rest zeroed. Returns their count. */
uint32_t profile_strategies(const struct step *steps, uint32_t nsteps,
                            struct proto_profile_strategy *out, uint32_t cap);
/* The sample size for a dataset of n samples: requested, else configured,
 * else the 2% rule; never more than n. */
uint32_t profile_sample_size(uint32_t n, uint32_t requested, uint32_t configured);
/* k sample ids spread evenly over [0, n): id i is (2i + 1) n / 2k. */
void profile_sample_ids(uint32_t n, uint32_t k, uint32_t *ids);

struct profile_scale {
    uint64_t samples;          /* of the dataset */
    uint32_t workers;          /* the daemon's */
    uint32_t profile_workers;  /* those the measurements ran on */
    uint64_t memory_budget;
    uint64_t disk_budget;      /* meaningful with disk_tier */
    int disk_tier;
    /* The disk's sustained bandwidth, bytes/s (0: not measured): the disk
     * and cold rates' spreads reach down to it (see above); the rates
     * themselves stay the trial's. */
    double read_bw, write_bw;
    /* The trial's own write-back, bytes/s (its segments' fdatasync; 0: none
     * measured), or where the daemon's disk tier writes behind (O_DIRECT
     * reads: store.c write_behind) and write_bw was measured, write_bw: a
     * first epoch's writes go back while its workers compute, so its cold
     * rate is the slower of the two, not their sum. */
    double writeback_bw;
    /* Seconds per sample the sample's source files, dropped from the page
     * cache, took to read, read ahead (0: not measured): the median over
     * the strategies' offline phases, a bound on a first epoch's rate as
     * its read-ahead reads them while the workers compute. */
    double source_s;
    /* Admission to the memory tier, bytes/s of records (0: not measured, or
     * no memory tier): the offline phase admitted each of its records; a
     * first epoch admits only the memory_fraction the budget holds, so
     * (1 - memory_fraction) x raw_bytes / admit_bw of worker time per
     * sample less. */
    double admit_bw;
    /* The epochs' batch size (0: whole epochs are not modelled: the rates
     * are steady rates) and whether the disk tier reads with O_DIRECT (its
     * rate then includes an epoch's start and end, measured: epoch_start_s
     * in profile.c). See profile_epoch_busy. */
    uint32_t batch;
    int disk_direct;
};
/* The share of an epoch's time its workers all compute, where its n
 * samples come in whole batches of `batch`, one batch a job, handed out
 * in order to `workers` workers: the batches run in rounds of `workers`,
 * and in the last round the workers without a batch, or with the short
 * last one, wait. 1 where the batches divide evenly, 1/workers for an
 * epoch of one batch. The trial's rates are steady rates (its epochs run
 * back to back, or each cut into one batch per worker); a real epoch of
 * 600 audio clips in batches of 64 on 2 workers is 10 batches, 5 rounds,
 * the last of a full batch beside a 24-sample one: 4.69 rounds' work in
 * 5 rounds' time (0.94), and make bench's audio memory epochs delivered
 * 1.05-1.10x less than the steady rates said in every run, while its
 * 3,200 photos (50 batches, 25 even rounds) lean no such way. */
double profile_epoch_busy(uint64_t n, uint32_t batch, uint32_t workers);
/* The interval of a predicted rate (0.45: +-45%): the repetitions' spread
 * and the model's error for its kind of figure (PROFILE_ERR_*_PCT / 100),
 * combined as independent errors. */
double profile_interval(double spread, double model_err);
/* Extrapolates the measured strategies st[0..n) to the dataset (the
 * intervals included), scores and ranks them (see above) and returns the
 * winner's index. Weights must be
 * finite and >= 0. */
uint32_t profile_rank(struct proto_profile_strategy *st, uint32_t n,
                      const struct profile_scale *sc, double wt, double wo, double ws);

/* The key a split: auto choice is recorded under (see above). */
uint64_t profile_key(const struct dataset *ds, const struct config *cfg);

/* ---- the daemon side ---- */

/* Start-up (and a reload's indexing), before the tiers learn of the
 * dataset: a split: auto dataset takes its recorded choice or becomes
 * PENDING (caching nothing). 0 or -ENOMEM. */
int profile_restore(struct dataset *ds, const struct config *cfg);
/* Removes trial directories left in cache_dir by daemons no longer running. */
void profile_clean_trials(const char *cache_dir);

/* cfg: the configuration in force, followed across reloads; tiers: the
 * daemon's (a switch rescans its disk tier); readahead: the streams' (NULL:
 * none), through which the online phases read their batches as a stream's
 * jobs do (it must outlive the profiler's last profile: readahead_stop
 * runs the callbacks of reads still in flight). */
struct readahead;
int profiler_create(struct profiler **out, struct event_base *base, struct workers *workers,
                    const struct config *const *cfg, struct tiers *tiers,
                    struct readahead *readahead);
/* Stops a running profile (its trial tiers are removed) and forgets the queue. */
void profiler_destroy(struct profiler *pr);
/* A PROFILE request, answered through reply: starts it, saying its first
 * progress; then progress, and done with the result or failed (reply.h).
 * Returns 0, or -errno with a message in err (nothing said): -EINVAL,
 * -ENOMEM, -EBUSY (a profile runs already). */
int profiler_request(struct profiler *pr, struct dataset *ds, const struct proto_profile *req,
                     const struct reply *reply, char *err, size_t errlen);
/* 1 while a profile the requester `owner` (the `to` of the reply it asked
 * with) asked for runs. */
int profiler_runs_for(const struct profiler *pr, const void *owner);
/* The requester `owner` is going away: its profile stops, saying nothing
 * more. */
void profiler_detach(struct profiler *pr, const void *owner);
/* An OPEN or WARM of ds: a PENDING split: auto dataset gets profiled (in
 * the background, applied when done). */
void profiler_first_use(struct profiler *pr, struct dataset *ds);
/* ds is going away (reload): a profile of it stops, its queue entry goes. */
void profiler_forget(struct profiler *pr, const struct dataset *ds);
/* The strategy fields of ds for the datasets document. */
void profile_dataset_json(struct dataset *ds, struct json *j);

#endif
