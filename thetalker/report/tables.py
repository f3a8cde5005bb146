"""Markdown tables from results/points.csv: throughput, continuity, TTFA, cost.

They read the point summaries and compute nothing new, except the price of a point, which
is `thetalker.metrics.point_cost` (priced only where continuity reaches the threshold).
Rows follow the config's order of models and systems; a missing point prints `n/a`.

    python -m thetalker.report.tables --points results/points.csv --models M... \
        --systems S... --headline 32 --ratio A B --gpu-hour-usd 2.99 \
        --throughput T.md --continuity C.md --ttfa F.md --cost P.md
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from thetalker.metrics import point_cost

__all__ = [
    "MISSING",
    "PointsError",
    "load_points",
    "point_value",
    "point_summary",
    "concurrency_levels",
    "point_cost_at",
    "report_parser",
    "load_points_or_report",
    "markdown_table",
    "throughput_table",
    "continuity_table",
    "ttfa_table",
    "cost_table",
    "main",
]

MISSING = "n/a"
_REQUIRED_COLUMNS = ("system", "model", "concurrency", "rtfx", "continuity_pct", "chars_per_s")


class PointsError(ValueError):
    """A points.csv that cannot make the tables; the message names the file and column."""


def load_points(path: str | Path) -> pd.DataFrame:
    points = pd.read_csv(path)
    missing = [c for c in _REQUIRED_COLUMNS if c not in points.columns]
    if missing:
        raise PointsError(f"{path}: missing column(s) {', '.join(missing)}")
    points["system"] = points["system"].astype(str)
    points["model"] = points["model"].astype(str)
    return points


def point_summary(points: pd.DataFrame, model: str, system: str, concurrency: int) -> dict | None:
    """One point's row as a dict (NaN as None), or None when it was not run."""
    rows = points[
        (points["model"] == model)
        & (points["system"] == system)
        & (points["concurrency"] == int(concurrency))
    ]
    if rows.empty:
        return None
    return {k: (None if _is_nan(v) else v) for k, v in rows.iloc[0].to_dict().items()}


def point_value(
    points: pd.DataFrame, model: str, system: str, concurrency: int, column: str
) -> float | None:
    summary = point_summary(points, model, system, concurrency)
    return None if summary is None else summary.get(column)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _fmt(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], label_columns: int = 1
) -> str:
    """A GitHub Markdown table: label columns left-aligned, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |"]
    aligns = [" --- "] * label_columns + [" ---: "] * (len(header) - label_columns)
    lines.append("|" + "|".join(aligns) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def concurrency_levels(points: pd.DataFrame) -> list[int]:
    return sorted(int(c) for c in points["concurrency"].unique())


def point_cost_at(
    points: pd.DataFrame,
    model: str,
    system: str,
    concurrency: int,
    gpu_hour_usd: float,
    min_continuity_pct: float,
) -> float | None:
    """`thetalker.metrics.point_cost` of one point, None when it was not run or not priced."""
    summary = point_summary(points, model, system, concurrency)
    return point_cost(summary, gpu_hour_usd, min_continuity_pct) if summary else None


def throughput_table(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    ratio: Sequence[str],
) -> str:
    num, den = ratio
    header = ["model", *systems, f"{num} / {den}"]
    rows = []
    for model in models:
        values = {s: point_value(points, model, s, headline, "rtfx") for s in systems}
        top, bottom = values.get(num), values.get(den)
        ratio_cell = f"{top / bottom:.2f}x" if top is not None and bottom else MISSING
        rows.append([model, *(_fmt(values[s], 1) for s in systems), ratio_cell])
    title = (
        f"RTFx at concurrency {headline}: seconds of audio delivered per second of wall clock, "
        "all streams together.\n\n"
    )
    return title + markdown_table(header, rows)


def _per_level_table(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    cell: Callable[[str, str, int], str],
    title: str,
) -> str:
    """A (model, system) row per pair and a column per concurrency level."""
    levels = concurrency_levels(points)
    header = ["model", "system", *(f"c{c}" for c in levels)]
    rows = [
        [model, system, *(cell(model, system, c) for c in levels)]
        for model in models
        for system in systems
    ]
    return title + markdown_table(header, rows, label_columns=2)


def continuity_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    def cell(model: str, system: str, c: int) -> str:
        summary = point_summary(points, model, system, c)
        if summary is None:
            return MISSING
        failed = int(summary.get("n_failed") or 0)
        return _fmt(summary.get("continuity_pct"), 1) + (f" ({failed} failed)" if failed else "")

    title = (
        "Continuous streams (%): a real-time player starting at the first byte never fell "
        "more than 0.1 s behind; a failed request counts as not continuous.\n\n"
    )
    return _per_level_table(points, models, systems, cell, title)


def ttfa_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    def cell(model: str, system: str, c: int) -> str:
        first = point_value(points, model, system, c, "ttfa_s_p50")
        audible = point_value(points, model, system, c, "ttfa_audible_s_p50")
        return MISSING if first is None else f"{_fmt(first, 3)} / {_fmt(audible, 3)}"

    title = "Time to first audio, p50 in seconds: first byte / first audible sample.\n\n"
    return _per_level_table(points, models, systems, cell, title)


def cost_table(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    gpu_hour_usd: float,
    min_continuity_pct: float,
) -> str:
    header = ["model", *systems]
    rows = []
    for model in models:
        cells = []
        for system in systems:
            cost = point_cost_at(points, model, system, headline, gpu_hour_usd, min_continuity_pct)
            cells.append(_fmt(cost, 2))
        rows.append([model, *cells])
    title = (
        f"USD per million characters at concurrency {headline} and {gpu_hour_usd:g} USD per "
        f"hour, counting characters delivered continuously; {MISSING} where continuity is "
        f"under {min_continuity_pct:g}% or the point is missing.\n\n"
    )
    return title + markdown_table(header, rows)


def report_parser(prog: str, description: str | None, suffix: str) -> argparse.ArgumentParser:
    """The arguments the tables and the figures share; `--ratio` is the tables' own."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--points", required=True, type=Path)
    parser.add_argument("--models", required=True, nargs="+")
    parser.add_argument("--systems", required=True, nargs="+")
    parser.add_argument("--headline", required=True, type=int, help="headline concurrency")
    parser.add_argument("--gpu-hour-usd", type=float, default=2.99)
    parser.add_argument("--min-continuity-pct", type=float, default=95.0)
    for name in ("throughput", "continuity", "ttfa", "cost"):
        parser.add_argument(f"--{name}", required=True, type=Path, help=f"{name}{suffix} to write")
    return parser


def load_points_or_report(path: Path) -> pd.DataFrame | None:
    """points.csv, or None after printing the one-line reason it cannot be read."""
    try:
        return load_points(path)
    except (PointsError, OSError, pd.errors.ParserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _parser() -> argparse.ArgumentParser:
    parser = report_parser("python -m thetalker.report.tables", __doc__, ".md")
    parser.add_argument("--ratio", required=True, nargs=2, metavar=("NUMERATOR", "DENOMINATOR"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    tables = {
        args.throughput: throughput_table(
            points, args.models, args.systems, args.headline, args.ratio
        ),
        args.continuity: continuity_table(points, args.models, args.systems),
        args.ttfa: ttfa_table(points, args.models, args.systems),
        args.cost: cost_table(
            points,
            args.models,
            args.systems,
            args.headline,
            args.gpu_hour_usd,
            args.min_continuity_pct,
        ),
    }
    for path, text in tables.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
