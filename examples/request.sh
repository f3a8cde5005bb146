#!/usr/bin/env bash
# One streaming speech request with curl, raw PCM written to a file.
#
#   examples/request.sh                           # preset speaker ($SPEAKER, default joe) -> out.pcm
#   examples/request.sh preset [OUT.pcm]          # the same, to OUT.pcm
#   examples/request.sh clone  [OUT.pcm]          # voice cloning: task_type Base + reference clip
#   examples/request.sh REF.wav "REF TEXT" "TEXT" [HOST:PORT]   # the original's form (clone)
#   VOICE=thetalker_ref examples/request.sh       # an uploaded voice, sent as "voice"
#
# The JSON body is piped to curl on stdin (--data-binary @-): a base64 reference clip is
# hundreds of kilobytes, more than one command-line argument may hold.
# The output is headerless s16le mono PCM at the model's rate (piper-joe 22050 Hz, Qwen3-TTS
# 24000 Hz); play it with e.g. `ffplay -f s16le -ar 22050 -ac 1 OUT.pcm`.
#
# Environment: HOST (127.0.0.1) and PORT (8091), or BASE_URL (overrides both), TEXT,
# SPEAKER (preset; Qwen3-TTS CustomVoice: ryan, vivian, ...), VOICE (an uploaded voice name:
# sent as "voice" instead of "speaker"), MODEL (sent as "model" when set), LANGUAGE
# (English), REF_WAV / REF_TXT (clone; default reference/ref.wav and reference/ref.txt
# beside this script). curl's timing (first byte, total) goes to stderr. Exit status:
# curl's (22 = the server answered with an error, whose JSON body is printed), 2 for bad
# arguments.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TEXT=${TEXT:-Hello! This is one streamed request, written to a file as it arrives.}
LANGUAGE=${LANGUAGE:-English}
REF_WAV=${REF_WAV:-$HERE/../reference/ref.wav}
REF_TXT=${REF_TXT:-$HERE/../reference/ref.txt}
REF_TEXT=
HOST_PORT=${HOST:-127.0.0.1}:${PORT:-8091}
case ${1:-preset} in
preset | clone)
    MODE=${1:-preset}
    OUT=${2:-out.pcm}
    ;;
*)  # the original's positional form: REF.wav "REF TEXT" "TEXT" [HOST:PORT]
    [ $# -ge 3 ] && [ $# -le 4 ] || {
        echo "usage: $0 [preset|clone [OUT.pcm]] | REF.wav \"REF TEXT\" \"TEXT\" [HOST:PORT]" >&2
        exit 2
    }
    MODE=clone
    REF_WAV=$1
    REF_TEXT=$2
    TEXT=$3
    HOST_PORT=${4:-$HOST_PORT}
    OUT=out.pcm
    ;;
esac
BASE_URL=${BASE_URL:-http://$HOST_PORT}

# A JSON string literal: backslash, quote and control characters escaped.
json_string() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\r'/\\r}
    s=${s//$'\t'/\\t}
    printf '"%s"' "$s"
}

common_fields() {
    printf '"input":%s,"language":%s,' "$(json_string "$TEXT")" "$(json_string "$LANGUAGE")"
    printf '"stream":true,"stream_format":"audio","response_format":"pcm"'
    if [ -n "${MODEL:-}" ]; then printf ',"model":%s' "$(json_string "$MODEL")"; fi
}

body() {
    case $MODE in
    preset)
        if [ -n "${VOICE:-}" ]; then
            printf '{"task_type":"CustomVoice","voice":%s,' "$(json_string "$VOICE")"
        else
            printf '{"task_type":"CustomVoice","speaker":%s,' "$(json_string "${SPEAKER:-joe}")"
        fi
        common_fields
        printf '}'
        ;;
    clone)
        printf '{"task_type":"Base","ref_text":%s,' "$(json_string "${REF_TEXT:-$(cat "$REF_TXT")}")"
        common_fields
        printf ',"ref_audio":"data:audio/wav;base64,'
        base64 -w0 "$REF_WAV" # streamed into the pipe, never an argument
        printf '"}'
        ;;
    esac
}

if [ "$MODE" = clone ]; then
    files=("$REF_WAV")
    [ -n "$REF_TEXT" ] || files+=("$REF_TXT")
    for f in "${files[@]}"; do
        [ -r "$f" ] || { echo "$0: cannot read $f (set REF_WAV / REF_TXT)" >&2; exit 2; }
    done
fi

body | curl --silent --show-error --no-buffer --fail-with-body \
    -H 'Content-Type: application/json' --data-binary @- \
    -o "$OUT" -w 'first byte %{time_starttransfer} s, total %{time_total} s, %{size_download} bytes\n' \
    "$BASE_URL/v1/audio/speech" >&2 || {
    status=$?
    if [ -s "$OUT" ]; then
        echo >&2
        head -c 2000 "$OUT" >&2 # the server's JSON error body
        echo >&2
    fi
    exit "$status"
}
echo "wrote $OUT" >&2
