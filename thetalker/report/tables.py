"""Markdown tables (and the same numbers as CSV beside them) from results/points.csv:
throughput, continuity (headline and at each threshold), TTFA, cost.

They print the point summaries and their intervals as points.csv holds them (every one
from `thetalker.metrics`), plus two things computed here, both by `thetalker.metrics`: the
price of a point (`point_cost`, only where continuity reaches the threshold) and the
interval of the ratio column (`rtfx_ratio_interval`, over the records files points.csv
names: paired by round when both systems ran N > 1 rounds, else a bootstrap over each
run's requests). Intervals are 95%: `value ± half-width` for RTFx, `value [low, high]` for
percentages and TTFA percentiles (neither is symmetric). A point with failed requests says
so beside its figure (`(k/n failed)`); a ratio whose interval holds 1.0 is marked `†`.
Rows follow the config's order of models and systems; a missing point prints `n/a`.
Each `X.md` gets an `X.csv` beside it with one number per cell (value, low, high) for the
report's sortable view; continuity.md's threshold table is `continuity_thresholds.csv`.

    python -m thetalker.report.tables --points results/points.csv --models M... \
        --systems S... --headline 32 --ratio A B --gpu-hour-usd 2.99 \
        --throughput T.md --continuity C.md --ttfa F.md --cost P.md
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from thetalker.data.records import RecordError, read_records
from thetalker.metrics import Interval, point_cost, rtfx_ratio_interval
from thetalker.report.points import threshold_column

__all__ = [
    "MISSING",
    "NOT_DISTINGUISHABLE",
    "PointsError",
    "load_points",
    "point_value",
    "point_summary",
    "point_at",
    "point_labels",
    "concurrency_levels",
    "thresholds_of",
    "point_cost_at",
    "ratio_at",
    "fmt_pm",
    "fmt_range",
    "failed_mark",
    "add_point_arguments",
    "report_parser",
    "load_points_or_report",
    "markdown_table",
    "throughput_rows",
    "throughput_table",
    "continuity_rows",
    "continuity_table",
    "continuity_threshold_rows",
    "continuity_thresholds_table",
    "ttfa_rows",
    "ttfa_table",
    "cost_rows",
    "cost_table",
    "write_table",
    "main",
]

MISSING = "n/a"
NOT_DISTINGUISHABLE = "†"
STOCK_CONTAMINATED = "(stock contaminated: see provenance.md)"
_REQUIRED_COLUMNS = ("system", "model", "concurrency", "rtfx", "continuity_pct", "chars_per_s")
_THRESHOLD_COLUMN = re.compile(r"^continuity_pct_(\d+(?:\.\d+)?)s$")
_INTERVAL_NOTE = (
    "± is half the 95% interval: over the N rounds of the point (Student t) when it ran "
    "N > 1 times, else a bootstrap over the run's requests with its window kept."
)

Row = dict[str, Any]


class PointsError(ValueError):
    """A points.csv that cannot make the tables; the message names the file and column."""


def load_points(path: str | Path) -> pd.DataFrame:
    points = pd.read_csv(path)
    missing = [c for c in _REQUIRED_COLUMNS if c not in points.columns]
    if missing:
        raise PointsError(f"{path}: missing column(s) {', '.join(missing)}")
    points["system"] = points["system"].astype(str)
    points["model"] = points["model"].astype(str)
    if "point" not in points.columns:  # a points.csv of closed-loop points only
        points["point"] = [f"c{int(c)}" for c in points["concurrency"]]
    return points


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def point_at(points: pd.DataFrame, model: str, system: str, point: str) -> dict | None:
    """One point's row by its label (`c8`, `r2.5`) as a dict (NaN as None), or None."""
    rows = points[
        (points["model"] == model) & (points["system"] == system) & (points["point"] == point)
    ]
    if rows.empty:
        return None
    return {k: (None if _is_nan(v) else v) for k, v in rows.iloc[0].to_dict().items()}


def point_summary(points: pd.DataFrame, model: str, system: str, concurrency: int) -> dict | None:
    """One closed-loop point's row as a dict (NaN as None), or None when it was not run."""
    return point_at(points, model, system, f"c{int(concurrency)}")


def point_value(
    points: pd.DataFrame, model: str, system: str, concurrency: int, column: str
) -> float | None:
    summary = point_summary(points, model, system, concurrency)
    return None if summary is None else summary.get(column)


def point_labels(points: pd.DataFrame) -> list[str]:
    """Every point label: closed-loop by concurrency, then open-loop by rate."""
    labels = set(points["point"])
    closed = sorted((lab for lab in labels if lab.startswith("c")), key=lambda s: int(s[1:]))
    opened = sorted((lab for lab in labels if lab.startswith("r")), key=lambda s: float(s[1:]))
    return closed + opened


def concurrency_levels(points: pd.DataFrame) -> list[int]:
    return sorted(int(c) for c in points["concurrency"].dropna().unique())


def thresholds_of(points: pd.DataFrame) -> list[float]:
    """The continuity thresholds (s) points.csv has columns for."""
    found = [_THRESHOLD_COLUMN.match(c) for c in points.columns]
    return sorted(float(m.group(1)) for m in found if m)


def fmt_pm(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    """`v ± h` (half the interval), `v` alone when there is no interval, n/a when no value."""
    if value is None:
        return MISSING
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ± {(high - low) / 2:.{digits}f}"


def fmt_range(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    """`v [l, h]`, for intervals that are not symmetric (Wilson)."""
    if value is None:
        return MISSING
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def failed_mark(summary: Mapping[str, Any] | None) -> str:
    """` (k/n failed)` for a point with failed requests, and ` (stock contaminated)` for a
    point whose provenance says a stock server ran with the optimized library installed
    (points.csv's `stock_contaminated`); else empty."""
    if not summary:
        return ""
    failed = int(summary.get("n_failed") or 0)
    mark = f" ({failed}/{int(summary.get('n_scored') or 0)} failed)" if failed else ""
    contaminated = summary.get("stock_contaminated")
    if contaminated is True or str(contaminated).lower() == "true":
        mark += f" {STOCK_CONTAMINATED}"
    return mark


def _cell_pm(summary: Mapping[str, Any] | None, column: str, digits: int) -> str:
    if summary is None:
        return MISSING
    value = summary.get(column)
    return fmt_pm(value, summary.get(f"{column}_low"), summary.get(f"{column}_high"), digits)


def _cell_range(summary: Mapping[str, Any] | None, column: str, digits: int) -> str:
    if summary is None:
        return MISSING
    value = summary.get(column)
    return fmt_range(value, summary.get(f"{column}_low"), summary.get(f"{column}_high"), digits)


def _numbers(summary: Mapping[str, Any] | None, column: str, prefix: str = "") -> Row:
    """`column`, `column_low`, `column_high` of a point as CSV cells (None when missing)."""
    get = (lambda k: None) if summary is None else summary.get
    name = prefix or column
    return {
        name: get(column),
        f"{name}_low": get(f"{column}_low"),
        f"{name}_high": get(f"{column}_high"),
    }


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], label_columns: int = 1
) -> str:
    """A GitHub Markdown table: label columns left-aligned, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |"]
    aligns = [" --- "] * label_columns + [" ---: "] * (len(header) - label_columns)
    lines.append("|" + "|".join(aligns) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


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


def _rounds(summary: Mapping[str, Any]) -> list[list[dict]] | None:
    """The records of each round of a point, read from the files points.csv names."""
    files = summary.get("records")
    if not files:
        return None
    try:
        return [list(read_records(path)) for path in str(files).split(";")]
    except (RecordError, OSError):
        return None


def ratio_at(
    points: pd.DataFrame, model: str, numerator: str, denominator: str, point: str
) -> Interval | None:
    """RTFx(numerator) / RTFx(denominator) at one point with its interval
    (`thetalker.metrics.rtfx_ratio_interval` over the points' records); without readable
    records, the ratio of points.csv's values with no interval. None when a point is
    missing or the denominator has no RTFx."""
    top, bottom = (
        point_at(points, model, numerator, point),
        point_at(points, model, denominator, point),
    )
    if top is None or bottom is None or top.get("rtfx") is None or not bottom.get("rtfx"):
        return None
    rounds_top, rounds_bottom = _rounds(top), _rounds(bottom)
    if rounds_top is not None and rounds_bottom is not None:
        ci = rtfx_ratio_interval(rounds_top, rounds_bottom)
        if ci.value is not None:
            return ci
    return Interval(top["rtfx"] / bottom["rtfx"], None, None, "none", 0)


def _ratio_cell(ci: Interval | None) -> str:
    if ci is None or ci.value is None:
        return MISSING
    if ci.low is None or ci.high is None:
        return f"{ci.value:.2f}x"
    mark = "" if ci.excludes(1.0) else f" {NOT_DISTINGUISHABLE}"
    return f"{ci.value:.2f}x [{ci.low:.2f}, {ci.high:.2f}]{mark}"


def throughput_rows(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    ratio: Sequence[str],
) -> list[Row]:
    """One row per model: each system's RTFx with its interval and failures, and the ratio."""
    num, den = ratio
    point = f"c{int(headline)}"
    rows = []
    for model in models:
        row: Row = {"model": model}
        for system in systems:
            summary = point_at(points, model, system, point)
            row.update(_numbers(summary, "rtfx", f"{system}_rtfx"))
            row[f"{system}_rtfx_method"] = summary.get("rtfx_method") if summary else None
            row[f"{system}_n_failed"] = summary.get("n_failed") if summary else None
            row[f"{system}_n_scored"] = summary.get("n_scored") if summary else None
        ci = ratio_at(points, model, num, den, point)
        row.update(
            ratio=ci.value if ci else None,
            ratio_low=ci.low if ci else None,
            ratio_high=ci.high if ci else None,
            ratio_method=ci.method if ci else None,
            ratio_distinguishable=ci.excludes(1.0) if ci and ci.low is not None else None,
        )
        rows.append(row)
    return rows


def throughput_table(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    ratio: Sequence[str],
) -> str:
    num, den = ratio
    header = ["model", *systems, f"{num} / {den}"]
    point = f"c{int(headline)}"
    rows = []
    for model in models:
        cells = []
        for system in systems:
            summary = point_at(points, model, system, point)
            cells.append(_cell_pm(summary, "rtfx", 1) + failed_mark(summary))
        rows.append([model, *cells, _ratio_cell(ratio_at(points, model, num, den, point))])
    title = (
        f"RTFx at concurrency {headline}: seconds of audio delivered per second of wall clock, "
        f"all streams together (a failed request delivers none). {_INTERVAL_NOTE} The ratio's "
        "interval [low, high] is paired by round when both systems ran N > 1 rounds, else a "
        f"bootstrap over each run's requests; {NOT_DISTINGUISHABLE}: it contains 1.0, the two "
        "systems are not distinguishable at this point.\n\n"
    )
    return title + markdown_table(header, rows)


def _per_level_table(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    cell: Callable[[str, str, str], str],
    title: str,
) -> str:
    """A (model, system) row per pair and a column per load point."""
    labels = point_labels(points)
    header = ["model", "system", *labels]
    rows = [
        [model, system, *(cell(model, system, p) for p in labels)]
        for model in models
        for system in systems
    ]
    return title + markdown_table(header, rows, label_columns=2)


def _long_rows(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    row: Callable[[str, str, str, Mapping[str, Any]], Row],
) -> list[Row]:
    """One row per point that was run, in config order, then load order."""
    out = []
    for model in models:
        for system in systems:
            for label in point_labels(points):
                summary = point_at(points, model, system, label)
                if summary is not None:
                    out.append(
                        {
                            "model": model,
                            "system": system,
                            "point": label,
                            **row(model, system, label, summary),
                        }
                    )
    return out


def continuity_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        return {
            **_numbers(s, "continuity_pct"),
            "n_failed": s.get("n_failed"),
            "n_scored": s.get("n_scored"),
        }

    return _long_rows(points, models, systems, row)


def continuity_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    def cell(model: str, system: str, label: str) -> str:
        summary = point_at(points, model, system, label)
        return _cell_range(summary, "continuity_pct", 1) + failed_mark(summary)

    title = (
        "Continuous streams (%): a real-time player starting at the first byte never fell "
        "more than 0.1 s behind; a failed request counts as not continuous. [low, high]: the "
        "95% Wilson interval over the scored requests (100% of 10 is not certain).\n\n"
    )
    text = _per_level_table(points, models, systems, cell, title)
    if thresholds_of(points):
        text += "\n" + continuity_thresholds_table(points, models, systems)
    return text


def continuity_threshold_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        out: Row = {}
        for t in thresholds_of(points):
            out.update(_numbers(s, threshold_column(t), f"continuity_pct_{t:g}s"))
        out.update(n_failed=s.get("n_failed"), n_scored=s.get("n_scored"))
        return out

    return _long_rows(points, models, systems, row)


def continuity_thresholds_table(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> str:
    """Continuity at each threshold of points.csv (the player's view: how long a gap is
    heard as one), a row per point, with the Wilson interval."""
    thresholds = thresholds_of(points)
    header = ["model", "system", "point", *(f"≤ {t * 1000:g} ms" for t in thresholds), "failed"]
    rows = [
        [
            r["model"],
            r["system"],
            r["point"],
            *(
                _cell_range(
                    point_at(points, r["model"], r["system"], r["point"]), threshold_column(t), 1
                )
                for t in thresholds
            ),
            f"{int(r['n_failed'] or 0)}/{int(r['n_scored'] or 0)}",
        ]
        for r in continuity_threshold_rows(points, models, systems)
    ]
    title = (
        "Continuous streams (%) at several thresholds: the largest deficit of a player that "
        "starts at the first byte stayed at or under the threshold; [low, high]: 95% Wilson "
        "interval; a failed request counts as not continuous.\n\n"
    )
    return title + markdown_table(header, rows, label_columns=3)


_TTFA_COLUMNS = (
    ("ttfa_s_p50", "first byte p50"),
    ("ttfa_s_p90", "first byte p90"),
    ("ttfa_audible_s_p50", "audible p50"),
    ("perceived_first_audio_s_p50", "perceived p50"),
    ("perceived_first_audio_s_p90", "perceived p90"),
)


def ttfa_rows(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        out: Row = {}
        for column, _ in _TTFA_COLUMNS:
            out.update(_numbers(s, column))
        out.update(n_ok=s.get("n_ok"), n_failed=s.get("n_failed"), n_scored=s.get("n_scored"))
        return out

    return _long_rows(points, models, systems, row)


def ttfa_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    header = ["model", "system", "point", *(name for _, name in _TTFA_COLUMNS), "failed"]
    rows = []
    for r in ttfa_rows(points, models, systems):
        summary = point_at(points, r["model"], r["system"], r["point"])
        cells = [_cell_range(summary, column, 3) for column, _ in _TTFA_COLUMNS]
        rows.append(
            [
                r["model"],
                r["system"],
                r["point"],
                *cells,
                f"{int(r['n_failed'] or 0)}/{int(r['n_scored'] or 0)}",
            ]
        )
    title = (
        "Time to first audio in seconds, over the successful requests: first byte, first "
        "audible sample, and perceived first audio (first byte plus the prebuffer that would "
        "have made that stream gapless, `ttfa_s + max_underrun_s`). [low, high]: the 95% "
        "bootstrap interval over requests (percentiles are skewed, so not ±).\n\n"
    )
    return title + markdown_table(header, rows, label_columns=3)


def cost_rows(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    gpu_hour_usd: float,
    min_continuity_pct: float,
) -> list[Row]:
    return [
        {
            "model": model,
            **{
                f"{system}_usd_per_million_chars": point_cost_at(
                    points, model, system, headline, gpu_hour_usd, min_continuity_pct
                )
                for system in systems
            },
        }
        for model in models
    ]


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
            summary = point_summary(points, model, system, headline)
            cells.append((MISSING if cost is None else f"{cost:.2f}") + failed_mark(summary))
        rows.append([model, *cells])
    title = (
        f"USD per million characters at concurrency {headline} and {gpu_hour_usd:g} USD per "
        f"hour, counting characters delivered continuously; {MISSING} where continuity is "
        f"under {min_continuity_pct:g}% or the point is missing.\n\n"
    )
    return title + markdown_table(header, rows)


def write_table(path: Path, text: str, rows: Sequence[Row]) -> Path:
    """`path` (Markdown) and its CSV beside it (same stem); returns the CSV's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    csv_path = path.with_suffix(".csv")
    pd.DataFrame(list(rows)).to_csv(csv_path, index=False)
    return csv_path


def add_point_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What every report over points.csv reads: the file, the rows and the service level."""
    parser.add_argument("--points", required=True, type=Path)
    parser.add_argument("--models", required=True, nargs="+")
    parser.add_argument("--systems", required=True, nargs="+")
    parser.add_argument("--headline", required=True, type=int, help="headline concurrency")
    parser.add_argument("--gpu-hour-usd", type=float, default=2.99)
    parser.add_argument("--min-continuity-pct", type=float, default=95.0)
    return parser


def report_parser(prog: str, description: str | None, suffix: str) -> argparse.ArgumentParser:
    """The arguments the tables and the figures share; `--ratio` is the tables' own."""
    parser = add_point_arguments(argparse.ArgumentParser(prog=prog, description=description))
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
    m, s = args.models, args.systems
    cost_args = (args.headline, args.gpu_hour_usd, args.min_continuity_pct)
    tables = [
        (
            args.throughput,
            throughput_table(points, m, s, args.headline, args.ratio),
            throughput_rows(points, m, s, args.headline, args.ratio),
        ),
        (args.continuity, continuity_table(points, m, s), continuity_rows(points, m, s)),
        (args.ttfa, ttfa_table(points, m, s), ttfa_rows(points, m, s)),
        (args.cost, cost_table(points, m, s, *cost_args), cost_rows(points, m, s, *cost_args)),
    ]
    for path, text, rows in tables:
        csv_path = write_table(path, text, rows)
        print(f"wrote {path} and {csv_path}")
    if thresholds_of(points):
        extra = args.continuity.with_name("continuity_thresholds.csv")
        pd.DataFrame(continuity_threshold_rows(points, m, s)).to_csv(extra, index=False)
        print(f"wrote {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
