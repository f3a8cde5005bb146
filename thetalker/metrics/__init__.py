"""Every figure TheTalker reports, computed in one place: the modules by job.

The failure this module exists to catch: a server whose aggregate RTFx is far above 1
while one stream's chunks arrive in bursts that a listener hears as gaps. Aggregate
throughput cannot see that; a per-stream player simulation can.

Pure functions over plain sequences and numpy arrays, no I/O, so the client, the
workflow, the report and the tests all mean the same thing by "continuous"
(definitions: tutorials/03-streaming-metrics.md). The intervals beside every headline
figure (bootstrap, Wilson, t over repeats; `intervals`) are scipy's, imported only where an
interval is computed.
Times are seconds from `time.perf_counter()`; audio is signed 16-bit little-endian PCM.

Degenerate input (no chunks, lists of different length, a non-positive byte rate)
gets a neutral, documented answer rather than an exception, so one bad record never
stops a summary, and a bad timeline never yields a plausible-looking number.

By job: `stream` (one request's timeline: continuity, stalls, playback), `onset` (the audible
onset, absolute rule: -45 dBFS by default), `players` (continuity under named player models,
the start buffer), `point` (per-request metrics, point summaries, cost), `sessions` (streams
in flight, time to a usable start of speech, the first-audio tail's spread), `intervals` (a
package by job: the bootstrap engine, closed forms, Wilson and Newcombe, t over rounds with
compare's RTFx over rounds and B / A, changes between two runs; WER's too), `usage` (energy
and CPU-seconds per second of audio), `overload` (admission rejections), `agent` (the
voice-agent mode), `waveform` (two renderings of one prompt: sglang-omni's waveform
tolerance) and `ab_verdicts` (a verdict per figure of B against A: regression, improvement
or no change the run can show).
Everything is re-exported here: `from thetalker import metrics`.
"""

from thetalker.metrics import (
    ab_verdicts,
    agent,
    intervals,
    onset,
    overload,
    players,
    point,
    sessions,
    stream,
    usage,
    waveform,
)
from thetalker.metrics.ab_verdicts import *  # noqa: F403
from thetalker.metrics.agent import *  # noqa: F403
from thetalker.metrics.intervals import *  # noqa: F403
from thetalker.metrics.onset import *  # noqa: F403
from thetalker.metrics.overload import *  # noqa: F403
from thetalker.metrics.players import *  # noqa: F403
from thetalker.metrics.point import *  # noqa: F403
from thetalker.metrics.sessions import *  # noqa: F403
from thetalker.metrics.stream import *  # noqa: F403
from thetalker.metrics.usage import *  # noqa: F403
from thetalker.metrics.waveform import *  # noqa: F403

__all__ = [
    *ab_verdicts.__all__,
    *agent.__all__,
    *intervals.__all__,
    *onset.__all__,
    *overload.__all__,
    *players.__all__,
    *point.__all__,
    *sessions.__all__,
    *stream.__all__,
    *usage.__all__,
    *waveform.__all__,
]
