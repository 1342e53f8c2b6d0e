/*
 * Pipeline steps: pure functions of one sample.
 *
 * A step is declared in the config as `- NAME`, `- NAME: VALUE` (its main
 * parameter), `- NAME: [V, ...]` or `- NAME: {KEY: VALUE | [V, ...], ...}`;
 * config.c turns that into struct step_args and step_init() validates it
 * at config load. step_chain_init() then checks the pipeline as a whole and
 * links neighbours (decode's dct_scale learns the size of the resize after
 * it). Deterministic steps may run offline (before the split point, once
 * per sample, result cached); random steps (step_is_random) draw every
 * decision from the per-sample seed in struct step_ctx, so (stream seed,
 * epoch, sample id) fixes the output whatever the workers, ranks or cache.
 *
 * The steps, their parameters (default) and what they match:
 *   decode               mode: rgb | grey (rgb), dct_scale: false | true
 *                        PIL Image.open(f).convert('RGB' | 'L'), bit-exact
 *                        (dct_scale: TurboJPEG's scaled IDCT, see steps/decode.c)
 *   resize               size: N (shorter side) | [H, W]
 *                        torchvision Resize on PIL (bilinear, antialias), bit-exact
 *   center_crop          size: N | [H, W]          torchvision CenterCrop (pads)
 *   random_resized_crop  size: N | [H, W], scale: [0.08, 1], ratio: [3/4, 4/3]
 *                        torchvision RandomResizedCrop on PIL
 *   random_flip          p: 0.5                    RandomHorizontalFlip
 *   pad                  padding: N | [LR, TB] | [L, T, R, B], fill: 0 | [R, G, B]
 *                        torchvision Pad (constant)
 *   normalize            mean: [..], std: [..], layout: nhwc | nchw (nhwc)
 *                        ToTensor + Normalize, float32, bit-exact
 *   to_float             layout: nhwc | nchw       ToTensor (x / 255), float32
 * Batch-level steps, last in the list, after to_float or normalize (they
 * take the float32 image, either layout, and make the labels float32 soft
 * targets [n, num_classes]); torchvision's reference training scripts'
 * RandomMixup / RandomCutmix (steps/mix.h):
 *   mixup                alpha (main, > 0), num_classes (required), p: 1.0,
 *                        switch_p: 0.5
 *   cutmix               the same
 *   With both, each batch takes cutmix with probability switch_p, else
 *   mixup (the scripts' RandomChoice: 0.5), then mixes with probability p;
 *   both must then agree on num_classes, p and switch_p. They never run on
 *   a sample: config.c keeps them apart (config_dataset's batch_steps) and
 *   the pipeline applies them to a batch (pipeline_batch_steps), their
 *   randomness drawn from (stream seed, epoch, batch).
 *
 * The image augmentations (imgaug.c; torchvision's names and defaults; each
 * decision drawn from the per-sample seed, the operation given it equal to
 * torchvision's on PIL):
 *   color_jitter         brightness, contrast, saturation: X | [LO, HI]; hue:
 *                        X | [LO, HI] (all off)      ColorJitter
 *   random_grayscale     p: 0.1                      RandomGrayscale
 *   gaussian_blur        kernel_size: N | [KX, KY], sigma: [0.1, 2] | X
 *                        GaussianBlur (random only when sigma is a range)
 *   random_rotation      degrees, interpolation: nearest | bilinear, fill: 0
 *                        RandomRotation
 *   random_affine        degrees, translate, scale, shear, interpolation,
 *                        fill, center                RandomAffine
 *   auto_augment         policy: imagenet, interpolation, fill   AutoAugment
 *   rand_augment         num_ops: 2, magnitude: 9, num_magnitude_bins: 31,
 *                        interpolation, fill         RandAugment
 *   trivial_augment_wide num_magnitude_bins: 31, interpolation, fill
 *                        TrivialAugmentWide
 *   random_erasing       p: 0.5, scale: [0.02, 0.33], ratio: [0.3, 3.3],
 *                        value: 0 | [V, ...] | random
 *                        RandomErasing, on normalize's or to_float's float32
 *
 * Audio (steps/sound.c over audio.h; torchaudio 0.13 in the fidelity suite):
 *   decode_audio         mono: false | true        torchaudio.load (+ mean(0))
 *                        dtype: float32 | int16    int16: x 32768 rounded, as
 *                        torchaudio.load(normalize=False) for 16-bit PCM
 *   resample             rate: N, lowpass_filter_width: 6, rolloff: 0.99
 *                        functional.resample (sinc_interpolation, float32 kernel)
 *   time_crop            length: N, align: start | center    x[:, :N] or zero pad
 *   random_time_crop     length: N, pad: end | center | random
 *   mel_spectrogram      n_mels: 128, sample_rate (the resample's, else 16000),
 *                        n_fft: 400, win_length, hop_length, f_min: 0, f_max,
 *                        power: 2, center: true, pad_mode: reflect, norm: none,
 *                        mel_scale: htk, normalized: false    MelSpectrogram
 *   amplitude_to_db      stype: power | magnitude, top_db (none) AmplitudeToDB
 *   time_mask            time_mask_param: N, p: 1  TimeMasking (value 0)
 *   frequency_mask       freq_mask_param: N        FrequencyMasking
 *   random_gain          gain_db: [LO, HI]         functional.gain, uniform dB
 *
 * The sample model: a sample is a tensor, typed by struct step_type (what
 * it holds, its dtype, the rank of its shape). A pipeline starts from the
 * source's encoded bytes (STEP_DOMAIN_ENCODED, rank 0: fmt IMG_ENCODED, the
 * byte count in len, img.h); every step declares the type it takes and the
 * type it gives (step_takes, step_gives: one table in step.c), and
 * step_chain_init refuses a pipeline where a step does not take what the
 * step before it gives (config.c reports it at the step's FILE:LINE).
 * Images are uint8 [H, W, C], row-major (STEP_DOMAIN_IMAGE, rank 3):
 * decode makes them; normalize and to_float make float32 [H, W, C] or
 * [C, H, W] (their layout), which no image step takes, so they come last.
 * Audio clips are float32 nchw: a waveform [C, T] (domain WAVEFORM, rank 2)
 * is c = C, h = 1, w = T; a spectrogram [C, F, T] (rank 3) is c = C, h = F,
 * w = T; img.rate is the sample rate (daemon/README, "Audio samples").
 * Random steps draw from ctx->seed with hash_rand01 (hash.h).
 */
#ifndef PRESTO_STEP_H
#define PRESTO_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "color.h"
#include "geometry.h"
#include "img.h"

struct roi_decoder;

enum step_kind {
    STEP_DECODE,
    STEP_RESIZE,
    STEP_CENTER_CROP,
    STEP_RANDOM_FLIP,
    STEP_RANDOM_RESIZED_CROP,
    STEP_PAD,
    STEP_NORMALIZE,
    STEP_TO_FLOAT,
    /* The image augmentations of training recipes (issue 17; imgaug.c) */
    STEP_COLOR_JITTER,
    STEP_RANDOM_GRAYSCALE,
    STEP_GAUSSIAN_BLUR,
    STEP_RANDOM_ROTATION,
    STEP_RANDOM_AFFINE,
    STEP_AUTO_AUGMENT,
    STEP_RAND_AUGMENT,
    STEP_TRIVIAL_AUGMENT_WIDE,
    STEP_RANDOM_ERASING,
    /* batch-level steps: a complete batch, not a sample (step_is_batch) */
    STEP_MIXUP,
    STEP_CUTMIX,
    /* audio (issue 18): steps/sound.c */
    STEP_DECODE_AUDIO,
    STEP_RESAMPLE,
    STEP_TIME_CROP,
    STEP_RANDOM_TIME_CROP,
    STEP_MEL_SPECTROGRAM,
    STEP_AMPLITUDE_TO_DB,
    STEP_TIME_MASK,
    STEP_FREQUENCY_MASK,
    STEP_RANDOM_GAIN,
    STEP_KIND_MAX
};

/* Memory order of a float32 output (uint8 images are always NHWC). The
 * wire protocol's layout field takes these values. */
enum step_layout { STEP_LAYOUT_NHWC = 0, STEP_LAYOUT_NCHW = 1 };

#define STEP_CHANNELS_MAX 4 /* per-channel values: pad fill, normalize */
#define STEP_SIZE_MAX 65535u

/* The audio steps' parameters (steps/sound.c; see the table above). */
struct step_audio {
    uint32_t mono;           /* decode_audio: mix down to one channel */
    uint32_t int16;          /* decode_audio: dtype int16 (the samples x 32768,
                              * rounded: 16-bit PCM as the file has it) */
    uint32_t rate;           /* resample: the output's rate */
    uint32_t width;          /* resample: lowpass_filter_width (6) */
    double rolloff;          /* resample: 0.99 */
    uint32_t length;         /* time_crop, random_time_crop: frames */
    uint32_t pad;            /* time_crop: align start|center; random_time_crop:
                              * pad end|center|random (enum audio_pad) */
    uint32_t sample_rate;    /* mel_spectrogram (0: the resample's before it) */
    uint32_t n_fft, win_length, hop_length, n_mels; /* win, hop 0: defaults */
    double f_min, f_max;     /* f_max < 0: sample_rate / 2 */
    double power;            /* 2 */
    uint32_t center;         /* 1 */
    uint32_t pad_mode;       /* enum audio_pad_mode */
    uint32_t norm;           /* 1: slaney */
    uint32_t mel_scale;      /* enum audio_mel_scale */
    uint32_t normalized;     /* enum audio_norm */
    uint32_t stype;          /* amplitude_to_db: 0 power (10), 1 magnitude (20) */
    double top_db;           /* < 0: none */
    uint32_t mask_param;     /* time_mask, frequency_mask */
    double mask_p;           /* time_mask: p (1) */
    double gain[2];          /* random_gain: dB range */
};

struct step {
    enum step_kind kind;
    /* resize, center_crop, random_resized_crop: the output h x w; resize
     * with shorter set: the shorter side becomes h (== w), torchvision's
     * Resize(int). */
    uint32_t h, w;
    int shorter;
    /* decode: 3 (rgb) or 1 (grey) channels; dct_scale; and, set by
     * step_chain_init, the resize that follows (dct_h x dct_w, shorter
     * side when dct_shorter). */
    uint32_t channels;
    int dct_scale;
    uint32_t dct_h, dct_w;
    int dct_shorter;
    double p;                /* random_flip */
    double scale[2];         /* random_resized_crop: area fraction range */
    double ratio[2];         /* random_resized_crop: aspect (w / h) range */
    uint32_t pad[4];         /* pad: left, top, right, bottom */
    uint32_t nfill;          /* pad: 1 value for every channel, or one each */
    uint8_t fill[STEP_CHANNELS_MAX];
    uint32_t nmean;          /* normalize: 1 value for every channel, or one each */
    float mean[STEP_CHANNELS_MAX], std[STEP_CHANNELS_MAX];
    uint32_t layout;         /* normalize, to_float: enum step_layout */
    /* The image augmentations (imgaug.c). random_grayscale and
     * random_erasing take p above, random_erasing scale and ratio too; the
     * geometric ones and the policies fill (nfill values) above. */
    struct color_jitter_params jitter; /* color_jitter: ranges by color_jitter_fn */
    struct geom_affine_params affine;  /* random_rotation (degrees), random_affine */
    int center_on;                     /* random_affine: center given */
    double center[2];                  /* random_affine: center x, y */
    uint32_t interp;                   /* enum geom_interp: geometry and policies */
    uint32_t ksize[2];                 /* gaussian_blur: kernel_size [kx, ky] */
    double sigma[2];                   /* gaussian_blur: sigma range */
    struct aug_params aug;             /* auto_augment, rand_augment, trivial_augment_wide */
    int erase_random;                  /* random_erasing: value random */
    uint32_t nvalue;                   /* random_erasing: 1 value, or one per channel */
    float value[STEP_CHANNELS_MAX];
    int erase_nchw;                    /* random_erasing: its input's layout (chain) */
    /* batch-level steps (mixup, cutmix; p is the batch's mixing chance) */
    double alpha;            /* Beta(alpha, alpha) of lambda */
    double switch_p;         /* with both: cutmix's share (RandomChoice: 0.5) */
    uint32_t num_classes;    /* the soft targets' K */
    struct step_audio au;    /* the audio steps' parameters */
};

/* What a sample is between two steps. */
enum step_domain {
    STEP_DOMAIN_ENCODED = 0, /* a source file's bytes (rank 0: a byte count) */
    STEP_DOMAIN_IMAGE = 1,   /* pixels: [H, W, C] (or [C, H, W], layout nchw) */
    /* audio, float32 channels first, carried by struct img as [C, H, W] in
     * nchw (c channels, h rows, w frames; rate in img.rate): */
    STEP_DOMAIN_WAVEFORM = 2,    /* [C, T]: h 1, w T */
    STEP_DOMAIN_SPECTROGRAM = 3, /* [C, F, T]: h F bins, w T frames */
    STEP_DOMAIN_MAX
};
struct step_type {
    uint32_t domain; /* enum step_domain */
    uint32_t dtype;  /* PROTO_DTYPE_* (u8 for encoded bytes) */
    uint32_t rank;   /* dimensions of the shape: 0 encoded, 3 an image or a
                      * spectrogram, 2 a waveform */
    uint32_t layout; /* images: enum step_layout */
};

/* A step's parameters as written in the config (strings, parsed by
 * step_init). key NULL: the step's main parameter (`- resize: 256`). */
#define STEP_ARGS_MAX 16
#define STEP_ARG_VALUES_MAX 8
struct step_arg {
    const char *key;
    const char *v[STEP_ARG_VALUES_MAX];
    uint32_t n;  /* values in v */
    int list;    /* written as a list (even of one value) */
};
struct step_args {
    struct step_arg a[STEP_ARGS_MAX];
    uint32_t n;
};

/* Per-worker-thread state a step may use; one per thread, never shared. */
struct step_ctx {
    uint64_t seed;          /* per-sample seed for random steps */
    void *tj;               /* TurboJPEG decompressor, created lazily */
    uint64_t max_pixels;    /* decode refuses larger images (0 = no limit) */
    int format;             /* decode: the enum decode_format of its last input */
    struct step_sound *sound; /* the audio steps' per-thread state, made lazily */
    const char *name;       /* the sample's source path, or NULL: decode_audio takes
                             * the format its extension names (else the bytes') */
    double max_seconds;     /* decode_audio refuses longer clips (0 = no limit) */
    int audio_format;       /* decode_audio: the enum audio_format of its last
                             * input (0: it never got as far as choosing) */
    uint32_t max_channels;  /* and clips with more channels (0 = no limit) */
    char err[256];          /* message when a step fails */
    struct img aux;         /* the augmentations' scratch image (imgaug.c) */
    struct roi_decoder *roi; /* region decoder (jpeg_roi.h), created lazily */
};

void step_ctx_init(struct step_ctx *ctx);
void step_ctx_free(struct step_ctx *ctx);

/* Parses step NAME with its parameters (args NULL or empty: defaults).
 * Returns 0, or -EINVAL with a message in err; *bad_arg (when not NULL) is
 * then the index in args of the parameter at fault, or -1 when it is the
 * step itself (unknown name, missing parameter). */
int step_init(struct step *s, const char *name, const struct step_args *args,
              int *bad_arg, char *err, size_t errlen);
/* step_init with at most the main parameter, as one scalar (arg NULL or
 * "": none). */
int step_init_simple(struct step *s, const char *name, const char *arg, char *err,
                     size_t errlen);
/* The name of the parameter `- NAME: VALUE` sets for step NAME, or NULL
 * when it has none (normalize) or there is no such step. */
const char *step_main_param(const char *name);

/* The type every pipeline starts from: the source's encoded bytes. */
extern const struct step_type step_type_source;
/* Whether step s takes a sample of type in. */
int step_takes(const struct step *s, const struct step_type *in);
/* The type s gives for an input it takes. */
void step_gives(const struct step *s, const struct step_type *in, struct step_type *out);
/* "uint8 image [H, W, C]", "encoded bytes", ...: a type for messages. */
void step_type_describe(const struct step_type *t, char *buf, size_t len);
/* What step kind takes, in words ("a uint8 image [H, W, C]"), for messages
 * and docs. */
const char *step_takes_text(enum step_kind kind);

/* Checks a whole pipeline: each step takes what the one before it gives
 * (the first one the source's bytes: decode first and only there, nothing
 * after a float32 step), per-channel values matching the channels,
 * dct_scale followed by a resize (whose size it then records). Returns 0,
 * or -EINVAL with err and *bad the index of the step at fault. */
int step_chain_init(struct step *steps, uint32_t n, uint32_t *bad, char *err,
                    size_t errlen);
/* The type steps[0..n) give, for a chain step_chain_init accepted. */
void step_chain_type(const struct step *steps, uint32_t n, struct step_type *out);
/* Checks a split point (steps[0..split) offline): no random step offline,
 * and a dct_scale decode on the same side as its resize. Returns 0, or
 * -EINVAL with err. */
int step_split_check(const struct step *steps, uint32_t n, uint32_t split, char *err,
                     size_t errlen);

const char *step_name(enum step_kind kind);
int step_is_random(const struct step *s);
/* Writes a canonical "name(args)" text of the step for logs and the
 * datasets JSON: parameters at their defaults are left out. */
void step_describe(const struct step *s, char *buf, size_t len);
/* K when the step makes the labels float32 soft targets [n, K] (mixup,
 * cutmix), else 0. */
uint32_t step_soft_classes(const struct step *s);
/* 1 for a batch-level step (mixup, cutmix): it acts on a whole batch. */
int step_is_batch(const struct step *s);
/* Mixes the step's kind and every parameter into a 64-bit fingerprint. */
uint64_t step_fingerprint(const struct step *s, uint64_t h);

/* Output shape for a given input shape; 0 in h/w means "depends on the
 * image" (decode, resize to a shorter side, pad of an unknown size). */
void step_out_shape(const struct step *s, uint32_t in_h, uint32_t in_w,
                    uint32_t in_c, uint32_t *h, uint32_t *w, uint32_t *c);

/* Output dtype (PROTO_DTYPE_*) for a given input dtype. */
uint32_t step_out_dtype(const struct step *s, uint32_t in_dtype);

/* Output layout (enum step_layout) for a given input layout. */
uint32_t step_out_layout(const struct step *s, uint32_t in_layout);

/* Runs the step: reads in, writes out (out is reused between calls and grown
 * with img_reserve). Returns 0, or a negative errno with ctx->err set
 * (-EBADMSG for a corrupt or non-JPEG input, -E2BIG for an image over
 * max_pixels, -EINVAL for a wrong input format). */
int step_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
               struct img *out);

/* Whether step_apply(s, ctx, in, out) may be given out == in (the pipeline
 * then lets the step before it write into the batch's slot): random_erasing,
 * which changes a box of its input and copies nothing else. */
int step_in_place(const struct step *s);

/* decode and the random_resized_crop right after it, both online, in one
 * (the cold path): a JPEG's crop box is decoded alone (jpeg_roi.h: the same
 * pixels as a full decode's), at the DCT scale the crop's output allows
 * when dec->dct_scale (the smallest of 1/8 to 4/8 still giving 5/4 of the
 * output on each side), then resized as random_resized_crop does; ctx->seed
 * is random_resized_crop's. Other formats, CMYK, and a file the region
 * decoder refuses are decoded whole and cropped (so a bad file fails as
 * decode fails). Returns 1 when a region was decoded, 0 when the whole
 * image, or -errno as the two steps do. */
int step_decode_rrc_apply(const struct step *dec, const struct step *rrc,
                          struct step_ctx *ctx, const struct img *in, struct img *out);
/* The same with the output mirrored left-right when mirror is set (a
 * random_flip right after the crop, fused: step_flip_decide gives its
 * decision), and normalize (or to_float) norm fused in when not NULL (each
 * output row of the crop goes to float32 as it is made: the same values as
 * the steps apart; out is float32); dec NULL: random_resized_crop alone on
 * in's pixels. */
int step_decode_rrc_tail_apply(const struct step *dec, const struct step *rrc, int mirror,
                               const struct step *norm, struct step_ctx *ctx,
                               const struct img *in, struct img *out);
/* random_flip's decision for p from its per-sample seed: 1 to mirror. */
int step_flip_decide(double p, uint64_t seed);
/* random_flip's output written to dst (in->len bytes, not overlapping in)
 * from pixels not yet checked: in (uint8, h x w x c, len h * w * c)
 * mirrored left-right when mirror, else copied, while the CRC32C of in's
 * bytes (continued from crc, as hash_crc32c's) is computed in the same
 * pass: a copy stores each word from the register the checksum read, a
 * mirror flips each L1-sized block of rows right after summing it.
 * Returns the CRC32C. */
uint32_t step_flip_copy_crc32c(uint32_t crc, int mirror, const struct img *in, uint8_t *dst);

#endif
