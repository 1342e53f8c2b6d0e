/*
 * prestoctl profile's outputs from a presto_profile_result_t: the table on
 * the terminal, CSV, JSON, and an SVG chart (expected throughput against
 * storage per strategy, as PRESTO plots them) that a browser opens as is.
 * Each writer returns 0, or -1 when writing failed (errno says why).
 */
#ifndef PRESTO_PROFILE_REPORT_H
#define PRESTO_PROFILE_REPORT_H

#include <stdio.h>

#include "presto.h"

/* Sizes and counts for people: "1.5 GiB", "312 KiB", "12.3 s", "2:03:04". */
void profile_fmt_bytes(char *buf, size_t len, double bytes);
void profile_fmt_seconds(char *buf, size_t len, double secs);
/* Per sample: "3.64 ms", "33.5 us" (never a rounded 0); "-" for none. */
void profile_fmt_per_sample(char *buf, size_t len, double secs);
/* Samples/s with the spread of its repetitions: "41.2k +-6%". */
void profile_fmt_rate(char *buf, size_t len, double rate, double spread);

int profile_report_table(FILE *f, const presto_profile_result_t *r);
/* The verification's table (opts.verify): predicted against measured per
 * strategy verified, with their ratios and the worst of them. */
int profile_report_verify(FILE *f, const presto_profile_result_t *r);
/* max(predicted/measured, measured/predicted); INFINITY when one is missing. */
double profile_ratio(double predicted, double measured);
/* 1 when measured lies in predicted +- interval (0.45: +-45%). */
int profile_inside(double predicted, double interval, double measured);
int profile_report_csv(FILE *f, const presto_profile_result_t *r);
int profile_report_json(FILE *f, const presto_profile_result_t *r);
int profile_report_svg(FILE *f, const presto_profile_result_t *r);

#endif
