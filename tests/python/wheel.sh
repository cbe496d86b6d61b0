#!/usr/bin/env bash
# The wheel scripts/build-wheel makes installs with pip into a fresh virtual
# environment (no index, no network) and runs a job there, outside the
# source and build trees: the package finds its own libjobflow.
# Usage: wheel.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -z "${JOBFLOW_SANITIZER:-}" ] || { echo "SKIP: a $JOBFLOW_SANITIZER build: a wheel of instrumented libraries is no" \
  "wheel to test (the plain configuration runs it)"; exit 77; }
command -v patchelf >/dev/null || { echo "SKIP: patchelf missing (apt-get install patchelf)"; exit 77; }
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "SKIP: python3-venv missing"; exit 77; }

wheel=$("$src/scripts/build-wheel" "$build")
[ -f "$wheel" ] || fail "build-wheel printed '$wheel', not a file"
cp "$wheel" "$work/"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"   # numpy from Debian
"$work/venv/bin/pip" install --quiet --no-index --no-deps --disable-pip-version-check "$work/$(basename "$wheel")"
"$work/venv/bin/pip" show jobflow > "$work/show.txt" 2>&1 || fail "pip does not list jobflow: $(cat "$work/show.txt")"
grep -q "^Version: " "$work/show.txt" || fail "pip show: $(cat "$work/show.txt")"
cd "$work"
out=$(env -u PYTHONPATH -u LD_LIBRARY_PATH "$work/venv/bin/python" - <<'PY'
import numpy as np
import jobflow as flow
import jobflow.typing as tp

assert flow.__file__.startswith(__import__("sys").prefix), flow.__file__

@flow.global_function(type="predict")
def double(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
    return flow.math.add(x, x)

y = double(np.arange(6, dtype=np.float32).reshape(2, 3))
assert y.shape == (2, 3) and y.dtype == np.float32, (y.shape, y.dtype)
assert (y == 2 * np.arange(6, dtype=np.float32).reshape(2, 3)).all(), y
print("ok", y.ravel().tolist())
PY
) || fail "the installed package does not run: $out"
[ "$out" = "ok [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]" ] || fail "unexpected output: $out"
echo "wheel $(basename "$wheel") installs and runs: $out"
