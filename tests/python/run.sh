#!/usr/bin/env bash
# Runs the Python binding's tests (tests/python/test_*.py, unittest) against
# a real prestod. Exit status: the suite's, or 77 (skip) when $PYTHON cannot
# import numpy or when there are no photos to make the data sets from (no
# *.jpg in $PRESTO_PHOTOS, else ../shared/photos beside the repository, the
# rule of tests/tools/mkdataset.py).
#
# Environment (tests/run-tests.sh sets it): PYTHON (default /usr/bin/python3),
# PRESTO_SRC (the repository; default: found from this script), PRESTO_BUILD
# (default $PRESTO_SRC/build; relative paths are taken from the current
# directory), PRESTO_LIB (default $PRESTO_BUILD/libprestoclient.so.0).
# Works from any directory, and as a symlink or a copy elsewhere when
# PRESTO_SRC is set. Extra arguments go to unittest (e.g. -k zero_copy).
#
# Sanitizer builds: a libprestoclient built with ASan or TSan must have its
# runtime loaded first, so it is preloaded into Python (ASan's leak check off
# there: Python itself leaks by design); prestod and other children get the
# caller's LD_PRELOAD and ASAN_OPTIONS back (see prestotest.py).
set -u

PYTHON=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
if [ -n "${PRESTO_SRC:-}" ]; then
    PRESTO_SRC=$(cd "$PRESTO_SRC" && pwd) || exit 1
elif [ -f "$here/test_binding.py" ]; then
    PRESTO_SRC=$(cd "$here/../.." && pwd)
else
    echo "run.sh: cannot find the tests; set PRESTO_SRC" >&2
    exit 1
fi
tests=$PRESTO_SRC/tests/python
PRESTO_BUILD=${PRESTO_BUILD:-$PRESTO_SRC/build}
PRESTO_BUILD=$(cd "$PRESTO_BUILD" 2>/dev/null && pwd) || {
    echo "run.sh: no build directory ${PRESTO_BUILD} (run make)" >&2
    exit 1
}
PRESTO_LIB=${PRESTO_LIB:-$PRESTO_BUILD/libprestoclient.so.0}
export PYTHON PRESTO_SRC PRESTO_BUILD PRESTO_LIB

if ! "$PYTHON" -c 'import numpy' >/dev/null 2>&1; then
    echo "skip: $PYTHON cannot import numpy (install python3-numpy)"
    exit 77
fi
if [ -n "${PRESTO_PHOTOS:-}" ]; then
    photos=$PRESTO_PHOTOS where="PRESTO_PHOTOS=$PRESTO_PHOTOS"
else
    photos=$PRESTO_SRC/../shared/photos where=$PRESTO_SRC/../shared/photos
fi
if ! compgen -G "$photos/*.jpg" >/dev/null; then
    echo "skip: no *.jpg photos at $where"
    exit 77
fi
for f in "$PRESTO_LIB" "$PRESTO_BUILD/prestod" "$PRESTO_BUILD/prestoctl"; do
    if [ ! -e "$f" ]; then
        echo "run.sh: $f is missing (run make)" >&2
        exit 1
    fi
done

preload=$(ldd "$PRESTO_LIB" 2>/dev/null | awk '/lib(a|t)san\.so/ { print $3; exit }')
# torch throws (and catches) C++ exceptions; ASan's __cxa_throw interceptor
# finds the real one only when libstdc++ is loaded at start-up, so it is
# preloaded right after the sanitizer's runtime (else: "CHECK failed:
# asan_interceptors.cpp ... real___cxa_throw").
if [ -n "$preload" ]; then
    cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 / { print $NF; exit }')
    [ -n "$cxx" ] && [ -e "$cxx" ] && preload="$preload $cxx"
fi
cd "$tests" || exit 1
if [ -n "$preload" ]; then
    export PRESTO_CHILD_LD_PRELOAD=${LD_PRELOAD-} PRESTO_CHILD_ASAN_OPTIONS=${ASAN_OPTIONS-}
    LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        "$PYTHON" -m unittest discover -s "$tests" -t "$tests" -v "$@"
else
    "$PYTHON" -m unittest discover -s "$tests" -t "$tests" -v "$@"
fi
