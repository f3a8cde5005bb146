#!/usr/bin/env bash
# Serve one deploy configuration by name, the way the published numbers were served.
#
#   examples/serve.sh NAME [PORT] [EXTRA SERVER ARGS...]
#   MPS=1 examples/serve.sh qwen3tts17b 8091      # under an NVIDIA MPS daemon
#   MODEL=Qwen/Qwen3-TTS-12Hz-1.7B-Base examples/serve.sh qwen3tts17b 8091  # another checkpoint
#   examples/serve.sh piper-joe 8091              # the embedded CPU default
#
# NAME is a deploy name or alias (`thetalker-deploy` lists them). The script resolves the
# deploy file and the checkpoint with `thetalker-deploy`, sets THESTAGE_VLLM_OMNI=0 (the "vllm-omni"
# column's marker; neither vllm nor vllm-omni reads it: only the thestage library can honour it), gives MOSS-TTS the long
# first-start timeouts, and with MPS=1 starts an MPS daemon before the server and stops it
# after. piper-joe starts thetalker-serve-local instead of vllm-omni.
#
# Environment: HOST (default 127.0.0.1), MPS (1 = wrap in an MPS daemon), MODEL (an HF id:
# serve this checkpoint with NAME's deploy file instead of NAME's own model),
# SPEAKER_SAMPLES_DIR (uploaded voices; default: a fresh folder, removed at exit),
# GRACE_S (seconds between SIGTERM and SIGKILL at exit, default 30).
# Ctrl-C or SIGTERM stops the server's whole process group, then the MPS daemon.
set -euo pipefail

usage() { echo "usage: $0 NAME [PORT] [EXTRA SERVER ARGS...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
NAME=$1
PORT=${2:-8091}
shift $(($# >= 2 ? 2 : 1))
HOST=${HOST:-127.0.0.1}
GRACE_S=${GRACE_S:-30}
case $PORT in '' | *[!0-9]*) echo "$0: PORT must be a number, got '$PORT'" >&2; exit 2 ;; esac

# Unknown names: thetalker-deploy exits 2 and lists the known ones.
DEPLOY=$(thetalker-deploy "$NAME") || exit 2
DEPLOY_MODEL=$(thetalker-deploy "$NAME" --model-id)
MODEL=${MODEL:-$DEPLOY_MODEL}
export THESTAGE_VLLM_OMNI=0

TEMP_DIRS=()
# fresh_dir VAR LABEL: a new temporary folder in $VAR, removed at exit (no subshell, so the
# list of folders to remove survives).
fresh_dir() {
    local d
    d=$(mktemp -d "${TMPDIR:-/tmp}/thetalker-$2.XXXXXX")
    TEMP_DIRS+=("$d")
    printf -v "$1" '%s' "$d"
}

SERVER_PID=
MPS_STARTED=0
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ -n "$SERVER_PID" ]; then
        # The server runs in its own process group: stop its stage workers with it, also
        # when the server itself already exited and left them holding the GPU.
        kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
        for _ in $(seq $((GRACE_S * 10))); do
            kill -0 -- "-$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ "$MPS_STARTED" = 1 ]; then
        echo quit | nvidia-cuda-mps-control || echo "$0: could not stop the MPS daemon" >&2
    fi
    if [ ${#TEMP_DIRS[@]} -gt 0 ]; then rm -rf "${TEMP_DIRS[@]}"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$DEPLOY_MODEL" = piper-joe ]; then
    if [ "$MODEL" != piper-joe ]; then
        echo "$0: MODEL=$MODEL ignored: piper-joe serves its one Piper voice" >&2
        MODEL=piper-joe
    fi
    CMD=(thetalker-serve-local --host "$HOST" --port "$PORT" --deploy-config "$DEPLOY")
else
    # The server reloads every voice in this folder at start: give each run its own.
    if [ -z "${SPEAKER_SAMPLES_DIR:-}" ]; then
        fresh_dir SPEAKER_SAMPLES_DIR speakers
    fi
    export SPEAKER_SAMPLES_DIR
    CMD=(vllm-omni serve "$MODEL" --omni --trust-remote-code --host "$HOST" --port "$PORT"
        --deploy-config "$DEPLOY")
    case $MODEL in
    # The 8B model's first start (kernel compile, graph capture) outlasts the defaults.
    OpenMOSS-Team/MOSS-TTS*) CMD+=(--init-timeout 1800 --stage-init-timeout 1800) ;;
    esac
fi
CMD+=("$@")

if [ "${MPS:-0}" = 1 ]; then
    if [ "$MODEL" = piper-joe ]; then
        echo "$0: MPS=1 ignored: piper-joe runs on the CPU" >&2
    else
        fresh_dir CUDA_MPS_PIPE_DIRECTORY mps-pipe
        fresh_dir CUDA_MPS_LOG_DIRECTORY mps-log
        export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        nvidia-cuda-mps-control -d
        MPS_STARTED=1
        echo "$0: MPS daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)" >&2
    fi
fi

echo "$0: serving $MODEL on http://$HOST:$PORT with $DEPLOY" >&2
echo "+ ${CMD[*]}" >&2
set -m # job control: the server gets a process group of its own (its pid)
"${CMD[@]}" </dev/null &
SERVER_PID=$!
set +m
set +e
wait "$SERVER_PID"
status=$?
set -e
exit "$status"
