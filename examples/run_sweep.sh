#!/usr/bin/env bash
# The benchmark protocol against a server that is already running: one load point per
# concurrency, each with its own warmup, then one line per point.
#
#   examples/run_sweep.sh                               # the original's: c8 and c32, 127.0.0.1:8091
#   examples/run_sweep.sh qwen3tts17b results/sweep/qwen3tts17b
#   examples/run_sweep.sh OUT_DIR [HOST:PORT] [C...]    # the original's positional form
#   CONCURRENCY="1 2" REQUESTS=4 WARMUP=1 examples/run_sweep.sh piper-joe /tmp/sweep
#
# NAME is the deploy name the server runs (`thetalker-deploy` lists them; default $NAME or
# piper-joe): it gives the model id (sent as "model"), the sample rate the stream must have,
# and the voice the published tables used (Qwen3-TTS: speaker ryan; VoxCPM2: the reference
# clip inline; MOSS-TTS and OmniVoice: the clip registered once as a voice; piper-joe:
# speaker joe). SPEAKER or VOICE (with TASK_TYPE) choose another voice.
#
# Environment (the original's names in brackets):
#   HOST, PORT   127.0.0.1, 8091; or BASE_URL (overrides both)
#   CONCURRENCY  [CONCURRENCIES] "8 32" (the original's two points; config/published.yaml
#                sweeps 1 2 4 8 16 32 48 64)
#   REQUESTS     scored requests per point; default 100 at c<=2, 200 at c=4, 300 above
#   WARMUP       8 (sent and discarded before each point)
#   PROMPTS      prompts/seed_tts_eval_en_100.jsonl    SEED  42    TIMEOUT  300 (s)
#   REF_WAV / REF_TXT  [REF_AUDIO / REF_TEXT]  reference/ref.wav, reference/ref.txt
#   SPEAKER, VOICE, TASK_TYPE   a built-in speaker or an uploaded voice instead of NAME's
# Each point writes OUT_DIR/c<N>/records.jsonl and summary.json. Exit status: 0 when every
# point passed, 1 when one failed (the others still run), 2 for bad arguments.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
usage() { echo "usage: $0 [NAME [OUT_DIR]] | OUT_DIR [HOST:PORT] [C...]" >&2; exit 2; }
HOST_PORT=${HOST:-127.0.0.1}:${PORT:-8091}
CONCURRENCY=${CONCURRENCY:-${CONCURRENCIES:-8 32}}
if [ $# -eq 0 ] || { [ "$1" != list ] && thetalker-deploy "$1" >/dev/null 2>&1; }; then
    [ $# -le 2 ] || usage
    NAME=${1:-${NAME:-piper-joe}}
    OUT_DIR=${2:-results/sweep/$NAME}
else # the original's form: OUT_DIR [HOST:PORT] [C...]; the model is $NAME's
    OUT_DIR=$1
    case ${2:-$HOST_PORT} in
    *:*[0-9]) HOST_PORT=${2:-$HOST_PORT} ;;
    *)
        echo "$0: '$1' is not a deploy name and '${2:-}' is not HOST:PORT" >&2
        thetalker-deploy "$1" >/dev/null || true # lists the known names
        usage
        ;;
    esac
    shift $(($# >= 2 ? 2 : 1))
    if [ $# -gt 0 ]; then CONCURRENCY="$*"; fi
    NAME=${NAME:-piper-joe}
fi
BASE_URL=${BASE_URL:-http://$HOST_PORT}
WARMUP=${WARMUP:-8}
PROMPTS=${PROMPTS:-$ROOT/prompts/seed_tts_eval_en_100.jsonl}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
REF_WAV=${REF_WAV:-${REF_AUDIO:-$ROOT/reference/ref.wav}}
REF_TXT=${REF_TXT:-$ROOT/reference/ref.txt}
REF_TEXT=${REF_TEXT:-$(cat "$REF_TXT" 2>/dev/null || true)}

MODEL=$(thetalker-deploy "$NAME" --model-id) || exit 2
RATE=$(thetalker-deploy "$NAME" --sample-rate)

if [ -n "${SPEAKER:-}" ]; then
    VOICE_ARGS=(--task-type "${TASK_TYPE:-CustomVoice}" --speaker "$SPEAKER")
elif [ -n "${VOICE:-}" ]; then
    VOICE_ARGS=(--task-type "${TASK_TYPE:-CustomVoice}" --voice "$VOICE")
else
    case $MODEL in
    piper-joe) VOICE_ARGS=(--speaker joe) ;;
    Qwen/Qwen3-TTS-*CustomVoice) VOICE_ARGS=(--task-type CustomVoice --speaker ryan) ;;
    openbmb/VoxCPM2) VOICE_ARGS=(--task-type Base --ref-audio "$REF_WAV" --ref-text "$REF_TEXT") ;;
    *) VOICE_ARGS=(--task-type Base --register-voice ref --ref-audio "$REF_WAV" --ref-text "$REF_TEXT") ;;
    esac
fi

requests_for() { # the published counts per concurrency
    if [ -n "${REQUESTS:-}" ]; then echo "$REQUESTS"
    elif [ "$1" -le 2 ]; then echo 100
    elif [ "$1" -le 4 ]; then echo 200
    else echo 300; fi
}

failed=()
for c in $CONCURRENCY; do
    case $c in '' | *[!0-9]*) echo "$0: CONCURRENCY: '$c' is not a number" >&2; exit 2 ;; esac
    out="$OUT_DIR/c$c"
    echo "== c=$c: $(requests_for "$c") requests after $WARMUP warmup -> $out" >&2
    if ! thetalker-bench --base-url "$BASE_URL" --model "$MODEL" --texts-jsonl "$PROMPTS" \
        --concurrency "$c" --requests "$(requests_for "$c")" --warmup "$WARMUP" \
        --seed "$SEED" --timeout "$TIMEOUT" --expected-sample-rate "$RATE" \
        "${VOICE_ARGS[@]}" --out-dir "$out" >&2; then
        failed+=("$c")
    fi
done

# One line per point, read back from each summary.json.
python - "$OUT_DIR" $CONCURRENCY <<'EOF'
import json, sys
from pathlib import Path

def fmt(value, spec):
    return "-" if value is None else format(value, spec)

out_dir, points = Path(sys.argv[1]), sys.argv[2:]
print(f"{'c':>4} {'ok':>5} {'RTFx':>7} {'cont %':>7} {'TTFA p50':>9} {'TTFA p90':>9} {'audible p50':>12}")
for c in points:
    path = out_dir / f"c{c}" / "summary.json"
    if not path.exists():
        print(f"{c:>4}  (no summary: the point failed before writing one)")
        continue
    s = json.loads(path.read_text())
    print(
        f"{c:>4} {s['n_ok']:>2}/{s['n_scored']:<2} {fmt(s['rtfx'], '7.2f')} "
        f"{fmt(s['continuity_pct'], '7.1f')} {fmt(s['ttfa_s']['p50'], '8.3f')}s "
        f"{fmt(s['ttfa_s']['p90'], '8.3f')}s {fmt(s['ttfa_audible_s']['p50'], '11.3f')}s"
    )
EOF

if [ ${#failed[@]} -gt 0 ]; then
    echo "$0: failed point(s): c=${failed[*]}" >&2
    exit 1
fi
