/*
 * Included first by the step files whose floating-point code must round as
 * Pillow's and torch's C code rounds: one rounding per operation, no fused
 * multiply-adds (a build for a CPU with FMA would otherwise contract
 * a * b + c and change pixels). Pillow and torch are built for baseline
 * x86-64 by Debian, which has no FMA, and so never fuse.
 */
#ifndef PRESTO_STEPS_EXACT_H
#define PRESTO_STEPS_EXACT_H

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif
