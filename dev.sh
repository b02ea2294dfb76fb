#!/usr/bin/env bash
# Set-up and everyday commands. Each creates (or reuses) the virtual
# environment in .venv and installs what it needs, pinned by constraints.txt.
#
#   bash dev.sh demo    run the main job on built-in sample data (no download)
#   bash dev.sh test    run the fast test suite, slow tests aside (extra args go to pytest)
#   bash dev.sh test --all   the whole suite, slow tests too (what CI runs)
#   bash dev.sh bench   run the benchmarks against tf.data and the tfrecord package
set -euo pipefail
cd "$(dirname "$0")"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

pip_quiet() {  # pip -q, less one note a user cannot act on
    # a pip configuration with extra file:// indexes (local mirrors) prints "Location ... is ignored"
    # for every package a mirror lacks; pip still finds it on the other indexes
    "$VENV/bin/python" -m pip -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

ensure_env() {  # $1: the extra to install ("" for the package alone)
    local extra="$1" stamp sig
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
            || { echo "dev.sh: needs Python >= 3.10 (set PYTHON=...)" >&2; exit 1; }
        "$PYTHON" -m venv "$VENV"
    fi
    stamp="$VENV/.installed${extra:+-$extra}"
    # every C source at any depth, with its path: a moved helper must be built again where it now lives
    sig="$( { cat pyproject.toml constraints.txt setup.py
              find tfrecord_torch -name '*.c' | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done
            } | sha256sum | cut -c1-16)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$sig" ]; then
        echo "dev.sh: installing into $VENV (first run downloads torch: a few GB)..." >&2
        pip_quiet install --upgrade pip
        # setuptools' notice that a folder named like the package may shadow it: none here
        PYTHONWARNINGS="ignore:Editable installation" \
            pip_quiet install -c constraints.txt -e ".${extra:+[$extra]}"
        # the crop-window JPEG decoder is compiled on libjpeg-turbo where its headers are
        "$VENV/bin/python" -c 'import tfrecord_torch.features.images._jpegcrop' 2>/dev/null \
            || echo "dev.sh: no libjpeg headers (apt-get install libjpeg-dev): JPEG crops decode the whole image" >&2
        echo "$sig" > "$stamp"
    fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
    demo)
        ensure_env ""
        exec "$VENV/bin/python" examples/demo.py "$@"
        ;;
    test)
        ensure_env test
        # Each test process rewrites every test module's asserts and compiles the package unless
        # it may keep the result in __pycache__ (gitignored): 10 s of CPU per process each run.
        unset PYTHONDONTWRITEBYTECODE
        if [ "${1:-}" = "--all" ]; then
            shift
            exec "$VENV/bin/python" -m pytest "$@"
        fi
        exec "$VENV/bin/python" -m pytest -m "not slow" "$@"
        ;;
    bench)
        ensure_env test
        exec "$VENV/bin/python" benchmarks/run.py "$@"
        ;;
    *)
        sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
