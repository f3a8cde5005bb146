#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the SGLang-Omni contract tier: the published
# sglang-omni==0.1.9 wheel's HTTP layer, importable and servable on a CPU-only machine.
#
#   bash scripts/contract-venv-sglang.sh    # prints the venv's python on its last line
#
# Where: ${THETALKER_SGLANG_VENV:-$HOME/.cache/thetalker/sglang-omni-0.1.9}, outside the clone
# (about 6 GB, about 3 to 5 minutes to build). A finished venv carries a marker file and is
# reused when its import check still passes. Exit status: 0 ready; 3 cannot be made here (too
# little disk, no registry, no Python 3.11 or 3.12): the reason is printed, and the tier's
# tests skip with it (under CI=true, .ci/run fails instead).
#
# Why --no-deps: `pip install sglang-omni==0.1.9` cannot resolve from PyPI alone (sglang 0.5.22
# pins cuda-tile==1.6.0rc5, a stub sdist that downloads its wheel from pypi.nvidia.com). The
# HTTP layer needs only the two wheels themselves, torch (imported by sglang_omni/utils/audio.py
# and, through sglang.srt, by platforms/) and the list below (recipe: sglang-omni.md).
set -euo pipefail

VENV="${THETALKER_SGLANG_VENV:-$HOME/.cache/thetalker/sglang-omni-0.1.9}"
MARKER="$VENV/.thetalker-contract-ready"
REASON_FILE="$(dirname "$VENV")/.$(basename "$VENV").unavailable"
NEED_GB="${THETALKER_SGLANG_NEED_GB:-8}"  # free space the build needs, in GB
PINS="sglang-omni==0.1.9 sglang==0.5.22"
TORCH="torch==2.14.1 torchaudio==2.11.0 torchvision==0.29.1"
DEPS=(transformers==5.19.0 sentencepiece==0.2.1 fastapi uvicorn httpx "pydantic>=2" pyzmq
    msgpack msgspec "numpy<2.5" PyYAML pybase64 xxhash soundfile "av>=16.1"
    "huggingface-hub>=0.36" safetensors python-multipart orjson psutil requests pillow IPython
    aiohttp typer websockets dill)

log() { echo "contract-venv-sglang: $*" >&2; }

unavailable() {
    # Written next to the venv so the test tier can skip with the same reason.
    mkdir -p "$(dirname "$REASON_FILE")"
    echo "$*" >"$REASON_FILE"
    log "SKIP: $*"
    exit 3
}

import_check() {
    "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import sglang_omni.serve.launcher  # noqa: F401  (run_server and the runner seam)
import sglang_omni.serve.openai_api  # noqa: F401  (the routes)
from sglang_omni.serve.protocol import CreateSpeechRequest  # noqa: F401
import sglang_omni.models.qwen3_tts.config  # noqa: F401
assert md.version("sglang-omni") == "0.1.9", md.version("sglang-omni")
PY
}

if [ -f "$MARKER" ] && import_check >/dev/null 2>&1; then
    rm -f "$REASON_FILE"
    log "reusing $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

# sglang-omni requires Python >=3.11,<3.13.
PYTHON="${THETALKER_SGLANG_PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3.12 python3; do
        if command -v "$candidate" >/dev/null &&
            "$candidate" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 13)))'; then
            PYTHON="$candidate"
            break
        fi
    done
fi
[ -n "$PYTHON" ] || unavailable "no Python 3.11 or 3.12 on PATH (sglang-omni 0.1.9 needs >=3.11,<3.13)"

mkdir -p "$(dirname "$VENV")"
free_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')
if [ "$free_kb" -lt $((NEED_GB * 1024 * 1024)) ] && [ ! -d "$VENV" ]; then
    unavailable "only $((free_kb / 1024 / 1024)) GB free under $(dirname "$VENV"); the sglang-omni 0.1.9 venv needs about $NEED_GB GB"
fi

log "building $VENV ($PINS --no-deps with $TORCH; about 4 min and 6 GB)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --default-timeout 180)
# --isolated: ignore this machine's pip configuration (a local folder may offer a CPU torch
# build that PyPI's torchaudio and torchvision builds cannot load beside).
ISOLATED=(--isolated --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}")

if ! "${PIP[@]}" "${ISOLATED[@]}" install -q --upgrade pip; then
    rm -rf "$VENV"
    unavailable "cannot reach the package registry (pip install pip failed)"
fi
if ! "${PIP[@]}" "${ISOLATED[@]}" install -q --no-deps $PINS; then
    rm -rf "$VENV"
    unavailable "pip could not install $PINS --no-deps from PyPI (see the pip output above)"
fi
if ! "${PIP[@]}" "${ISOLATED[@]}" install -q $TORCH "${DEPS[@]}"; then
    rm -rf "$VENV"
    unavailable "pip could not install $TORCH and the HTTP layer's dependencies from PyPI"
fi

if ! import_check; then
    unavailable "the venv was built but sglang_omni does not import (see the traceback above)"
fi
date -u +%FT%TZ >"$MARKER"
rm -f "$REASON_FILE"
log "ready: $VENV ($(du -sh "$VENV" | cut -f1))"
echo "$VENV/bin/python"
