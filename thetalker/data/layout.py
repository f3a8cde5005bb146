"""The point/round layout of a run on disk: how a point folder is named and parsed.

    results/runs/{system}/{model}/{point}[/round{k}]/records.jsonl (summary.json, ...)
    results/runs/{system}/{model}/search/{point}[/round{k}]/...     (the capacity search's)

A point is `c{N}` (closed loop, N streams) or `r{R}` (open loop, R requests/s printed with
%g, so 2.0 is `r2`); `round{k}` (k from 1) only when a point runs `repeats` > 1 times. The
job (pipeline/job.py, serve_and_sweep.py), the config checks, rules/common.smk, the report
and the provenance script all name and read these folders through this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLOSED_PREFIX",
    "OPEN_PREFIX",
    "ROUND_PREFIX",
    "SEARCH_DIR",
    "PointLocation",
    "PointPathError",
    "concurrency_label",
    "rate_label",
    "point_label",
    "parse_point_label",
    "point_labels",
    "sort_point_labels",
    "round_name",
    "round_names",
    "round_dirs",
    "parse_round",
    "point_location",
    "point_key",
    "point_file_stem",
]

CLOSED_PREFIX = "c"  # c{N}: N concurrent streams
OPEN_PREFIX = "r"  # r{R}: R requests/s
ROUND_PREFIX = "round"  # round{k}: one of a point's repeats
SEARCH_DIR = "search"  # beside the grid's points: the capacity search's points

_POINT = re.compile(r"^(?:c(\d+)|r(\d+(?:\.\d+)?))$")
_ROUND = re.compile(r"^round(\d+)$")


class PointPathError(ValueError):
    """A path outside the {system}/{model}[/search]/{point}[/round{k}]/ layout."""


def concurrency_label(concurrency: int) -> str:
    """`c{N}`: the folder of a closed-loop point."""
    return f"{CLOSED_PREFIX}{int(concurrency)}"


def rate_label(rate: float) -> str:
    """`r{R}` of a request rate, R with %g (2.0 is `r2`)."""
    return f"{OPEN_PREFIX}{float(rate):g}"


def point_label(concurrency: int | None = None, request_rate: float | None = None) -> str:
    """`c{N}` when a concurrency is given, else `r{R}`."""
    if concurrency is not None:
        return concurrency_label(concurrency)
    return rate_label(request_rate or 0.0)


def parse_point_label(label: str) -> tuple[int | None, float | None] | None:
    """(concurrency, request_rate) of `c{N}` or `r{R}`; None when it is neither."""
    match = _POINT.match(label)
    if not match:
        return None
    return (int(match.group(1)) if match.group(1) else None), (
        float(match.group(2)) if match.group(2) else None
    )


def point_labels(concurrency: Iterable[int], request_rates: Iterable[float] = ()) -> list[str]:
    """A grid's points in the order a job runs them: `c{N}`, then `r{R}`."""
    return [concurrency_label(c) for c in concurrency] + [rate_label(r) for r in request_rates]


def sort_point_labels(labels: Iterable[str]) -> list[str]:
    """Closed-loop labels by concurrency, then open-loop ones by rate (others dropped)."""
    parsed = {lab: parse_point_label(lab) for lab in set(labels)}
    closed = sorted((lab for lab, p in parsed.items() if p and p[0] is not None), key=parsed.get)
    opened = [lab for lab, p in parsed.items() if p and p[1] is not None]
    return closed + sorted(opened, key=lambda lab: parsed[lab][1])  # type: ignore[index]


def round_name(k: int) -> str:
    return f"{ROUND_PREFIX}{int(k)}"


def round_names(repeats: int) -> list[str]:
    """The folders below a point: [""] for one run, else round1 .. roundN."""
    return [""] if int(repeats) == 1 else [round_name(k) for k in range(1, int(repeats) + 1)]


def round_dirs(repeats: int) -> list[str]:
    """round_names as path prefixes (Snakemake's `{round}`): "" or `round1/` .. `roundN/`."""
    return [f"{name}/" if name else "" for name in round_names(repeats)]


def parse_round(name: str) -> int | None:
    """k of `round{k}`, None for any other name."""
    match = _ROUND.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class PointLocation:
    """Where a point's file sits: its (system, model, point) and round (1 when none)."""

    system: str
    model: str
    point: str
    concurrency: int | None
    request_rate: float | None
    round: int = 1
    search: bool = False  # a point the capacity search added (under search/)
    repeated: bool = False  # under a round{k} folder


def point_location(path: str | Path) -> PointLocation:
    """Parse `.../{system}/{model}[/search]/{c<N>|r<R>}[/round<k>]/{file}`."""
    path = Path(path)
    parent = path.parent
    k = parse_round(parent.name)
    if k is not None:
        parent = parent.parent
    parsed = parse_point_label(parent.name)
    search = parent.parent.name == SEARCH_DIR and len(parent.parts) >= 4
    run = parent.parent.parent if search else parent.parent
    if parsed is None or len(parent.parts) < 3:
        raise PointPathError(
            f"{path}: expected .../{{system}}/{{model}}/{{c<N>|r<R>}}[/round<k>]/{path.name}"
        )
    concurrency, rate = parsed
    return PointLocation(
        system=run.parent.name,
        model=run.name,
        point=point_label(concurrency, rate),
        concurrency=concurrency,
        request_rate=rate,
        round=k or 1,
        search=search,
        repeated=k is not None,
    )


def point_key(path: str | Path) -> tuple[str, str, int]:
    """(system, model, concurrency) of `.../{system}/{model}/c{N}/...`."""
    where = point_location(path)
    if where.concurrency is None:
        raise PointPathError(f"{path}: expected .../{{system}}/{{model}}/c{{N}}/...")
    return where.system, where.model, where.concurrency


def point_file_stem(path: str | Path) -> str:
    """One flat name for a point's file: `{system}_{model}_{point}[_search][_round{k}]`."""
    where = point_location(path)
    parts: Sequence[str] = [where.system, where.model, where.point]
    if where.search:
        parts = [*parts, SEARCH_DIR]
    if where.repeated:
        parts = [*parts, round_name(where.round)]
    return "_".join(parts)
