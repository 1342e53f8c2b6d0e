/* prestoctl profile's table, CSV, JSON and SVG: see profile_report.h. */
#include "profile_report.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const char *const applied_names[] = {"no", "now", "at the next start", "unchanged"};

static const char *applied_name(int a)
{
    return a >= 0 && a <= PRESTO_APPLIED_UNCHANGED ? applied_names[a] : "?";
}

void profile_fmt_bytes(char *buf, size_t len, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

void profile_fmt_seconds(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "-");
    else if (s < 0.1)
        snprintf(buf, len, "%.3g ms", s * 1e3);
    else if (s < 10)
        snprintf(buf, len, "%.2f s", s);
    else if (s < 60)
        snprintf(buf, len, "%.1f s", s);
    else if (s < 3600)
        snprintf(buf, len, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60),
                 (int)fmod(s, 60));
}

/* Samples/s the whole daemon would do from a tier: dataset / epoch time. */
static double tier_rate(const presto_profile_result_t *r, double epoch_s)
{
    return epoch_s > 0 ? (double)r->samples / epoch_s : 0;
}

static int finish(FILE *f)
{
    return ferror(f) ? -1 : 0;
}

/* A time per sample for people: "3.64 ms", "33.5 us", never a rounded 0. */
void profile_fmt_per_sample(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s <= 0)
        snprintf(buf, len, "-");
    else if (s >= 1)
        snprintf(buf, len, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, len, "%.3g ms", s * 1e3);
    else
        snprintf(buf, len, "%.3g us", s * 1e6);
}

/* A rate with its spread: "41.2k +-6%" (samples/s). */
void profile_fmt_rate(char *buf, size_t len, double rate, double spread)
{
    char v[24];
    if (!isfinite(rate) || rate <= 0) {
        snprintf(buf, len, "-");
        return;
    }
    if (rate >= 1e6)
        snprintf(v, sizeof(v), "%.3gM", rate / 1e6);
    else if (rate >= 1e4)
        snprintf(v, sizeof(v), "%.3gk", rate / 1e3);
    else
        snprintf(v, sizeof(v), "%.0f", rate);
    if (isfinite(spread) && spread > 0)
        snprintf(buf, len, "%s +-%.0f%%", v, fmin(spread, 9.99) * 100);
    else
        snprintf(buf, len, "%s", v);
}

/* ---- table ---- */

int profile_report_table(FILE *f, const presto_profile_result_t *r)
{
    char mem[32], disk[32], sec[32], tb[32], stored[32], offl[32];
    char rm[32], rd[32], rc[32];
    profile_fmt_bytes(mem, sizeof(mem), (double)r->memory_budget);
    if (r->disk_budget)
        profile_fmt_bytes(disk, sizeof(disk), (double)r->disk_budget);
    else
        snprintf(disk, sizeof(disk), "none (no disk tier)");
    fprintf(f, "profile of %s: %u strategies on %u of %llu samples, %.1f s; rates measured "
               "on %u of %u workers%s\n",
            r->dataset, r->count, r->sample_size, (unsigned long long)r->samples, r->seconds,
            r->profile_workers, r->workers,
            r->profile_workers == r->workers ? "" : " and scaled to all of them");
    fprintf(f, "memory budget %s, disk budget %s; objective: %g x throughput + %g x offline "
               "time + %g x storage\n",
            mem, disk, r->w_throughput, r->w_offline, r->w_storage);
    if (r->disk_read_bw > 0 || r->disk_write_bw > 0) {
        profile_fmt_bytes(rm, sizeof(rm), r->disk_probe_bytes);
        fprintf(f, "the disk under cache.dir: reads %.0f MB/s (O_DIRECT, %u in flight), writes "
                   "%.0f MB/s, on %s\n",
                r->disk_read_bw / 1e6, r->disk_probe_depth, r->disk_write_bw / 1e6, rm);
    }
    if (r->writeback_bw > 0 || r->source_s_per_sample > 0)
        fprintf(f, "first epoch: its records written back at %.0f MB/s, the "
                   "source files read at %.3f ms per sample\n",
                r->writeback_bw / 1e6, r->source_s_per_sample * 1e3);
    fputc('\n', f);
    fputs("per sample: offline time (read, offline steps, encode, store, write-back; worker "
          "time) and bytes stored;\nfor the whole dataset, samples/s delivered by warm "
          "epochs from memory, from disk, by the first\n(cold) epoch (+-: where a real "
          "epoch is expected, the repetitions' spread and the model's\nown error for the "
          "figure combined), offline time, storage, the share the memory budget holds,\n"
          "whether it fits the disk budget, and the expected samples/s and epoch time\n\n", f);
    fprintf(f, "%-4s %-20s %5s %10s %10s %13s %13s %13s  %9s %10s %5s %4s %10s %8s %6s\n",
            "rank", "strategy", "split", "offline", "stored", "memory/s", "disk/s", "cold/s",
            "offline", "storage", "mem%", "disk", "expected/s", "epoch", "score");
    for (uint32_t i = 0; i < r->count; i++) {
        const presto_profile_strategy_t *s = &r->strategies[i];
        if (s->split)
            profile_fmt_bytes(stored, sizeof(stored), s->stored_bytes);
        else
            snprintf(stored, sizeof(stored), "-");
        profile_fmt_per_sample(offl, sizeof(offl), s->offline_s);
        profile_fmt_bytes(tb, sizeof(tb), s->total_bytes);
        profile_fmt_seconds(sec, sizeof(sec), s->total_offline_s);
        profile_fmt_rate(rm, sizeof(rm), tier_rate(r, s->epoch_memory_s), s->memory_interval);
        profile_fmt_rate(rd, sizeof(rd), tier_rate(r, s->epoch_disk_s), s->disk_interval);
        profile_fmt_rate(rc, sizeof(rc), s->cold_rate, s->cold_interval);
        char ep[32];
        profile_fmt_seconds(ep, sizeof(ep), s->expected_epoch_s);
        fprintf(f, "%c%-3u %-20s %5u %10s %10s %13s %13s %13s  %9s %10s %4.0f%% %4s %10.0f "
                   "%8s %6.3f%s\n",
                i == r->winner ? '*' : ' ', s->rank, s->name, s->split, offl, stored, rm, rd,
                rc, s->split ? sec : "-", tb, s->memory_fraction * 100,
                s->split == 0 ? "-" : s->fits_disk ? "yes" : "no", s->expected_rate, ep,
                s->score, i == r->winner ? "  <- winner" : s->feasible ? "" : "  (over the disk budget)");
    }
    if (r->count) {
        const presto_profile_strategy_t *w = &r->strategies[r->winner];
        char ep[32];
        profile_fmt_bytes(tb, sizeof(tb), w->total_bytes);
        profile_fmt_seconds(sec, sizeof(sec), w->total_offline_s);
        profile_fmt_seconds(ep, sizeof(ep), w->expected_epoch_s);
        fprintf(f, "\nwinner: %s (split %u): %.0f samples/s expected (an epoch in %s), %s on "
                   "disk, %s offline; applied: %s\n",
                w->name, w->split, w->expected_rate, ep, tb, sec, applied_name(r->applied));
    }
    return finish(f);
}

/* 1 when meas lies in pred +- interval (0.45: +-45%). */
int profile_inside(double pred, double interval, double meas)
{
    return pred > 0 && meas >= pred * (1 - interval) && meas <= pred * (1 + interval);
}

/* max(p/m, m/p): how far a prediction is from what was measured (inf
 * when either is missing). */
double profile_ratio(double predicted, double measured)
{
    if (!(predicted > 0) || !(measured > 0) || !isfinite(predicted) || !isfinite(measured))
        return INFINITY;
    return predicted > measured ? predicted / measured : measured / predicted;
}

static void fmt_ratio(char *buf, size_t len, double ratio)
{
    if (isfinite(ratio))
        snprintf(buf, len, "%.2fx", ratio);
    else
        snprintf(buf, len, "-");
}

/* What the verification's figures add up to: the worst ratio (and whose),
 * and how many measured rates fell inside the predicted +- interval. */
struct verify_tally {
    double worst;
    const char *worst_name;
    unsigned inside, rates;
};

static void tally_ratio(struct verify_tally *t, double x, const char *name)
{
    if (isfinite(x) && x > t->worst) {
        t->worst = x;
        t->worst_name = name;
    }
}

/* One figure of the verification: "41.2k +-46%  38.1k  1.08x". */
static void verify_cell(FILE *f, double pred, double interval, double meas,
                        struct verify_tally *t, const char *name)
{
    char p[32], m[32], q[16];
    double x = profile_ratio(pred, meas);
    profile_fmt_rate(p, sizeof(p), pred, interval);
    profile_fmt_rate(m, sizeof(m), meas, 0);
    fmt_ratio(q, sizeof(q), x);
    fprintf(f, " | %12s %7s %6s", p, m, q);
    tally_ratio(t, x, name);
    t->rates++;
    t->inside += profile_inside(pred, interval, meas);
}

int profile_report_verify(FILE *f, const presto_profile_result_t *r)
{
    struct verify_tally t = {0};
    /* The epochs ran on the profile's workers: the predictions for them. */
    double k = r->workers ? (double)r->profile_workers / r->workers : 1;
    fprintf(f, "\nverification: real epochs of all %llu samples on %u of %u workers through the "
               "same pipeline, after the profile:\npredicted (+- its interval%s), measured, and "
               "max(predicted/measured, measured/predicted)\n\n",
            (unsigned long long)r->samples, r->profile_workers, r->workers,
            k < 1 ? "; rates for those workers" : "");
    fprintf(f, "%-20s | %27s | %27s | %27s | %27s | %5s %8s\n", "strategy",
            "warm memory/s", "warm disk/s", "cold/s", "stored MiB", "mem%", "time");
    for (uint32_t i = 0; i < r->count; i++) {
        const presto_profile_strategy_t *s = &r->strategies[i];
        if (!s->verified) {
            if (s->verify_note[0] && strncmp(s->verify_note, "not among", 9) != 0)
                fprintf(f, "%-20s   not verified: %s\n", s->name, s->verify_note);
            continue;
        }
        char sec[32], p[32], m[32], q[16];
        fprintf(f, "%-20s", s->name);
        verify_cell(f, k * tier_rate(r, s->epoch_memory_s), s->memory_interval,
                    s->measured_memory_rate, &t, s->name);
        verify_cell(f, k * tier_rate(r, s->epoch_disk_s), s->disk_interval,
                    s->measured_disk_rate, &t, s->name);
        verify_cell(f, k * s->cold_rate, s->cold_interval, s->measured_cold_rate, &t,
                    s->name);
        if (s->split) {
            double x = profile_ratio(s->total_bytes, s->measured_bytes);
            snprintf(p, sizeof(p), "%.1f", s->total_bytes / (1 << 20));
            snprintf(m, sizeof(m), "%.1f", s->measured_bytes / (1 << 20));
            fmt_ratio(q, sizeof(q), x);
            tally_ratio(&t, x, s->name);
        } else {
            snprintf(p, sizeof(p), "-");
            snprintf(m, sizeof(m), "-");
            snprintf(q, sizeof(q), "-");
        }
        profile_fmt_seconds(sec, sizeof(sec), s->verify_seconds);
        fprintf(f, " | %12s %7s %6s | %4.0f%% %8s%s%s\n", p, m, q,
                s->measured_memory_fraction * 100, sec, s->verify_note[0] ? "  " : "",
                s->verify_note);
    }
    if (t.worst_name)
        fprintf(f, "\nworst ratio: %.2fx (%s)\n", t.worst, t.worst_name);
    if (t.rates)
        fprintf(f, "measured inside the predicted +-interval: %u of %u rates\n", t.inside,
                t.rates);
    return finish(f);
}

/* ---- CSV ---- */

static void csv_str(FILE *f, const char *s)
{
    putc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            putc('"', f);
        putc(*s, f);
    }
    putc('"', f);
}

int profile_report_csv(FILE *f, const presto_profile_result_t *r)
{
    fputs("rank,winner,strategy,split,last_step,zstd_level,samples,failed,"
          "offline_s_per_sample,stored_bytes_per_sample,raw_bytes_per_sample,"
          "memory_samples_per_s_measured,disk_samples_per_s_measured,"
          "memory_cpu_s_per_sample,disk_cpu_s_per_sample,memory_samples_per_s,"
          "disk_samples_per_s,total_offline_s,total_bytes,memory_fraction,fits_memory,"
          "fits_disk,feasible,epoch_memory_s,epoch_disk_s,expected_samples_per_s,"
          "expected_epoch_s,score,cold_samples_per_s,memory_spread,disk_spread,"
          "cold_spread,memory_interval,disk_interval,cold_interval", f);
    if (r->verify)
        fputs(",verified,measured_cold_samples_per_s,measured_memory_samples_per_s,"
              "measured_disk_samples_per_s,measured_memory_fraction,measured_bytes,"
              "verify_s,verify_note", f);
    fputc('\n', f);
    for (uint32_t i = 0; i < r->count; i++) {
        const presto_profile_strategy_t *s = &r->strategies[i];
        fprintf(f, "%u,%d,", s->rank, i == r->winner);
        csv_str(f, s->name);
        fprintf(f, ",%u,", s->split);
        csv_str(f, s->last_step);
        fprintf(f, ",%d,%u,%u,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,"
                   "%d,%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g",
                s->zstd_level, s->samples, s->failed, s->offline_s, s->stored_bytes,
                s->raw_bytes, s->memory_rate, s->disk_rate, s->memory_cpu_s, s->disk_cpu_s,
                tier_rate(r, s->epoch_memory_s), tier_rate(r, s->epoch_disk_s),
                s->total_offline_s, s->total_bytes, s->memory_fraction, s->fits_memory,
                s->fits_disk, s->feasible, s->epoch_memory_s, s->epoch_disk_s,
                s->expected_rate, s->expected_epoch_s, s->score, s->cold_rate,
                s->memory_spread, s->disk_spread, s->cold_spread, s->memory_interval,
                s->disk_interval, s->cold_interval);
        if (r->verify) {
            fprintf(f, ",%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,", s->verified,
                    s->measured_cold_rate, s->measured_memory_rate, s->measured_disk_rate,
                    s->measured_memory_fraction, s->measured_bytes, s->verify_seconds);
            csv_str(f, s->verify_note);
        }
        fputc('\n', f);
    }
    return finish(f);
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s)
{
    putc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            putc(c, f);
    }
    putc('"', f);
}

static void json_num(FILE *f, const char *key, double v, int last)
{
    fprintf(f, "      \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
    fputs(last ? "\n" : ",\n", f);
}

int profile_report_json(FILE *f, const presto_profile_result_t *r)
{
    fputs("{\n  \"dataset\": ", f);
    json_str(f, r->dataset);
    fprintf(f, ",\n  \"samples\": %llu,\n  \"sample_size\": %u,\n  \"workers\": %u,\n"
               "  \"profile_workers\": %u,\n  \"memory_budget\": %llu,\n"
               "  \"disk_budget\": %llu,\n  \"weights\": {\"throughput\": %g, "
               "\"offline\": %g, \"storage\": %g},\n  \"seconds\": %.3f,\n"
               "  \"winner\": %u,\n  \"winner_name\": ",
            (unsigned long long)r->samples, r->sample_size, r->workers, r->profile_workers,
            (unsigned long long)r->memory_budget, (unsigned long long)r->disk_budget,
            r->w_throughput, r->w_offline, r->w_storage, r->seconds, r->winner);
    json_str(f, r->count ? r->strategies[r->winner].name : "");
    fputs(",\n  \"applied\": ", f);
    json_str(f, applied_name(r->applied));
    fprintf(f, ",\n  \"disk\": {\"read_bytes_per_s\": %.0f, \"write_bytes_per_s\": %.0f, "
               "\"probe_bytes\": %.0f, \"probe_depth\": %u, \"writeback_bytes_per_s\": %.0f, "
               "\"source_s_per_sample\": %.9f, \"admit_bytes_per_s\": %.0f}",
            r->disk_read_bw, r->disk_write_bw, r->disk_probe_bytes, r->disk_probe_depth,
            r->writeback_bw, r->source_s_per_sample, r->admit_bw);
    fputs(",\n  \"strategies\": [\n", f);
    for (uint32_t i = 0; i < r->count; i++) {
        const presto_profile_strategy_t *s = &r->strategies[i];
        fputs("    {\n      \"name\": ", f);
        json_str(f, s->name);
        fprintf(f, ",\n      \"rank\": %u,\n      \"winner\": %s,\n      \"split\": %u,\n"
                   "      \"last_step\": ",
                s->rank, i == r->winner ? "true" : "false", s->split);
        json_str(f, s->last_step);
        fprintf(f, ",\n      \"encoding\": ");
        char enc[16];
        snprintf(enc, sizeof(enc), s->zstd_level ? "zstd:%d" : "raw", s->zstd_level);
        json_str(f, enc);
        fprintf(f, ",\n      \"zstd_level\": %d,\n      \"samples\": %u,\n"
                   "      \"failed\": %u,\n      \"fits_memory\": %s,\n"
                   "      \"fits_disk\": %s,\n      \"feasible\": %s,\n",
                s->zstd_level, s->samples, s->failed, s->fits_memory ? "true" : "false",
                s->fits_disk ? "true" : "false", s->feasible ? "true" : "false");
        json_num(f, "offline_s_per_sample", s->offline_s, 0);
        json_num(f, "stored_bytes_per_sample", s->stored_bytes, 0);
        json_num(f, "raw_bytes_per_sample", s->raw_bytes, 0);
        json_num(f, "memory_samples_per_s_measured", s->memory_rate, 0);
        json_num(f, "disk_samples_per_s_measured", s->disk_rate, 0);
        json_num(f, "memory_cpu_s_per_sample", s->memory_cpu_s, 0);
        json_num(f, "disk_cpu_s_per_sample", s->disk_cpu_s, 0);
        json_num(f, "memory_samples_per_s", tier_rate(r, s->epoch_memory_s), 0);
        json_num(f, "disk_samples_per_s", tier_rate(r, s->epoch_disk_s), 0);
        json_num(f, "total_offline_s", s->total_offline_s, 0);
        json_num(f, "total_bytes", s->total_bytes, 0);
        json_num(f, "memory_fraction", s->memory_fraction, 0);
        json_num(f, "epoch_memory_s", s->epoch_memory_s, 0);
        json_num(f, "epoch_disk_s", s->epoch_disk_s, 0);
        json_num(f, "expected_samples_per_s", s->expected_rate, 0);
        json_num(f, "cold_samples_per_s", s->cold_rate, 0);
        json_num(f, "memory_spread", s->memory_spread, 0);
        json_num(f, "disk_spread", s->disk_spread, 0);
        json_num(f, "cold_spread", s->cold_spread, 0);
        json_num(f, "memory_interval", s->memory_interval, 0);
        json_num(f, "disk_interval", s->disk_interval, 0);
        json_num(f, "cold_interval", s->cold_interval, 0);
        json_num(f, "expected_epoch_s", s->expected_epoch_s, 0);
        json_num(f, "score", s->score, !r->verify);
        if (r->verify) {
            fprintf(f, "      \"verified\": %s,\n      \"verify_note\": ",
                    s->verified ? "true" : "false");
            json_str(f, s->verify_note);
            fputs(",\n", f);
            json_num(f, "measured_cold_samples_per_s", s->measured_cold_rate, 0);
            json_num(f, "measured_memory_samples_per_s", s->measured_memory_rate, 0);
            json_num(f, "measured_disk_samples_per_s", s->measured_disk_rate, 0);
            json_num(f, "measured_memory_fraction", s->measured_memory_fraction, 0);
            json_num(f, "measured_bytes", s->measured_bytes, 0);
            json_num(f, "verify_s", s->verify_seconds, 1);
        }
        fputs(i + 1 < r->count ? "    },\n" : "    }\n", f);
    }
    fputs("  ]\n}\n", f);
    return finish(f);
}

/* ---- SVG ---- */

#define SVG_W 960
#define SVG_H 600
#define PLOT_L 100
#define PLOT_R 200 /* room for the legend */
#define PLOT_T 70
#define PLOT_B 70
#define MAX_LABELS 128

static void xml_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20)
                putc(*s, f);
        }
    }
}

/* A "nice" step (1, 2 or 5 x 10^k) for about n ticks up to max. */
static double nice_step(double max, int n)
{
    if (!(max > 0))
        return 1;
    double raw = max / n, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static const char *enc_color(const presto_profile_strategy_t *s)
{
    if (s->split == 0)
        return "#7f7f7f";
    switch (s->zstd_level) {
    case 0: return "#1f77b4";
    case 1: return "#2ca02c";
    case 3: return "#ff7f0e";
    case 9: return "#9467bd";
    default: return "#8c564b";
    }
}

struct box {
    double x, y, w, h;
};

/* The throughput axis: linear from 0, or logarithmic over whole decades
 * when the rates span more than LOG_SPAN (everything online is often 100
 * times slower than the best). */
#define LOG_SPAN 20.0
struct yaxis {
    int log;
    double lo, hi, step; /* log: decades lo..hi (powers of 10) */
    double top, h;       /* pixels */
};

static double ypix(const struct yaxis *a, double v)
{
    double f;
    if (a->log)
        f = v > 0 ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : 0;
    else
        f = v / a->hi;
    return a->top + a->h - fmin(fmax(f, 0), 1) * a->h;
}

static int overlaps(const struct box *b, const struct box *placed, int n)
{
    for (int i = 0; i < n; i++)
        if (b->x < placed[i].x + placed[i].w && placed[i].x < b->x + b->w &&
            b->y < placed[i].y + placed[i].h && placed[i].y < b->y + b->h)
            return 1;
    return 0;
}

int profile_report_svg(FILE *f, const presto_profile_result_t *r)
{
    const double pw = SVG_W - PLOT_L - PLOT_R, ph = SVG_H - PLOT_T - PLOT_B;
    double xmax = 0, ymax = 0, ymin = INFINITY;
    for (uint32_t i = 0; i < r->count; i++) {
        xmax = fmax(xmax, r->strategies[i].total_bytes);
        ymax = fmax(ymax, r->strategies[i].expected_rate);
        if (r->strategies[i].expected_rate > 0)
            ymin = fmin(ymin, r->strategies[i].expected_rate);
    }
    /* The disk budget line, when it is within reach of the points. */
    int budget_line = r->disk_budget && (double)r->disk_budget <= 1.5 * xmax;
    if (budget_line)
        xmax = fmax(xmax, (double)r->disk_budget);
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double div = 1;
    while (xmax / div >= 1024 * 4 && u < 4) {
        div *= 1024;
        u++;
    }
    double xs = nice_step(xmax / div, 6);
    double xtop = xs * ceil(xmax / div / xs);
    if (xtop <= 0)
        xtop = xs;
    struct yaxis ya = {0, 0, 0, 0, PLOT_T, ph};
    if (ymax > 0 && ymin < INFINITY && ymax / ymin > LOG_SPAN) {
        ya.log = 1;
        ya.lo = pow(10, floor(log10(ymin)));
        ya.hi = pow(10, ceil(log10(ymax)));
    } else {
        ya.step = nice_step(ymax, 6);
        ya.hi = ya.step * ceil(ymax / ya.step);
        if (ya.hi <= 0)
            ya.hi = ya.step;
    }
#define X(v) (PLOT_L + (v) / div / xtop * pw)
#define Y(v) ypix(&ya, (v))

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fputs("<title>presto profile of ", f);
    xml_str(f, r->dataset);
    fputs("</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"17\" font-weight=\"bold\">"
               "presto profile of dataset ", PLOT_L);
    xml_str(f, r->dataset);
    fputs(": expected throughput against storage</text>\n", f);
    char mem[32], disk[32];
    profile_fmt_bytes(mem, sizeof(mem), (double)r->memory_budget);
    if (r->disk_budget)
        profile_fmt_bytes(disk, sizeof(disk), (double)r->disk_budget);
    else
        snprintf(disk, sizeof(disk), "none");
    fprintf(f, "<text x=\"%d\" y=\"50\" font-size=\"12\" fill=\"#444\">%llu samples, %u "
               "profiled on %u of %u workers in %.1f s; memory budget %s, disk budget %s; "
               "winner: ",
            PLOT_L, (unsigned long long)r->samples, r->sample_size, r->profile_workers,
            r->workers, r->seconds, mem, disk);
    if (r->count)
        xml_str(f, r->strategies[r->winner].name);
    fputs("</text>\n", f);

    /* Grid, ticks and axes. */
    fputs("<g font-size=\"11\" fill=\"#333\">\n", f);
    for (double v = 0; v <= xtop + xs / 2; v += xs) {
        double x = PLOT_L + v / xtop * pw;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                x, PLOT_T, x, PLOT_T + ph, x, PLOT_T + ph + 16, v);
    }
    for (double d = ya.log ? ya.lo : 0; d <= ya.hi * 1.0001;
         d = ya.log ? d * 10 : d + ya.step) {
        /* log: 1, 2, 5 in each decade; linear: the steps */
        for (int m = 0; m < (ya.log ? 3 : 1); m++) {
            double v = ya.log ? d * (double[]){1, 2, 5}[m] : d;
            if (v > ya.hi * 1.0001)
                break;
            double y = Y(v);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                       "stroke=\"%s\"/>\n<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">",
                    PLOT_L, y, PLOT_L + pw, y, m ? "#f0f0f0" : "#e5e5e5", PLOT_L - 6, y + 4);
            fprintf(f, v >= 1 ? "%.0f</text>\n" : "%g</text>\n", v);
        }
        if (!ya.log && ya.step <= 0)
            break;
    }
    fputs("</g>\n", f);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n",
            PLOT_L, PLOT_T + ph, PLOT_L + pw, PLOT_T + ph, PLOT_L, PLOT_T, PLOT_L, PLOT_T + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\">"
               "storage of the whole dataset in the disk tier (%s)</text>\n",
            PLOT_L + pw / 2, SVG_H - 22, units[u]);
    fprintf(f, "<text x=\"22\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\" "
               "transform=\"rotate(-90 22 %.1f)\">expected throughput (samples/s, %u "
               "workers%s)</text>\n",
            PLOT_T + ph / 2, PLOT_T + ph / 2, r->workers, ya.log ? ", log scale" : "");
    if (budget_line) {
        double x = X((double)r->disk_budget);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                   "stroke-dasharray=\"6 4\"/>\n<text x=\"%.1f\" y=\"%d\" font-size=\"11\" "
                   "fill=\"#d62728\" text-anchor=\"end\">disk budget %s</text>\n",
                x, PLOT_T, x, PLOT_T + ph, x - 4, PLOT_T + 12, disk);
    }

    /* Points, then labels placed greedily where they overlap no point and
     * no label placed before. */
    struct box placed[2 * MAX_LABELS];
    int nplaced = 0;
    for (uint32_t i = 0; i < r->count && nplaced < MAX_LABELS; i++) {
        double x = X(r->strategies[i].total_bytes), y = Y(r->strategies[i].expected_rate);
        placed[nplaced++] = (struct box){x - 7, y - 7, 14, 14};
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < r->count; k++) {
            /* The winner last, on top. */
            uint32_t i = k == r->count - 1 ? r->winner : k >= r->winner ? k + 1 : k;
            const presto_profile_strategy_t *s = &r->strategies[i];
            double x = X(s->total_bytes), y = Y(s->expected_rate);
            int win = i == r->winner;
            if (pass == 0) {
                if (win)
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"11\" fill=\"none\" "
                               "stroke=\"#d62728\" stroke-width=\"2.5\"/>\n", x, y);
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\" "
                           "stroke=\"%s\" stroke-width=\"1.5\"><title>",
                        x, y, win ? 7 : 5, s->feasible ? enc_color(s) : "white", enc_color(s));
                xml_str(f, s->name);
                fprintf(f, ": %.0f samples/s, %.0f bytes/sample stored%s</title></circle>\n",
                        s->expected_rate, s->stored_bytes,
                        s->feasible ? "" : " (over the disk budget)");
                continue;
            }
            char text[96];
            snprintf(text, sizeof(text), "%s%s", s->name, win ? " (winner)" : "");
            double w = 6.4 * (double)strlen(text);
            /* Right, left, then stepping up and down on either side. */
            struct box b = {x + 10, y - 6, w, 12}, first = b;
            for (int t = 0; t < 26; t++) {
                int right = t % 2 == 0, step = t / 2;
                double dy = step == 0 ? 0 : (step % 2 ? -1 : 1) * 13.0 * ((step + 1) / 2);
                b = (struct box){right ? x + 10 : x - 10 - w, y - 6 + dy, w, 12};
                if (b.x < PLOT_L + 2 || b.x + b.w > PLOT_L + pw + 60 || b.y < PLOT_T - 14)
                    continue;
                if (!overlaps(&b, placed, nplaced))
                    break;
                b = first;
            }
            if (nplaced < 2 * MAX_LABELS)
                placed[nplaced++] = b;
            if (fabs(b.y + 6 - y) > 9) /* moved away: a leader to its point */
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#aaa\" stroke-width=\"0.8\"/>\n",
                        x, y, b.x < x ? b.x + b.w : b.x, b.y + 6);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\"%s>", b.x, b.y + 10,
                    win ? " font-weight=\"bold\" fill=\"#d62728\"" : " fill=\"#222\"");
            xml_str(f, text);
            fputs("</text>\n", f);
        }
    }

    /* Legend. */
    static const struct {
        const char *label;
        presto_profile_strategy_t probe;
    } legend[] = {
        {"none (everything online)", {.split = 0}},
        {"raw", {.split = 1, .zstd_level = 0}},
        {"zstd:1", {.split = 1, .zstd_level = 1}},
        {"zstd:3", {.split = 1, .zstd_level = 3}},
        {"zstd:9", {.split = 1, .zstd_level = 9}},
    };
    double lx = SVG_W - PLOT_R + 20, ly = PLOT_T + 10;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">"
               "encoding</text>\n", lx, ly);
    for (size_t i = 0; i < sizeof(legend) / sizeof(legend[0]); i++) {
        ly += 20;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                lx + 5, ly - 4, enc_color(&legend[i].probe), lx + 16, ly, legend[i].label);
    }
    ly += 20;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"#1f77b4\" "
               "stroke-width=\"1.5\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">"
               "over the disk budget</text>\n", lx + 5, ly - 4, lx + 16, ly);
    ly += 20;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"#d62728\" "
               "stroke-width=\"2.5\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">"
               "winner</text>\n", lx + 5, ly - 4, lx + 16, ly);
    ly += 28;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">Labels: last "
               "offline step /</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
               "fill=\"#555\">disk encoding.</text>\n", lx, ly, lx, ly + 13);
    fputs("</svg>\n", f);
#undef X
#undef Y
    return finish(f);
}
