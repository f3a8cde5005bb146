"""thetalker-compare A B: what changed between two result folders, and what is noise.

Reads the records only (`records.jsonl` under each folder, in the layout
`.../{system}/{model}/{c<N>|r<R>}[/round<k>]/records.jsonl`, as `thetalker.report.points`
reads it). For every (system, model, point) present in both it prints B against A (A is
the base, B the new run): RTFx as the ratio B / A, TTFA p50 and p90 as B - A in seconds,
continuity as B - A in percentage points, each with its 95% interval, and names the
changes whose interval excludes "no change" (1 for the ratio, 0 for a difference).

The two runs are independent (different sessions, maybe different servers), so nothing is
paired: RTFx compares the rounds' RTFx by Welch's t when both ran N > 1 rounds, else a
bootstrap over each run's requests with each run's window kept; the TTFA percentiles and
continuity are bootstraps over each run's requests (pooled over rounds), resampled on
their own. All from `thetalker.metrics`.

    thetalker-compare results-2026-11 results [--csv changes.csv]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker import metrics
from thetalker.data.records import RecordError, read_records
from thetalker.metrics import Interval
from thetalker.report.points import PointPathError, point_location

__all__ = [
    "CompareError",
    "find_points",
    "compare_point",
    "compare_folders",
    "distinguishable",
    "format_changes",
    "csv_rows",
]

PointKey = tuple[str, str, str]
# (name in the output, key of compare_point, the value meaning "no change", digits)
FIGURES = (
    ("RTFx B/A", "rtfx_ratio", 1.0, 3),
    ("TTFA p50 B-A (s)", "ttfa_s_p50_change", 0.0, 3),
    ("TTFA p90 B-A (s)", "ttfa_s_p90_change", 0.0, 3),
    ("continuity B-A (pp)", "continuity_pct_change", 0.0, 1),
)


class CompareError(ValueError):
    """A folder that cannot be compared; the message names it."""


def find_points(folder: str | Path) -> dict[PointKey, list[Path]]:
    """(system, model, point) -> its records files (one per round, in round order)."""
    root = Path(folder)
    if not root.is_dir():
        raise CompareError(f"{root}: not a folder")
    found: dict[PointKey, list[tuple[int, Path]]] = {}
    for path in sorted(root.rglob("records.jsonl")):
        try:
            where = point_location(path)
        except PointPathError:
            continue  # a records file outside the point layout (e.g. a quality run's scratch)
        found.setdefault((where.system, where.model, where.point), []).append((where.round, path))
    return {key: [p for _, p in sorted(paths)] for key, paths in found.items()}


def _ok(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("ok") and not r.get("warmup")]


def compare_point(
    rounds_a: Sequence[Sequence[Mapping[str, Any]]],
    rounds_b: Sequence[Sequence[Mapping[str, Any]]],
    seed: int = metrics.SEED,
) -> dict[str, Any]:
    """B against A at one point: the figures of each side and the Intervals of the change."""
    pooled_a = [r for one in rounds_a for r in one]
    pooled_b = [r for one in rounds_b for r in one]
    if len(rounds_a) > 1 and len(rounds_b) > 1:
        rtfx_a = [metrics.summarize_point(r)["rtfx"] for r in rounds_a]
        rtfx_b = [metrics.summarize_point(r)["rtfx"] for r in rounds_b]
        ratio = metrics.welch_interval(rtfx_b, rtfx_a, ratio=True)
    else:
        ratio = metrics.rtfx_change_bootstrap(pooled_b, pooled_a, ratio=True, seed=seed)
    ttfa_a = [r.get("ttfa_s") for r in _ok(pooled_a)]
    ttfa_b = [r.get("ttfa_s") for r in _ok(pooled_b)]
    return {
        "rounds_a": len(rounds_a),
        "rounds_b": len(rounds_b),
        "rtfx_a": metrics.rtfx_interval(rounds_a, seed=seed),
        "rtfx_b": metrics.rtfx_interval(rounds_b, seed=seed),
        "rtfx_ratio": ratio,
        "ttfa_s_p50_a": metrics.percentiles(ttfa_a)["p50"],
        "ttfa_s_p50_b": metrics.percentiles(ttfa_b)["p50"],
        "ttfa_s_p50_change": metrics.percentile_change_bootstrap(ttfa_b, ttfa_a, 50, seed=seed),
        "ttfa_s_p90_change": metrics.percentile_change_bootstrap(ttfa_b, ttfa_a, 90, seed=seed),
        "continuity_pct_a": metrics.continuity_interval(pooled_a),
        "continuity_pct_b": metrics.continuity_interval(pooled_b),
        "continuity_pct_change": metrics.continuity_change_bootstrap(pooled_b, pooled_a, seed=seed),
    }


def compare_folders(
    a: str | Path, b: str | Path, seed: int = metrics.SEED
) -> tuple[list[dict[str, Any]], list[PointKey], list[PointKey]]:
    """Rows for the points in both folders (sorted), and the points only in A, only in B."""
    points_a, points_b = find_points(a), find_points(b)
    both = sorted(set(points_a) & set(points_b))
    rows = []
    for key in both:
        try:
            rounds_a = [list(read_records(p)) for p in points_a[key]]
            rounds_b = [list(read_records(p)) for p in points_b[key]]
        except RecordError as exc:
            raise CompareError(str(exc)) from None
        system, model, point = key
        rows.append(
            {
                "system": system,
                "model": model,
                "point": point,
                **compare_point(rounds_a, rounds_b, seed),
            }
        )
    return rows, sorted(set(points_a) - set(points_b)), sorted(set(points_b) - set(points_a))


def _cell(ci: Interval, digits: int, style: str = "plain") -> str:
    """`v [low, high]`; style `ratio` adds `x`, `change` a sign; `n/a` without a value."""
    if ci.value is None:
        return "n/a"
    sign = "+" if style == "change" else ""
    value = f"{ci.value:{sign}.{digits}f}" + ("x" if style == "ratio" else "")
    if ci.low is None or ci.high is None:
        return value
    return f"{value} [{ci.low:.{digits}f}, {ci.high:.{digits}f}]"


def distinguishable(row: Mapping[str, Any]) -> list[str]:
    """The names of the changes whose interval excludes no change."""
    return [name for name, key, null, _ in FIGURES if row[key].excludes(null)]


def format_changes(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ["system", "model", "point", "RTFx A", "RTFx B", *(name for name, *_ in FIGURES)]
    header.append("distinguishable from noise")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([" --- "] * 3 + [" ---: "] * (len(header) - 4) + [" --- "]) + "|",
    ]
    for row in rows:
        rtfx = [_cell(row[k], 1) for k in ("rtfx_a", "rtfx_b")]
        changes = [
            _cell(row[key], digits, "ratio" if key == "rtfx_ratio" else "change")
            for _, key, _, digits in FIGURES
        ]
        named = distinguishable(row)
        cells = [
            row["system"],
            row["model"],
            row["point"],
            *rtfx,
            *changes,
            ", ".join(named) or "none",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        flat: dict[str, Any] = {
            "system": row["system"],
            "model": row["model"],
            "point": row["point"],
        }
        for key, value in row.items():
            if isinstance(value, Interval):
                flat.update({key: value.value, f"{key}_low": value.low, f"{key}_high": value.high})
                flat[f"{key}_method"] = value.method
            elif key not in flat:
                flat[key] = value
        flat["distinguishable"] = ";".join(distinguishable(row))
        out.append(flat)
    return out
