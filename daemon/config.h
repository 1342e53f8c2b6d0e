/*
 * Configuration: one YAML file read with libyaml, every key with a default
 * so prestod runs with no file at all. Keys are table-driven (name, type,
 * min, max, default: see config.c); every error names file:line and the key.
 *
 *   socket: PATH            socket_mode: 0660       workers: 0 (= cores)
 *   socket_group: GROUP     admin_group: GROUP      (name or number; unset)
 *   log_level: info         prefetch: 8
 *   cache: { memory: 2GiB | 25%, dir: PATH, disk: 0 (off) | 100GiB,
 *            segment_size: 256MiB }
 *   io: { depth: 64, backend: auto | pread }
 *   profile: { samples: 0 (2% of a dataset, 64 to 300), worker_share: 50 (%),
 *              memory: 256MiB }
 *   metrics: { listen: off | PORT | HOST:PORT }   # Prometheus /metrics over HTTP
 *   cluster: { memcached: [HOST:PORT, ...] (none: off), timeout_ms: 200,
 *              item_max: 1MiB }           # the cluster tier (cluster.h)
 *   source: { endpoint: URL (AWS), region: us-east-1, credentials_file: PATH,
 *             retries: 5, timeout_ms: 30000, connect_timeout_ms: 5000,
 *             page_keys: 1000, index_window: 1MiB }
 *                                         # s3:// and http(s):// roots
 *   limits: { connections: 256, connections_per_user: 128, idle_timeout: 300,
 *             streams_per_connection: 16,
 *             streams_per_user: 256, batch_size: 4096, prefetch: 64,
 *             frame_size: 64KiB, output_buffer: 1MiB, output_timeout: 30,
 *             file_size: 64MiB, pixels: 100000000,
 *             client_memory: 25% (of RAM), user_memory: 0 (half of that) }
 *   datasets:
 *     - name: NAME
 *       root: DIR                     # ImageFolder: DIR/CLASS/IMAGE.jpg
 *       steps: [decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]
 *         # a step is NAME, NAME: VALUE (its main parameter), NAME: [V, ...]
 *         # or NAME: {KEY: VALUE | [V, ...], ...}; see step.h for each step's
 *         # parameters, e.g. - normalize: {mean: [0.485, 0.456, 0.406],
 *         #                                std: [0.229, 0.224, 0.225], layout: nchw}
 *       split: center_crop            # last offline step, or a count; absent:
 *                                     # before the first random or float32 step;
 *                                     # auto: the profiler chooses (profile.h)
 *       on_error: skip | fail
 *       encoding: raw | zstd | zstd:LEVEL   # disk tier records
 *       follow_symlinks: false        # true: serve links that leave the root
 *
 * SIGHUP (or RELOAD) re-reads the file: config_diff() says which keys
 * changed and whether a reload applies them (see CFG_RESTART in config.c:
 * the socket, workers, the disk tier, io and cluster need a restart).
 */
#ifndef PRESTO_CONFIG_H
#define PRESTO_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "step.h"

#define CONFIG_MAX_STEPS 16
#define CONFIG_MAX_BATCH_STEPS 2
#define CONFIG_NAME_MAX 64
#define CONFIG_NO_GROUP UINT32_MAX

enum config_on_error { CONFIG_ON_ERROR_SKIP = 0, CONFIG_ON_ERROR_FAIL = 1 };
enum config_io_backend { CONFIG_IO_AUTO = 0, CONFIG_IO_PREAD = 1 };
/* cache.direct_io: false, true, or auto (O_DIRECT where the disk tier's
 * budget is larger than the memory available: see tiers.h). */
enum config_direct_io { CONFIG_DIRECT_OFF = 0, CONFIG_DIRECT_ON = 1, CONFIG_DIRECT_AUTO = 2 };

/* What an s3:// or http(s):// root is read with (source.*; copied into
 * each dataset when the file is read: a dataset's source may outlive the
 * configuration it came from). Credentials are never here: they come from
 * the environment or credentials_file when the source opens. */
struct config_source {
    char endpoint[256];          /* "http(s)://host[:port]"; "": AWS */
    char region[64];             /* "": us-east-1 */
    char credentials_file[1024]; /* "": AWS_ACCESS_KEY_ID, ... */
    uint32_t retries;            /* tries after the first */
    uint32_t timeout_ms;         /* per attempt */
    uint32_t connect_timeout_ms;
    uint32_t page_keys;          /* keys per ListObjectsV2 page */
    uint64_t index_window;       /* bytes of a tar shard's header walk a GET reads */
    uint32_t depth;              /* requests in flight (io.depth) */
    uint64_t max_bytes;          /* larger objects fail unread (limits.file_size) */
    char cache_dir[1024];        /* cache.dir, where tar shards' member lists
                                    are kept (shardidx.h); "": nowhere */
    /* A dataset's own `source:` keys (endpoint, region, credentials_file)
     * set at these lines (0: the global source.* key's value) */
    int own_line[3];
};

/* What a dataset's pipeline makes after each prefix of its steps, computed
 * once when the steps are set (config_dataset_chain) so that nothing above
 * the config has to walk the steps: chain[k] is the state after
 * steps[0..k) (k = 0: before any step), which a strategy with split k
 * materializes, and chain[nsteps] the pipeline's output. */
struct config_stage {
    uint32_t h, w, c;    /* 0 in h or w: it varies per image */
    uint32_t dtype;      /* PROTO_DTYPE_* */
    uint32_t layout;     /* enum step_layout */
    uint64_t fingerprint; /* of steps[0..k) and their parameters: the disk
                             tier's key of a strategy with split k */
    uint64_t step_fp;    /* steps[k]'s own fingerprint (0 for k == nsteps) */
    struct step_type type; /* the sample steps[k] takes (step.h's sample model) */
};

struct config_dataset {
    char name[CONFIG_NAME_MAX];
    char *root;
    struct step steps[CONFIG_MAX_STEPS];
    uint32_t nsteps;
    struct config_stage chain[CONFIG_MAX_STEPS + 1]; /* config_dataset_chain */
    uint32_t split; /* steps[0..split) run offline, the rest online */
    enum config_on_error on_error;
    int zstd_level; /* disk tier encoding: 0 raw, else zstd at this level */
    int follow_symlinks; /* 0: links leaving root are refused (see access.h) */
    int split_auto; /* split: auto: the profiler chooses (profile.h); split
                       holds the default until then */
    int line;       /* where it was declared (0: command line) */
    int root_line;  /* where its root was set (0: command line) */
    struct config_source source; /* the source.* keys, as the file had them */
    /* Batch-level steps (mixup, cutmix): written at the end of steps, kept
     * here, not in steps[] (no sample runs them: a complete batch does).
     * Their num_classes makes the labels float32 [n, num_classes]. */
    struct step batch_steps[CONFIG_MAX_BATCH_STEPS];
    uint32_t nbatch_steps;
    int batch_lines[CONFIG_MAX_BATCH_STEPS]; /* where each was written */
    /* batch: {pad: longest, max_length: N} (issue 18): samples whose time
     * axis (an audio sample's w) varies are padded with zeros to the
     * longest in their batch, each one's length sent beside it (the labels'
     * lengths tensor); one longer than max_length is cropped to it. N bounds
     * a sample's slot: the output is [C, (F,) N] as far as buffers go.
     * 0: no padding (every sample has the pipeline's fixed shape). */
    uint32_t pad_max;
    int batch_line; /* where batch: was written (0: nowhere) */
};

struct config {
    char *path;            /* the file read, or NULL */
    char *socket_path;
    uint32_t socket_mode;
    uint32_t socket_group; /* gid, or CONFIG_NO_GROUP */
    uint32_t admin_group;  /* gid whose members may run admin operations */
    uint32_t workers;      /* 0: one per core */
    int log_level;
    uint32_t prefetch;     /* default batches ahead per stream */
    uint64_t cache_memory; /* bytes */
    char *cache_dir;
    uint64_t cache_disk;   /* disk tier budget in bytes; 0: no disk tier */
    uint64_t segment_size; /* disk tier segment files */
    uint32_t cache_direct_io; /* enum config_direct_io (store_direct_io) */
    uint32_t io_depth;     /* reads in flight per worker */
    uint32_t io_backend;   /* enum config_io_backend */
    uint64_t io_readahead; /* bytes of batches read ahead of their jobs; 0: none */
    uint32_t max_connections;
    uint32_t max_connections_per_user; /* connections of one peer uid */
    uint32_t idle_timeout;  /* s a connection with nothing open may send nothing */
    uint32_t max_streams_per_conn;
    uint32_t max_streams_per_user;  /* streams open by one peer uid */
    uint32_t max_prefetch;          /* largest prefetch an OPEN may ask */
    uint64_t max_frame_size;        /* largest request body */
    uint64_t max_output_buffer;     /* bytes of replies queued to a
                                       connection past which its next
                                       requests wait (budget.h) */
    uint32_t output_timeout;        /* s a connection may keep requests
                                       waiting that way, draining nothing */
    uint32_t max_batch_size;
    uint64_t max_file_size;
    uint64_t max_pixels;
    uint32_t max_audio_seconds;  /* decode_audio: longest clip (limits.audio_seconds) */
    uint32_t max_audio_channels; /* and most channels (limits.audio_channels) */
    uint32_t release_timeout; /* s: a shared-memory client holding slots and
                                 releasing none for this long is dropped */
    uint64_t client_memory;   /* bytes all clients together can make the daemon
                                 hold (budget.h); default a quarter of RAM */
    uint64_t user_memory;     /* ... the clients of one uid; 0 (or unset):
                                 half of client_memory */
    uint32_t profile_samples;      /* sample size of a profile (0: 2%, 64..300) */
    uint32_t profile_worker_share; /* percent of the workers a profile may use */
    uint64_t profile_memory;       /* bytes of a profile's trial memory tier */
    char *metrics_listen;          /* [HOST:]PORT of the /metrics HTTP endpoint; NULL: off */
    struct cluster_config cluster; /* cluster.*: the cluster tier's servers (none: off) */
    char *source_endpoint, *source_region, *source_credentials_file; /* source.* */
    uint32_t source_retries, source_timeout_ms, source_connect_timeout_ms, source_page_keys;
    uint64_t source_index_window; /* source.index_window */
    struct config_dataset *datasets;
    uint32_t ndatasets;
};

/* Fills every key with its default (socket and cache dir from the
 * environment, cache.memory 25% of RAM). Returns 0 or -ENOMEM. */
int config_defaults(struct config *c);
/* Defaults, then the file at path on top. On error returns -EINVAL with
 * "FILE:LINE: key 'K': what" in err. */
int config_load(struct config *c, const char *path, char *err, size_t errlen);
/* Same, from a string; name stands in for the file name in messages. */
int config_load_string(struct config *c, const char *yaml, size_t len,
                       const char *name, char *err, size_t errlen);
/* Adds "NAME=DIR" with the default pipeline (decode, resize 256,
 * center_crop 224 offline; random_flip 0.5 online). */
int config_add_dataset_arg(struct config *c, const char *arg, char *err,
                           size_t errlen);
/* Every dataset root exists and is a directory or a file (what start-up and
 * --check-config check before indexing): 0, or -EINVAL with
 * "FILE:LINE: key 'datasets.root': ..." (or "--dataset NAME=DIR: ...") in err. */
int config_check_roots(const struct config *c, char *err, size_t errlen);
/* The one way a dataset's steps become a pipeline: checks them as a whole
 * (step_chain_init) and fills d->chain from d->steps[0..d->nsteps). Every
 * config_dataset built (from the file, --dataset's default pipeline, a
 * test) goes through it; copies keep the chain. Returns 0, or -EINVAL with
 * err and *bad the index of the step at fault. */
int config_dataset_chain(struct config_dataset *d, uint32_t *bad, char *err, size_t errlen);
/* The label tensor a batch of d carries: int64 [n], or float32 [n, K] when
 * a batch-level step makes soft targets of K classes; with lengths when d
 * pads its samples (batch: {pad: longest}). */
struct proto_labels config_dataset_labels(const struct config_dataset *d);
/* Sets cache.dir (--cache-dir) in c and in every dataset's source. 0 or -ENOMEM. */
int config_set_cache_dir(struct config *c, const char *path);
const struct config_dataset *config_find_dataset(const struct config *c,
                                                 const char *name);
/* A copy of src that owns its strings (config_dataset_free it): a dataset
 * served outlives the config it came from across reloads. 0 or -ENOMEM. */
int config_dataset_copy(struct config_dataset *dst, const struct config_dataset *src);
void config_dataset_free(struct config_dataset *d);
/* 1 when a and b declare the same dataset (name, root, steps and their
 * parameters, split, on_error, encoding, follow_symlinks), else 0. */
int config_dataset_same(const struct config_dataset *a, const struct config_dataset *b);

/* Told about each scalar key whose value differs from a to b: its full
 * name ("limits.connections"), both values as text, and live = 1 when a
 * reload applies it, 0 when it needs a restart. */
typedef void (*config_diff_fn)(void *arg, const char *key, const char *was,
                               const char *now, int live);
void config_diff(const struct config *a, const struct config *b, config_diff_fn fn,
                 void *arg);
/* Sets every key that needs a restart in c back to its value in running
 * (what a reload adopts is what runs). Returns 0 or -ENOMEM. */
int config_keep_restart_keys(struct config *c, const struct config *running);
void config_free(struct config *c);

/* metrics.listen's syntax: PORT (on 127.0.0.1), HOST:PORT with a numeric
 * host or localhost, or [IPV6]:PORT. 0, or -EINVAL. */
struct sockaddr_storage;
int config_parse_listen(const char *s, struct sockaddr_storage *out);

/* "123", "64KiB", "2GiB", "1.5G", "25%" (of total RAM). Returns 0 or -EINVAL. */
int config_parse_size(const char *s, uint64_t *out);

#endif
