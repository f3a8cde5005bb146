"""Why capacity ends where it ends (issue 50): capacity.md's "limited by" and "past the knee"
columns, each one rule (docs/capacity.md, "What limited it").

Limited by, at a system's first failing load (closed loop), from what was measured there:

- `admission`: the server refused at least `REJECTED_PCT` % of the scored requests for load
  (`n_rejected`, thetalker.metrics.overload);
- `gpu` / `cpu`: the device that serves was at least `BUSY_PCT` % busy in the scored window
  (points.csv `busy_device`, `busy_pct`: utilization.gpu, or the server tree's CPU-seconds
  over the cores it may use);
- `server queue`: requests waited in the server's queue at least as long as they took to be
  generated (server.csv: `queue_wait_mean_s` against the summed `gen_time_mean_s_stage*`):
  the scheduler's cap on requests in a batch, not the chip;
- `client`: the client's own lag: open-loop sends late by `CLIENT_LAG_S` or more at p95
  (`schedule_lag_s_p95`).

Exactly one of them saturated, and the device's busy share was measured (else a busy chip
cannot be ruled out): that one. None, several at once (a full GPU also fills the queue), or
the busy share not measured: `not determined`, naming what saturated. The figures behind the
verdict are always shown, `n/a` where a figure was not measured (no sampler, no /metrics).

Past the knee: at each load from the first failing one up, the requests refused for load and
how long a refusal took (p50), so a reader sees whether a server sheds load cleanly or lets
every stream degrade.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "BUSY_PCT",
    "REJECTED_PCT",
    "CLIENT_LAG_S",
    "NOT_DETERMINED",
    "limited_by",
    "overload_shape",
]

BUSY_PCT = 90.0
REJECTED_PCT = 1.0
CLIENT_LAG_S = 0.1
NOT_DETERMINED = "not determined"


def _gen_time_s(server: Mapping[str, Any]) -> float | None:
    stages = [v for k, v in server.items() if k.startswith("gen_time_mean_s_stage")]
    values = [float(v) for v in stages if v is not None]
    return sum(values) if values else None


def _n(value: Any, digits: int, unit: str = "") -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}{unit}"


def limited_by(
    point: Mapping[str, Any] | None, server: Mapping[str, Any] | None = None
) -> tuple[str, str]:
    """(verdict, the figures behind it) for the first failing load's points.csv row and its
    server.csv row (None: not measured); see the module for the rule."""
    point, server = point or {}, server or {}
    saturated = []
    scored, rejected = point.get("n_scored"), point.get("n_rejected")
    if scored and rejected is not None and 100.0 * float(rejected) / float(scored) >= REJECTED_PCT:
        saturated.append("admission")
    device, busy = point.get("busy_device"), point.get("busy_pct")
    if device and busy is not None and float(busy) >= BUSY_PCT:
        saturated.append(str(device))
    wait, gen = server.get("queue_wait_mean_s"), _gen_time_s(server)
    if wait is not None and gen is not None and float(wait) >= gen > 0:
        saturated.append("server queue")
    lag = point.get("schedule_lag_s_p95")
    if lag is not None and float(lag) >= CLIENT_LAG_S:
        saturated.append("client")
    evidence = "; ".join(
        [
            f"{device or 'device'} busy {_n(busy, 0, '%')}",
            "rejected "
            + (f"{int(rejected)}/{int(scored)}" if scored and rejected is not None else "n/a"),
            f"queue wait {_n(wait, 3, ' s')} vs generation {_n(gen, 3, ' s')}",
            f"client lag p95 {_n(lag, 3, ' s')}",
        ]
    )
    if len(saturated) == 1 and busy is not None:
        return saturated[0], evidence
    said = [*saturated, *([] if busy is not None else ["busy share not measured"])]
    return (f"{NOT_DETERMINED} ({'; '.join(said)})" if said else NOT_DETERMINED), evidence


def overload_shape(loads: Mapping[float, Mapping[str, Any]], first_failing: float | None) -> str:
    """`8: 12/30 refused in 0.004 s p50; 16: 30/30 refused in 0.003 s p50` over the loads
    from the first failing one up; `none refused` when no load there refused any; "" when no
    load failed."""
    if first_failing is None:
        return ""
    parts = []
    for load in sorted(x for x in loads if x >= first_failing):
        s = loads[load]
        if s.get("n_rejected"):
            parts.append(
                f"{load:g}: {int(s['n_rejected'])}/{int(s.get('n_scored') or 0)} refused in "
                f"{_n(s.get('rejected_wall_s_p50'), 3, ' s')} p50"
            )
    return "; ".join(parts) or "none refused"
