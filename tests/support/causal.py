"""Facts about a client's record against a scripted server's log that hold under any load.

A tolerance around the server's schedule fails on a busy machine (the client reads late);
what cannot fail is causality on the shared clock (`time.perf_counter()`, system-wide):
no byte reaches the client before the server started writing it. So each read's stamp is
at least the start of the write that carried its last byte; stamps never go back; the
record's own derived fields are what its timeline says (ttfa is the first read, a chunk
arrives with the read that completed it, the player figures are thetalker.metrics' of the
recorded reads). A record keeps times from its request's send (`t_send`); the absolute
stamp is `t_origin + t_submit_s + arrival`, with the run's origin taken by `run_origins`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.support.scripted_server import RequestLog
from thetalker import metrics
from thetalker.client.context import RunContext

__all__ = ["run_origins", "causal_faults", "assert_causal", "assert_figures_are_the_players"]

# Float rounding of a stamp rebuilt from t_origin + t_submit_s + arrival (perf_counter
# values near 1e6 s have an ulp near 1e-10): not a timing tolerance.
ROUNDING_S = 1e-9


def run_origins(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock origin (`RunContext.t_origin`) of every run started in this process from
    now on, in order; worker processes are handed the parent's."""
    origins: list[float] = []
    real = RunContext.for_run.__func__  # type: ignore[attr-defined]

    def for_run(cls: type[RunContext], opts: Any, out_dir: Any, t_origin: float, *a: Any):
        origins.append(t_origin)
        return real(cls, opts, out_dir, t_origin, *a)

    monkeypatch.setattr(RunContext, "for_run", classmethod(for_run))
    return origins


def _ends(sizes: Sequence[int]) -> list[int]:
    return list(itertools.accumulate(int(n) for n in sizes))


def causal_faults(rec: Mapping[str, Any], log: RequestLog, t_origin: float) -> list[str]:
    """What in the record's reads (its chunks when it has none: SSE) breaks causality or its
    own timeline against the server's writes; empty when nothing does."""
    reads = rec["read_arrival_s"] if rec["read_arrival_s"] is not None else rec["chunk_arrival_s"]
    sizes = rec["read_bytes"] if rec["read_bytes"] is not None else rec["chunk_bytes"]
    if not reads or len(reads) != len(sizes):
        return ["no reads, or reads and sizes differ in length"]
    faults = []
    if reads != sorted(reads):
        faults.append("stamps go back")
    if rec["ttfa_s"] != reads[0]:
        faults.append("ttfa is not the first read")
    t_send = t_origin + rec["t_submit_s"]
    write_ends, read_ends = _ends(log.write_bytes), _ends(sizes)
    if read_ends[-1] > write_ends[-1]:
        return [*faults, f"{read_ends[-1]} B read, {write_ends[-1]} B written"]
    for i, (t, end) in enumerate(zip(reads, read_ends, strict=True)):
        last_write = bisect.bisect_left(write_ends, end)  # the write holding the last byte
        if t_send + t < log.write_starts[last_write] - ROUNDING_S:
            faults.append(f"read {i} stamped before write {last_write} began")
    chunk_ends = _ends(rec["chunk_bytes"])
    for i, (t, end) in enumerate(zip(rec["chunk_arrival_s"], chunk_ends, strict=True)):
        if t != reads[bisect.bisect_left(read_ends, end)]:
            faults.append(f"chunk {i} does not arrive with the read that completed it")
    return faults


def assert_causal(rec: Mapping[str, Any], log: RequestLog, t_origin: float) -> None:
    """No fault of `causal_faults`."""
    assert not causal_faults(rec, log, t_origin)


def assert_figures_are_the_players(rec: Mapping[str, Any], pcm: bytes) -> None:
    """Stalls, underrun and every other figure: thetalker.metrics of the recorded reads."""
    again = metrics.record_metrics(rec, pcm)
    assert {k: rec[k] for k in again} == again
    if rec["read_arrival_s"] is None:
        arrivals, sizes = rec["chunk_arrival_s"], rec["chunk_bytes"]
    else:
        arrivals, sizes = metrics.playable_timeline(rec["read_arrival_s"], rec["read_bytes"])
    stats = metrics.compute_stalls(arrivals, sizes, int(rec["sample_rate"]))
    assert (rec["stalls"], rec["stall_s"]) == (stats.stalls, pytest.approx(stats.stall_s))
