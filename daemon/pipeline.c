/* Per-sample pipeline: see pipeline.h. */
#include "pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

uint64_t pipeline_sample_seed(uint64_t seed, uint64_t epoch, uint32_t sample)
{
    return step_mix64(step_mix64(step_mix64(seed) ^ epoch) ^ sample);
}

/* Runs steps [from, to) starting at *cur; *cur ends at the result, which
 * lives in one of the two ping-pong scratch images (or is *cur unchanged),
 * or in last_out for the last step when last_out is given. */
static enum pipeline_fault run_steps(const struct config_dataset *cfg, uint32_t from,
                                     uint32_t to, uint64_t seed, struct worker_ctx *ctx,
                                     const struct img **cur, struct img *last_out,
                                     char *err, size_t errlen)
{
    for (uint32_t i = from; i < to; i++) {
        const struct step *s = &cfg->steps[i];
        struct img *out = &ctx->scratch[1 + (*cur == &ctx->scratch[1])];
        if (last_out && i + 1 == to)
            out = last_out;
        ctx->step.seed = step_mix64(seed + i);
        uint64_t t0 = stats_now_ns();
        int rc = step_apply(s, &ctx->step, *cur, out);
        stats_step(ctx->stats, s->kind, stats_now_ns() - t0);
        if (rc == -ENOSPC && out == last_out) {
            snprintf(err, errlen, "%s: output larger than the stream's %zu-byte sample",
                     step_name(s->kind), last_out->cap);
            return PIPE_SHAPE;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s", ctx->step.err); /* steps name themselves */
            if (rc == -E2BIG)
                return PIPE_TOO_LARGE;
            return s->kind == STEP_DECODE ? PIPE_DECODE : PIPE_SHAPE;
        }
        *cur = out;
    }
    return PIPE_OK;
}

enum pipeline_fault pipeline_sample(const struct pipeline_env *env, struct dataset *ds,
                                    uint32_t sample, uint64_t sample_seed, uint8_t *dst,
                                    struct worker_ctx *ctx, char *err, size_t errlen)
{
    const struct config_dataset *cfg = ds->cfg;
    const struct cache_entry *e = cache_get(env->cache, ds->id, ds->fingerprint, sample);
    struct img view;
    const struct img *cur;
    enum pipeline_fault f;

    if (e) {
        stats_add(ctx->stats, STAT_cache_hits, 1);
        __atomic_fetch_add(&ds->hits, 1, __ATOMIC_RELAXED);
        cache_entry_img(e, &view);
        cur = &view;
    } else {
        stats_add(ctx->stats, STAT_cache_misses, 1);
        __atomic_fetch_add(&ds->misses, 1, __ATOMIC_RELAXED);
        int rc = dataset_read(ds, sample, env->max_file_size, &ctx->scratch[0], err, errlen);
        if (rc < 0)
            return rc == -EFBIG ? PIPE_TOO_LARGE : PIPE_READ;
        cur = &ctx->scratch[0];
        f = run_steps(cfg, 0, cfg->split, sample_seed, ctx, &cur, NULL, err, errlen);
        if (f != PIPE_OK)
            return f;
        if (cfg->split > 0 && (e = cache_put(env->cache, ds->id, ds->fingerprint, sample, cur))) {
            cache_entry_img(e, &view);
            cur = &view;
        }
    }
    /* The last online step writes straight into the batch's slot. */
    struct img slot = {.fmt = IMG_PIXELS, .data = dst, .cap = ds->sample_bytes, .borrowed = 1};
    f = run_steps(cfg, cfg->split, cfg->nsteps, sample_seed, ctx, &cur, &slot, err, errlen);
    if (f != PIPE_OK)
        return f;
    if (cur->fmt != IMG_PIXELS || cur->h != ds->out_h || cur->w != ds->out_w ||
        cur->c != ds->out_c || cur->len != ds->sample_bytes) {
        snprintf(err, errlen, "output is %ux%ux%u, the stream's is %ux%ux%u", cur->h,
                 cur->w, cur->c, ds->out_h, ds->out_w, ds->out_c);
        return PIPE_SHAPE;
    }
    if (cur->data != dst)
        memcpy(dst, cur->data, cur->len);
    return PIPE_OK;
}
