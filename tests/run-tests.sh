#!/usr/bin/env bash
# Runs every test program in $BUILD/tests/ (sorted), each under a timeout, and
# prints one summary line. Exit status 77 from a test means "skipped" (the
# liburing convention). Exits 1 when a test failed or when none ran.
#
# Environment: BUILD (default build), PYTHON (default /usr/bin/python3),
# PRESTO_TEST_TIMEOUT (seconds per test, default 300; 600 under valgrind
# (PRESTO_VALGRIND=1) or ThreadSanitizer (a build/thread)), PRESTO_PHOTOS,
# PRESTO_TESTS (optional space-separated names to run instead of all).
#
# Streams use shared memory by default; the suites that pull epochs
# (PRESTO_TRANSPORT_TESTS) run a second time as NAME[socket] with
# PRESTO_TRANSPORT=socket, so both transports pass the same tests.
set -u

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in
/*) ;;
*) BUILD=$SRC/$BUILD ;;
esac
# valgrind and TSan make the long tests (test_slowfs: 215 s of 300 under
# valgrind on an idle 2-core machine) several times slower; a loaded machine
# then timed them out while they were still passing step by step.
TIMEOUT=300
if [ "${PRESTO_VALGRIND:-0}" = 1 ] || [ "$(basename "$BUILD")" = thread ]; then
    TIMEOUT=600
fi
TIMEOUT=${PRESTO_TEST_TIMEOUT:-$TIMEOUT}

export PRESTO_BUILD=$BUILD
export PYTHON=${PYTHON:-/usr/bin/python3}
export PRESTO_SRC=$SRC
export PRESTO_PHOTOS=${PRESTO_PHOTOS:-$SRC/../shared/photos}
export CK_FORK=yes
export PRESTO_EXPECT_WATCHDOG=${PRESTO_EXPECT_WATCHDOG:-1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ ! -d "$BUILD/tests" ]; then
    echo "run-tests.sh: no $BUILD/tests directory (run 'make tests' first)" >&2
    echo "0 passed, 0 failed, 0 skipped"
    exit 1
fi

tests=()
if [ -n "${PRESTO_TESTS:-}" ]; then
    for name in $PRESTO_TESTS; do
        tests+=("$BUILD/tests/$name")
    done
else
    while IFS= read -r -d '' t; do
        tests+=("$t")
    done < <(find "$BUILD/tests" -maxdepth 1 -type f -perm -u+x -print0 | sort -z)
fi

passed=0 failed=0 skipped=0
failed_names=()
out=$(mktemp "${TMPDIR:-/tmp}/presto-test-out.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT

TRANSPORT_TESTS=${PRESTO_TRANSPORT_TESTS-test_e2e test_badsamples test_python}
runs=()
for t in "${tests[@]}"; do
    runs+=("$t")
    for v in $TRANSPORT_TESTS; do
        [ "$(basename "$t")" = "$v" ] && [ -z "${PRESTO_TRANSPORT:-}" ] && runs+=("$t[socket]")
    done
done

# A test killed by the timeout cannot unmount what it mounted: the FUSE
# mounts (slowfs) under the temporary directories it made are taken down
# here, lazily, so the next test and the machine do not inherit them.
tmp_dirs() { find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'presto-test-*' -type d 2>/dev/null | sort; }
unmount_left() {
    local before=$1 d m
    for d in $(comm -13 <(printf '%s\n' "$before") <(tmp_dirs)); do
        awk -v d="$d/" '$3 ~ /^fuse/ && index($2, d) == 1 { print $2 }' /proc/mounts |
            sort -r | while read -r m; do
                echo "run-tests.sh: unmounting $m, left by a killed test"
                fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
            done
    done
}

for run in "${runs[@]}"; do
    t=${run%\[socket\]}
    transport=${PRESTO_TRANSPORT:-}
    [ "$t" != "$run" ] && transport=socket
    name=$(basename "$run")
    start=$(date +%s.%N)
    if [ -x "$t" ]; then
        before=$(tmp_dirs)
        PRESTO_TRANSPORT=$transport timeout -k 10 "$TIMEOUT" "$t" >"$out" 2>&1
        rc=$?
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            unmount_left "$before" >>"$out"
        fi
    else
        echo "$t: not an executable" >"$out"
        rc=127
    fi
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    case $rc in
    0)
        passed=$((passed + 1))
        printf '%-32s PASS  %6ss\n' "$name" "$secs"
        ;;
    77)
        skipped=$((skipped + 1))
        printf '%-32s SKIP  %6ss  %s\n' "$name" "$secs" "$(tail -n 1 "$out")"
        ;;
    *)
        failed=$((failed + 1))
        failed_names+=("$name")
        why="exit $rc"
        [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${TIMEOUT}s"
        printf '%-32s FAIL  %6ss  (%s)\n' "$name" "$secs" "$why"
        echo "---- output of $name ----"
        cat "$out"
        echo "---- end of $name ----"
        ;;
    esac
done

[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$failed" -gt 0 ] || [ ${#tests[@]} -eq 0 ]; then
    exit 1
fi
exit 0
