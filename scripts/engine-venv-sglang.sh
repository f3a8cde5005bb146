#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the SGLang-Omni engine test tier: sglang-omni
# 0.1.9's REAL Qwen3-TTS engine (scheduler, KV pool, talker, streaming vocoder) on SGLang
# 0.5.22's CPU platform (SGLANG_USE_CPU_ENGINE=1), no GPU needed.
#
#   bash scripts/engine-venv-sglang.sh    # prints the venv's python on its last line
#
# One venv for both SGLang-Omni tiers: this script first builds (or reuses) the contract tier's
# venv with scripts/contract-venv-sglang.sh (sglang-omni and sglang --no-deps, torch 2.14.1,
# torchaudio 2.11.0 and torchvision 0.29.1 from PyPI, i.e. PyPI's CUDA 13 builds, which run the
# CPU path; it ignores this machine's pip configuration, whose constraints file caps torch at
# <=2.14.1 and whose local wheel folder offers a CPU build), then adds into it the runtime
# packages the engine path imports and the HTTP layer does not (below). That saves a second
# 6 GB torch download and about 5 minutes. The engine adds about 0.7 GB.
#
# What is NOT installed: PyPI's sglang-kernel (`sgl_kernel`) is the CUDA build and does not
# import without libcuda. The two CPU ops SGLang's CPU path calls come from this repository's
# test-only stand-in, tests/engine/sgl_kernel_cpu/, put on PYTHONPATH by the tier's deploy
# file (never installed into the venv, so the contract tier does not see it).
#
# Where: ${THETALKER_SGLANG_VENV:-$HOME/.cache/thetalker/sglang-omni-0.1.9}. A finished venv
# carries the marker .thetalker-sglang-engine-ready and is reused while its import check passes.
# Exit status: 0 ready; 3 cannot be made here (the contract venv's reasons, or no registry):
# the reason is printed and written next to the venv, and the engine tests skip with it (under
# CI=true, .ci/run and the tests fail with it instead); 4 the venv was built but the engine
# does not import: a failure everywhere, never a skip.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${THETALKER_SGLANG_VENV:-$HOME/.cache/thetalker/sglang-omni-0.1.9}"
export THETALKER_SGLANG_VENV="$VENV"
MARKER="$VENV/.thetalker-sglang-engine-ready"
REASON_FILE="$(dirname "$VENV")/.$(basename "$VENV")-engine.unavailable"
STANDIN="$HERE/tests/engine/sgl_kernel_cpu"
TORCH="torch==2.14.1 torchaudio==2.11.0 torchvision==0.29.1"  # kept as installed: pinned again
# qwen-tts --no-deps: its own pins (transformers 4.x) would replace the transformers 5.19.0
# sglang-omni needs; sglang-omni patches transformers before importing qwen_tts.
QWEN_TTS="qwen-tts==0.1.1"
# What sglang 0.5.22 (scheduler, tokenizer manager, grammar backends, sampler) and sglang-omni's
# Qwen3-TTS pipeline import at runtime on the CPU, minus the CUDA-only packages (flashinfer,
# flash-attn-4, sglang-kernel, cuda-tile, deep-ep/gemm, nixl, mooncake, onnxruntime-gpu).
ENGINE_DEPS=(einops setproctitle "librosa>=0.11.0" "audioread>=3.0.0" "numba==0.65.1"
    "xgrammar==0.2.7" "llguidance>=1.7.6,<2.0.0" "compressed-tensors==0.18.0" "sox>=1.4.1"
    "accelerate>=0.27.0" interegular partial_json_parser "openai==2.6.1"
    "openai-harmony==0.0.4" tiktoken "prometheus-client>=0.20.0" uvloop blobfile==3.0.0
    distro easydict gguf scipy regex zstandard watchfiles "tokenizers==0.23.2" pandas tabulate
    "kernels>=0.14.1,<0.15" "mistral_common>=1.11.5" datasets ninja packaging nvidia-ml-py
    "timm==1.0.16" "torch_memory_saver==0.0.10" "apache-tvm-ffi==0.1.11" anthropic
    "onnxruntime>=1.17")  # onnxruntime: the CPU build (sglang-omni declares onnxruntime-gpu)

log() { echo "engine-venv-sglang: $*" >&2; }

unavailable() {
    mkdir -p "$(dirname "$REASON_FILE")"
    echo "$*" >"$REASON_FILE"
    log "SKIP: $*"
    exit 3
}

import_check() {
    # The engine's own modules on SGLang's CPU platform, with the stand-in on the path.
    SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="$STANDIN" "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
assert md.version("sglang-omni") == "0.1.9", md.version("sglang-omni")
assert md.version("sglang") == "0.5.22", md.version("sglang")
import sgl_kernel
assert sgl_kernel.__file__.startswith(__import__("os").environ["PYTHONPATH"]), sgl_kernel.__file__
from sglang.srt.platforms import current_platform
assert current_platform.is_cpu(), current_platform
import sglang.srt.mem_cache.allocation  # noqa: F401  (imports assign_req_to_token_pool_cpu)
import sglang.kernels.ops.sampling.murmur_hash  # noqa: F401
import sglang_omni.models.qwen3_tts.engine_builder  # noqa: F401
import sglang_omni.models.qwen3_tts.streaming_vocoder  # noqa: F401
from sglang_omni.platforms import current_platform as current_omni_platform
assert type(current_omni_platform).__name__ == "CPUOmniPlatform", current_omni_platform
# qwen-tts 0.1.1 imports on transformers 5.19.0 only once sglang-omni has patched it.
from sglang_omni.models.qwen3_tts.compat import apply_qwen_tts_transformers_compatibility_patches
apply_qwen_tts_transformers_compatibility_patches()
from qwen_tts import Qwen3TTSModel, Qwen3TTSTokenizer  # noqa: F401
PY
}

if [ -f "$MARKER" ] && import_check >/dev/null 2>&1; then
    rm -f "$REASON_FILE"
    log "reusing $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

start=$(date +%s)
set +e
bash "$HERE/scripts/contract-venv-sglang.sh" >/dev/null
rc=$?
set -e
if [ "$rc" -eq 3 ]; then
    unavailable "$(cat "$(dirname "$VENV")/.$(basename "$VENV").unavailable" 2>/dev/null || echo "the SGLang-Omni contract venv cannot be made here")"
elif [ "$rc" -ne 0 ]; then
    log "FAIL: scripts/contract-venv-sglang.sh exited $rc"
    exit "$rc"
fi

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --default-timeout 180)
# --isolated, as the contract script: PyPI's torch stays, the machine's CPU wheel folder is unused.
ISOLATED=(--isolated --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}")
log "adding the engine's runtime packages to $VENV"
if ! "${PIP[@]}" "${ISOLATED[@]}" install -q --no-deps "$QWEN_TTS" ||
    ! "${PIP[@]}" "${ISOLATED[@]}" install -q --no-compile $TORCH "${ENGINE_DEPS[@]}"; then
    unavailable "pip could not install the SGLang-Omni engine's runtime packages from PyPI (see the pip output above)"
fi
if ! import_check; then
    log "FAIL: the venv was built but the SGLang-Omni engine does not import on the CPU (traceback above)"
    exit 4
fi
date -u +%FT%TZ >"$MARKER"
rm -f "$REASON_FILE"
log "ready in $(($(date +%s) - start)) s: $VENV ($(du -sh "$VENV" | cut -f1))"
echo "$VENV/bin/python"
