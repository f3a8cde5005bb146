"""The load generator: streams `POST /v1/audio/speech` and records every server chunk.

Closed loop (`concurrency` requests in flight, the next sent as one finishes) or open loop
(`request_rate`: Poisson arrivals drawn from the seed, sent on schedule whether or not
earlier requests finished; each record keeps its `schedule_lag_s`). A warmup finishes before
the first scored request is sent. One `aiohttp.ClientSession` per run, its pool sized to the
concurrency, keep-alive.

The receive path does as little as possible, because everything done between two chunk
reads delays the next timestamp: per piece of body it stamps `time.perf_counter()` once and
appends to three lists. Grouping pieces into the server's chunks (`end_of_http_chunk`),
SSE decoding, WAV header checks, the figures of `thetalker.metrics`, saving audio and the
JSONL write (fsynced in groups) all happen afterwards, in a record writer process forked
from a server this process starts once (so it shares no GIL with the receive loop; with
workers, each builds its records in a thread). A finished exchange reaches the writer at the
receive loop's first quiet moment, at most half a second after its request ended (`handoff`):
exchanges end in bursts, and handed off one by one at their ends the work fell where every
other stream's chunks were being stamped.

`workers > 1` spreads the scored requests over spawned processes after the warmup; they
stamp the same system-wide `perf_counter` and send finished records back to the parent,
the one writer of records.jsonl.

Failures are data: each becomes a record with `ok: false` and an `error` of a type from
`thetalker.data.records.ERROR_TYPES`, and the run goes on. Schema: docs/records.md.

Modules, one job each:

- `options`: `BenchOptions`, the run's errors, `validate_options`
- `body`: the request body and its per-run encoder
- `receive`: the receive loop (its timing is measured by benchmarks/client_fidelity.py)
- `decode`: server chunks, SSE events, the WAV header of a `wav` stream
- `record`: one record from one exchange
- `handoff`: when a finished exchange leaves the receive loop (its first quiet moment)
- `sinks`: where records are built and written (the writer process, or a thread with workers)
- `writer_process`: `RecordWriterProcess`, the record writer process and its messages
- `writes`: one writer's records file and its first failure
- `probe`: the server's sample rate
- `schedule`: closed loop and open loop, for the in-process run and the workers alike
- `sender`: the run's session and `send`
- `child`: what every spawned process does first (Ctrl-C to the parent, parent watch)
- `workers`: the scored requests over processes
- `summary`: summary.json
- `progress`: progress reports during a point, and the end-of-point line
- `run`: one load point end to end
- `websocket`, `pacing`, `ws_record`: the agent mode (`protocol="websocket"`): one session on
  `/v1/audio/speech/stream` per request, the text sent in paced pieces, its record
"""

from __future__ import annotations

from thetalker.api.speech import RESPONSE_FORMATS, STREAM_FORMATS, TASK_TYPES
from thetalker.client.body import build_request_body
from thetalker.client.options import (
    BenchError,
    BenchOptions,
    OptionsError,
    ProbeError,
    RequestRefusedError,
    SampleRateError,
    validate_options,
)
from thetalker.client.probe import probe_sample_rate
from thetalker.client.progress import (
    LineReporter,
    Progress,
    ProgressReporter,
    TtyReporter,
    format_point_end,
    format_progress,
)
from thetalker.client.run import arun_benchmark, run_benchmark
from thetalker.client.schedule import new_event_loop

__all__ = [
    "TASK_TYPES",
    "STREAM_FORMATS",
    "RESPONSE_FORMATS",
    "BenchOptions",
    "BenchError",
    "OptionsError",
    "RequestRefusedError",
    "SampleRateError",
    "ProbeError",
    "Progress",
    "ProgressReporter",
    "LineReporter",
    "TtyReporter",
    "format_progress",
    "format_point_end",
    "validate_options",
    "build_request_body",
    "probe_sample_rate",
    "arun_benchmark",
    "run_benchmark",
    "new_event_loop",
]
