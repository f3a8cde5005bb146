"""results/points.csv: one row per load point, every summary figure and its interval, from
records alone.

Each row is `thetalker.metrics.summarize_point` and `thetalker.metrics.point_intervals`
over the records of one point, so the tables rebuild with no server and no summary.json.
The layout (thetalker.data.layout) names the point:
`.../runs/{system}/{model}/{point}/records.jsonl`, where `{point}` is `c{N}` (closed loop,
N streams) or `r{R}` (open loop, R requests per second).
A point run several times (`repeats`) keeps each round in `.../{point}/round{k}/records.jsonl`;
its row pools the rounds' requests for counts, continuity and percentiles, and takes
`rtfx`, `chars_per_s` and `window_s` as the mean over the rounds (each round has its own
clock). Percentile blocks are flattened to `<figure>_p50`, `<figure>_n`, ...; an interval
adds `<figure>_low`, `<figure>_high` (and `rtfx_method`: `bootstrap`, `normal` from 5,000
requests, or `repeats-t`; `ttfa_s_method`, `perceived_first_audio_s_method`: `bootstrap`, or
`order-statistic` from 5,000 requests, `thetalker.metrics.intervals.LARGE_SAMPLE_N`).
The machine-cost columns (CPU-seconds and energy per second of audio) are
`thetalker.report.machine_cost`'s, from each round's provenance.json.
Continuity at each threshold T is `continuity_pct_{T}s` (with `_low`, `_high`). The
`records` column lists the point's records files (`;`-separated, one per round), which
the tables read again for the ratio column's interval.

The capacity search's points (thetalker.pipeline.serve_and_sweep) sit in
`.../{system}/{model}/search/{point}/`, listed by the job's `search.json`
(`--search-manifests`): rows like any other, with `search_point` true. `stock_contaminated`
is the flag of the point's provenance.json beside its records (None without one), and
`other_cpu_pct` the largest share of the machine's CPU that other processes took during a
round (its `resources`, thetalker.pipeline.machine_load; None without one).

Each point is read keeping only what its row needs of each record (`point_fields`), and with
`--jobs N` (the rule's threads) N points are computed at once, in processes (one point
alone: its bootstraps in N threads); the rows are the same either way.

    python -m thetalker.report.points --out results/points.csv [--search-manifests M...] \
        [--jobs N] [--usable-audio-s N] [--allow-incomplete] [--allow-inconsistent] \
        [--] RECORDS.jsonl...
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data.layout import (
    PointLocation,
    PointPathError,
    point_key,
    point_label,
    point_location,
)
from thetalker.data.manifest import ManifestError, read_search_manifest
from thetalker.data.record_reads import RecordError, read_json, read_rounds
from thetalker.metrics import (
    CONTINUITY_THRESHOLDS_S,
    DEFAULT_USABLE_AUDIO_S,
    Interval,
    MixedOnsetRulesError,
    point_fields,
    point_intervals,
    point_onset,
    summarize_point,
)
from thetalker.report.machine_cost import machine_cost_columns

__all__ = [
    "POINT_KEYS",
    "PointPathError",
    "PointLocation",
    "point_key",
    "point_location",
    "point_label",
    "threshold_column",
    "flatten",
    "point_row",
    "stock_contaminated",
    "points_rows",
    "search_records",
    "write_points",
    "main",
]

POINT_KEYS = ("system", "model", "concurrency")


def threshold_column(threshold_s: float) -> str:
    """The points.csv column of continuity at one threshold: `continuity_pct_0.05s`."""
    return f"continuity_pct_{threshold_s:g}s"


def flatten(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Nested percentile blocks become `<key>_<p>` columns."""
    row: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, Mapping):
            for sub, sub_value in value.items():
                row[f"{key}_{sub}"] = sub_value
        else:
            row[key] = value
    return row


def _interval_columns(name: str, ci: Interval) -> dict[str, Any]:
    return {name: ci.value, f"{name}_low": ci.low, f"{name}_high": ci.high}


def _mean(values: Sequence[float | None]) -> float | None:
    data = [float(v) for v in values if v is not None]
    return sum(data) / len(data) if data else None


def point_row(
    records_path: str | Path | Sequence[str | Path],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    allow_incomplete: bool = False,
    threads: int = 1,
    allow_inconsistent: bool = False,
    usable_audio_s: float = DEFAULT_USABLE_AUDIO_S,
) -> dict[str, Any]:
    """One point's row from its records file (or the files of its rounds). A file with
    request indices missing (a lost write) raises RecordError naming it and them, unless
    `allow_incomplete` (then a warning on stderr); so does a record whose figures contradict
    its timeline, or a sample rate unlike the point's first (`read_records`'
    `require_consistent`), unless `allow_inconsistent`. `threads`: its bootstraps'.
    `usable_audio_s`: the N of the time to the first N seconds of audio."""
    paths = [records_path] if isinstance(records_path, str | Path) else list(records_path)
    where = [point_location(p) for p in paths]
    first = where[0]
    if any((w.system, w.model, w.point) != (first.system, first.model, first.point) for w in where):
        raise PointPathError(f"{paths[0]}: rounds of different points given together")
    # Only what the row needs of each record is held: a point's timelines are most of it.
    rounds = read_rounds(
        paths,
        keep=functools.partial(point_fields, usable_audio_s=usable_audio_s),
        require_complete=not allow_incomplete,
        require_consistent=not allow_inconsistent,
    )
    pooled = [r for one in rounds for r in one]
    _warn_mixed_onset(paths[0], pooled)
    summary = flatten(summarize_point(pooled, first.concurrency, usable_audio_s))
    # Each round has its own clock: a rate is the mean over rounds, not pooled.
    per_round = (
        [summarize_point(r, usable_audio_s=usable_audio_s) for r in rounds]
        if len(rounds) > 1
        else [summary]
    )
    by_round = [s["rtfx"] for s in per_round]
    figures = point_intervals(rounds, thresholds_s, threads=threads, rtfx_by_round=by_round)
    chars = sum((s["chars_per_s"] or 0.0) * s["window_s"] for s in per_round)
    if len(rounds) > 1:
        for key in ("rtfx", "chars_per_s", "window_s", "sessions_in_flight"):
            summary[key] = _mean([s[key] for s in per_round])
    row: dict[str, Any] = {
        "system": first.system,
        "model": first.model,
        "point": first.point,
        "request_rate": first.request_rate,
        "rounds": len(rounds),
        "search_point": first.search,
        "stock_contaminated": stock_contaminated(paths),
        "other_cpu_pct": _other_cpu_pct(paths),
        **summary,
        **_interval_columns("rtfx", figures["rtfx"]),
        "rtfx_method": figures["rtfx"].method,
        "ttfa_s_method": figures["ttfa_s_p50"].method,
        "perceived_first_audio_s_method": figures["perceived_first_audio_s_p50"].method,
        "rtfx_by_round": ";".join(f"{v:.6g}" for v in figures["rtfx_by_round"] if v is not None),
        **_interval_columns("continuity_pct", figures["continuity_pct"]),
    }
    for t, ci in figures["continuity_pct_at"].items():
        row.update(_interval_columns(threshold_column(t), ci))
    for name in ("ttfa_s_p50", "ttfa_s_p90"):
        row.update(_interval_columns(name, figures[name]))
    for key, value in figures["perceived_first_audio_s"].items():
        row[f"perceived_first_audio_s_{key}"] = value
    for name in ("perceived_first_audio_s_p50", "perceived_first_audio_s_p90"):
        row.update(_interval_columns(name, figures[name]))
    row.update(machine_cost_columns(paths, summary["audio_s"], chars))
    row["records"] = ";".join(str(p) for p in paths)
    return row


def _warn_mixed_onset(path: str | Path, records: Sequence[Mapping[str, Any]]) -> None:
    """A point whose records were measured by several onset rules is said so on stderr (its
    row's `audible_onset_rule` reads `mixed: ...`): its audible figures pool them."""
    try:
        point_onset(records)
    except MixedOnsetRulesError as exc:
        print(f"warning: {path}: {exc}; its audible figures pool them", file=sys.stderr)
    except ValueError:
        pass  # one rule, though no longer an applicable one: the row names it


def stock_contaminated(paths: Sequence[str | Path]) -> bool | None:
    """provenance.json's `stock_contaminated` beside any round's records: True when any
    round's is; None when there is no file, or a round's is unknown (null: its probe
    failed, thetalker.lifecycle.serving_env); else False."""
    flags: list[bool | None] = []
    for path in paths:
        try:
            data = read_json(Path(path).with_name("provenance.json"))
            value = data.get("stock_contaminated")
        except (OSError, RecordError, AttributeError):
            continue
        unknown = value is None and "stock_contaminated" in data
        flags.append(None if unknown else bool(value))
    if any(flags):
        return True
    return False if flags and None not in flags else None


def _other_cpu_pct(paths: Sequence[str | Path]) -> float | None:
    """The largest share of the machine's CPU that other processes used during any round
    (provenance.json's `resources.other_cpu_pct`; None: no file or no figure)."""
    found = []
    for path in paths:
        try:
            resources = read_json(Path(path).with_name("provenance.json")).get("resources")
            found.append(float(resources["other_cpu_pct"]))
        except (OSError, RecordError, AttributeError, KeyError, TypeError, ValueError):
            continue
    return max(found) if found else None


def search_records(manifests: Iterable[str | Path]) -> list[str]:
    """The records files of every search point the manifests (search.json) list."""
    return [path for m in manifests for path in read_search_manifest(m).records()]


def _group_rounds(paths: Iterable[str | Path]) -> list[list[Path]]:
    """Records files grouped by point, in first-seen order, each group sorted by round."""
    groups: dict[tuple[str, str, str], list[tuple[int, Path]]] = {}
    for path in paths:
        where = point_location(path)
        group = groups.setdefault((where.system, where.model, where.point), [])
        same = [p for r, p in group if r == where.round]
        if same:  # e.g. a stale c2/records.jsonl beside c2/round1/: not another round
            raise PointPathError(
                f"{path}: round {where.round} of {where.point} again (also {same[0]}); "
                "a point's rounds are round1/, round2/, ... or one records.jsonl, not both"
            )
        group.append((where.round, Path(path)))
    return [[p for _, p in sorted(group)] for group in groups.values()]


def points_rows(
    paths: Iterable[str | Path],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    allow_incomplete: bool = False,
    jobs: int = 1,
    allow_inconsistent: bool = False,
    usable_audio_s: float = DEFAULT_USABLE_AUDIO_S,
) -> list[dict[str, Any]]:
    """One row per point, in first-seen order. `jobs` > 1: the points are computed by that
    many processes at once (each row is its point's alone, so the rows are the same); one
    point alone gets them as its bootstraps' threads."""
    groups = _group_rounds(paths)
    if jobs <= 1 or len(groups) <= 1:
        return [
            point_row(
                group, thresholds_s, allow_incomplete, jobs, allow_inconsistent, usable_audio_s
            )
            for group in groups
        ]
    from concurrent.futures import ProcessPoolExecutor

    import scipy.special  # noqa: F401  (loaded once here: forked workers inherit it)

    with ProcessPoolExecutor(max_workers=min(jobs, len(groups))) as pool:
        futures = [
            pool.submit(
                point_row,
                group,
                thresholds_s,
                allow_incomplete,
                1,
                allow_inconsistent,
                usable_audio_s,
            )
            for group in groups
        ]
        return [f.result() for f in futures]


def write_points(rows: Sequence[Mapping[str, Any]], out: str | Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.points", description=__doc__)
    parser.add_argument("records", nargs="+", type=Path, help="records.jsonl of each point")
    parser.add_argument("--out", required=True, type=Path, help="points.csv to write")
    parser.add_argument(
        "--search-manifests",
        nargs="*",
        type=Path,
        default=[],
        help="search.json of each bench job: its capacity search's points are rows too",
    )
    parser.add_argument(
        "--continuity-thresholds-s",
        nargs="+",
        type=float,
        default=list(CONTINUITY_THRESHOLDS_S),
        help="thresholds (s) of the continuity columns (report.continuity_thresholds_s)",
    )
    parser.add_argument(
        "--usable-audio-s",
        type=float,
        default=DEFAULT_USABLE_AUDIO_S,
        help="N of the time to the first N seconds of audio (report.usable_audio_s)",
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="take a records file with request indices missing (warned) instead of refusing it",
    )
    parser.add_argument(
        "--allow-inconsistent",
        action="store_true",
        help="take records whose figures contradict their timeline (warned) instead of "
        "refusing them",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="points computed at once, one process each (the rule's threads); same rows",
    )
    args = parser.parse_args(argv)
    bad = [t for t in args.continuity_thresholds_s if not (math.isfinite(t) and t > 0)]
    if bad:  # nan passes every comparison: continuity 0% for perfect streams
        parser.error(f"--continuity-thresholds-s: each must be a finite number > 0 (got {bad[0]})")
    if not (math.isfinite(args.usable_audio_s) and args.usable_audio_s > 0):
        parser.error(f"--usable-audio-s: must be a finite number > 0 (got {args.usable_audio_s})")
    try:
        paths = [*args.records, *search_records(args.search_manifests)]
        rows = points_rows(
            paths,
            args.continuity_thresholds_s,
            args.allow_incomplete,
            max(1, args.jobs),
            args.allow_inconsistent,
            args.usable_audio_s,
        )
    except (RecordError, ManifestError, PointPathError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_points(rows, args.out)
    print(f"{args.out}: {len(rows)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
