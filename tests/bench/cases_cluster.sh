#!/usr/bin/env bash
# shellcheck shell=bash
# `make bench` cases for the cluster tier (issue 19), sourced by bench.sh (which provides
# BUILD, PYTHON, BENCH_DATA and bench_case):
#
#   bench_cluster_cases [DATA_DIR]      (default: $BENCH_DATA)
#
# cluster              three prestod "nodes" (memory a third of the dataset each, no disk
#                      tier), a world=6 job (two ranks per node, all at once): epochs 1
#                      and 2 (after epoch 0 filled the tiers), aggregate samples/s with
#                      two memcached servers as the cluster tier, against the same three
#                      daemons without it measured in the same run. Target 3x.
# cluster-second-node  two nodes sharing one memcached: the second node's epoch 0 (all
#                      from the cluster) against the first's (cold, decoding). No target.
# tests/bench/cluster_bench.py does the work (see its help); it prints the cluster tier's
# bytes per sample and what a 25 Gbit/s network would allow per node.
#
# Run alone (`make bench-cluster`, or executed directly with BUILD and PYTHON set) it
# makes a data set of $BENCH_CLUSTER_SAMPLES JPEGs (default 1200) and prints the figures.

bench_cluster_cases() {
    local data=${1:-$BENCH_DATA} runs line name
    if [[ ! -x /usr/bin/memcached ]]; then
        echo "== cluster: skipped (no /usr/bin/memcached)"
        return 0
    fi
    runs=$("$PYTHON" tests/bench/cluster_bench.py --build "$BUILD" --data "$data") \
        || { echo "error: cluster_bench.py failed" >&2; return 1; }
    local cluster=() pair=()
    while IFS= read -r line; do
        name=${line%% *}
        case $name in
        cluster) cluster+=("${line#* }") ;;
        cluster-second-node) pair+=("${line#* }") ;;
        esac
    done <<<"$runs"
    bench_case cluster 3 "${cluster[@]}"
    bench_case cluster-second-node 0 "${pair[@]}"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    cd "$(dirname "${BASH_SOURCE[0]}")/../.."
    BUILD=${BUILD:-build}
    PYTHON=${PYTHON:-/usr/bin/python3}
    data="$BUILD/bench-cluster-data"
    "$PYTHON" tests/tools/mkdataset.py --out "$data" --count "${BENCH_CLUSTER_SAMPLES:-1200}" \
        --classes 10
    echo "== reproduce: make bench-cluster (BENCH_CLUSTER_SAMPLES=${BENCH_CLUSTER_SAMPLES:-1200})"
    "$PYTHON" tests/bench/cluster_bench.py --build "$BUILD" --data "$data"
fi
