#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the contract test tier: the published
# vllm==0.30.0 and vllm-omni==0.30.0 wheels, importable on a CPU-only machine.
#
#   bash scripts/contract-venv.sh          # prints the venv's python on its last line
#
# Where: ${THETALKER_CONTRACT_VENV:-$HOME/.cache/thetalker/vllm-omni-0.30.0}, outside the clone
# (about 9 GB, about 2.5 minutes to build). A finished venv carries a marker file and is reused
# when its import check still passes. Exit status: 0 ready; 3 cannot be made here (too little
# disk, no registry): the reason is printed, and the contract tests skip with it (under CI=true,
# .ci/run and the tests fail with it instead); 4 the venv was built but the code under test does
# not import: a failure everywhere, never a skip.
set -euo pipefail

VENV="${THETALKER_CONTRACT_VENV:-$HOME/.cache/thetalker/vllm-omni-0.30.0}"
PYTHON="${THETALKER_CONTRACT_PYTHON:-python3}"
MARKER="$VENV/.thetalker-contract-ready"
REASON_FILE="$(dirname "$VENV")/.$(basename "$VENV").unavailable"
NEED_GB="${THETALKER_CONTRACT_NEED_GB:-10}"  # free space the build needs, in GB
PINS="vllm==0.30.0 vllm-omni==0.30.0"

log() { echo "contract-venv: $*" >&2; }

unavailable() {
    # Written next to the venv so the test tier can skip with the same reason.
    mkdir -p "$(dirname "$REASON_FILE")"
    echo "$*" >"$REASON_FILE"
    log "SKIP: $*"
    exit 3
}

import_check() {
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import vllm_omni.entrypoints.openai.api_server  # noqa: F401  (the router the fixture serves)
import vllm_omni.entrypoints.openai.serving_speech  # noqa: F401
from vllm_omni.entrypoints.openai.protocol.audio import OpenAICreateSpeechRequest  # noqa: F401
for name in ("vllm", "vllm-omni"):
    assert md.version(name) == "0.30.0", (name, md.version(name))
EOF
}

if [ -f "$MARKER" ] && import_check >/dev/null 2>&1; then
    rm -f "$REASON_FILE"
    log "reusing $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
free_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')
if [ "$free_kb" -lt $((NEED_GB * 1024 * 1024)) ] && [ ! -d "$VENV" ]; then
    unavailable "only $((free_kb / 1024 / 1024)) GB free under $(dirname "$VENV"); the vllm-omni 0.30.0 venv needs about $NEED_GB GB"
fi

log "building $VENV ($PINS; about 2.5 min and 9 GB)"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --default-timeout 180)
# --isolated: ignore this machine's pip configuration. It adds a local folder with a CPU build
# of torch (torch-2.13.0+cpu), which pip prefers over PyPI's; the PyPI torchvision, torchaudio
# and torchcodec builds that vllm pulls in need PyPI's CUDA torch ("operator torchvision::nms
# does not exist", missing libc10_cuda.so). The CUDA build of torch 2.13.0 imports and runs the
# HTTP layer fine without a GPU, so it is installed explicitly, from PyPI.
ISOLATED=(--isolated --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}")

if ! "${PIP[@]}" "${ISOLATED[@]}" install -q --upgrade pip; then
    rm -rf "$VENV"
    unavailable "cannot reach the package registry (pip install pip failed)"
fi
if ! "${PIP[@]}" "${ISOLATED[@]}" install -q $PINS \
    torch==2.13.0 torchvision==0.28.0 torchaudio==2.11.0 torchcodec; then
    rm -rf "$VENV"
    unavailable "pip could not install $PINS with torch 2.13.0 from PyPI (see the pip output above)"
fi
# The torch step moves these two off the versions vllm 0.30.0 was resolved with; pin them back
# (vllm-omni-030.md, "The full install"), then let pip check the whole set.
"${PIP[@]}" "${ISOLATED[@]}" install -q numpy==2.3.5 cuda-bindings==13.4.4
"${PIP[@]}" check

if ! import_check; then
    # Not "unavailable": the pinned set installed, so this is a break in what the tier tests.
    log "FAIL: the venv was built but vllm_omni does not import (see the traceback above)"
    exit 4
fi
date -u +%FT%TZ >"$MARKER"
rm -f "$REASON_FILE"
log "ready: $VENV ($(du -sh "$VENV" | cut -f1))"
echo "$VENV/bin/python"
