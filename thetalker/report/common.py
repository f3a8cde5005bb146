"""What every report module shares: reading results/points.csv (one row per point, every
summary figure), finding a point, formatting a cell (value ± half-width, value [low, high],
a failed-requests mark), writing a Markdown table with its CSV beside it, and the command
line arguments every table and figure takes."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from thetalker.data import layout
from thetalker.metrics import point_cost
from thetalker.pipeline.machine_load import busy_mark
from thetalker.report.markdown import md_cell
from thetalker.report.output import exit_status, write_output  # whole or not at all, named
from thetalker.report.settings import add_settings_argument

__all__ = [
    "CostBasis",
    "point_cost_at",
    "MISSING",
    "NOT_DISTINGUISHABLE",
    "STOCK_CONTAMINATED",
    "PointsError",
    "load_points",
    "point_at",
    "point_summary",
    "point_value",
    "point_labels",
    "concurrency_levels",
    "thresholds_of",
    "fmt_pm",
    "fmt_range",
    "failed_mark",
    "onset_words",
    "markdown_table",
    "write_table",
    "add_point_arguments",
    "report_parser",
    "load_points_or_report",
    "FIGSIZE",
    "DPI",
]

MISSING = "n/a"
FIGSIZE = (8.0, 4.5)  # every one-panel report figure, inches
DPI = 120  # every report figure's resolution
NOT_DISTINGUISHABLE = "†"
STOCK_CONTAMINATED = "(stock contaminated: see provenance.md)"
_REQUIRED_COLUMNS = ("system", "model", "concurrency", "rtfx", "continuity_pct", "chars_per_s")
_THRESHOLD_COLUMN = re.compile(r"^continuity_pct_(\d+(?:\.\d+)?)s$")
INTERVAL_NOTE = (
    "± is half the 95% interval: over the N rounds of the point (Student t) when it ran "
    "N > 1 times, else a bootstrap over the run's requests with its window kept (from "
    "5,000 requests, the normal interval of that sum: `rtfx_method` says which)."
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
        points["point"] = [layout.concurrency_label(c) for c in points["concurrency"]]
    return points


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def point_at(points: pd.DataFrame, model: str, system: str, point: str) -> dict | None:
    """One point's row by its label (`c8`, `r2.5`) as a dict (NaN as None), or None."""
    rows = points[
        (points["model"] == model) & (points["system"] == system) & (points["point"] == point)
    ]
    if rows.empty:
        return None
    return {k: (None if is_nan(v) else v) for k, v in rows.iloc[0].to_dict().items()}


def measured_points(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], labels: Sequence[str]
) -> Iterator[tuple[str, str, str, dict]]:
    """(model, system, label, summary) of each of these points that was run, in row order:
    by model, then system, then label."""
    for model in models:
        for system in systems:
            for label in labels:
                summary = point_at(points, model, system, label)
                if summary is not None:
                    yield model, system, label, summary


def point_summary(points: pd.DataFrame, model: str, system: str, concurrency: int) -> dict | None:
    """One closed-loop point's row as a dict (NaN as None), or None when it was not run."""
    return point_at(points, model, system, layout.concurrency_label(concurrency))


def point_value(
    points: pd.DataFrame, model: str, system: str, concurrency: int, column: str
) -> float | None:
    summary = point_summary(points, model, system, concurrency)
    return None if summary is None else summary.get(column)


def point_labels(points: pd.DataFrame) -> list[str]:
    """Every point label: closed-loop by concurrency, then open-loop by rate."""
    return layout.sort_point_labels(points["point"])


def concurrency_levels(points: pd.DataFrame) -> list[int]:
    return sorted(int(c) for c in points["concurrency"].dropna().unique())


def thresholds_of(points: pd.DataFrame) -> list[float]:
    """The continuity thresholds (s) points.csv has columns for."""
    found = [_THRESHOLD_COLUMN.match(c) for c in points.columns]
    return sorted(float(m.group(1)) for m in found if m)


def _fmt(value: float | None, interval: str | None, digits: int) -> str:
    if value is None:
        return MISSING
    return f"{value:.{digits}f}" + (f" {interval}" if interval else "")


def fmt_pm(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    """`v ± h` (half the interval), `v` alone when there is no interval, n/a when no value."""
    known = low is not None and high is not None
    return _fmt(value, f"± {(high - low) / 2:.{digits}f}" if known else None, digits)  # type: ignore[operator]


def fmt_range(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    """`v [l, h]`, for intervals that are not symmetric (Wilson)."""
    known = low is not None and high is not None
    return _fmt(value, f"[{low:.{digits}f}, {high:.{digits}f}]" if known else None, digits)


def failed_mark(summary: Mapping[str, Any] | None) -> str:
    """` (k/n failed)` for a point with failed requests, ` (k inaudible)` for one with
    streams that had no audible onset (thetalker.metrics.onset), and ` (stock
    contaminated)` for a point whose provenance says a stock server ran with the optimized
    library installed (points.csv's `stock_contaminated`), and ` (busy machine: N% CPU by
    others)` for one measured while other processes took at least `BUSY_OTHER_CPU_PCT` of
    the machine's CPU (points.csv's `other_cpu_pct`); else empty."""
    if not summary:
        return ""
    failed = int(summary.get("n_failed") or 0)
    mark = f" ({failed}/{int(summary.get('n_scored') or 0)} failed)" if failed else ""
    inaudible = int(summary.get("n_inaudible") or 0)
    mark += f" ({inaudible} inaudible)" if inaudible else ""
    contaminated = summary.get("stock_contaminated")
    if contaminated is True or str(contaminated).lower() == "true":
        mark += f" {STOCK_CONTAMINATED}"
    return mark + busy_mark(summary.get("other_cpu_pct"))


def onset_words(points: pd.DataFrame, detail: bool = False) -> str:
    """How a caption names the audible onset the points' records were measured by
    (points.csv's `audible_onset_rule`): the public report's -45 dBFS rule (`detail`: its
    settings in words) when no point names another, else the rules named, so a table of
    another rule never says -45 dBFS."""
    from thetalker.metrics import DEFAULT_ONSET

    column = points.get("audible_onset_rule", [])
    rules = sorted({str(v) for v in column if isinstance(v, str) and v})
    if not [r for r in rules if r != DEFAULT_ONSET.label()]:
        if not detail:
            return "the -45 dBFS onset"
        return (
            "the public report's onset: -45 dBFS RMS after per-frame DC removal, 20 ms frames "
            "every 10 ms, 2 in a row"
        )
    named = "; ".join(rules)
    words = " RMS after per-frame DC removal" if detail else ""
    return (
        f"the onset by {named} (threshold dBFS{words}, frame, hop, frames in a row; the "
        f"public report's rule is {DEFAULT_ONSET.label()})"
    )


def cell_pm(summary: Mapping[str, Any] | None, column: str, digits: int) -> str:
    if summary is None:
        return MISSING
    value = summary.get(column)
    return fmt_pm(value, summary.get(f"{column}_low"), summary.get(f"{column}_high"), digits)


def cell_range(summary: Mapping[str, Any] | None, column: str, digits: int) -> str:
    if summary is None:
        return MISSING
    value = summary.get(column)
    return fmt_range(value, summary.get(f"{column}_low"), summary.get(f"{column}_high"), digits)


def cell_numbers(summary: Mapping[str, Any] | None, column: str, prefix: str = "") -> Row:
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
    """A GitHub Markdown table: label columns left-aligned, numbers right-aligned. Every
    cell is `md_cell` of what it holds (a server's label, a name): one line, its `|` escaped,
    HTML's `&<>` as entities, so a cell can never break its row or become markup."""
    lines = ["| " + " | ".join(header) + " |"]
    aligns = [" --- "] * label_columns + [" ---: "] * (len(header) - label_columns)
    lines.append("|" + "|".join(aligns) + "|")
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_table(path: Path, text: str, rows: Sequence[Row], note: str | None = None) -> Path:
    """`path` (Markdown) and its CSV beside it (same stem); returns the CSV's path. A `note`
    (report.note) opens the Markdown, before the table's own caption."""
    text = f"{note}\n\n{text}" if note else text
    write_output(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    csv_path = path.with_suffix(".csv")
    frame = pd.DataFrame(list(rows))
    write_output(csv_path, lambda tmp: frame.to_csv(tmp, index=False))
    return csv_path


def add_point_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What every report over points.csv reads: the file, and the report settings (the rows,
    the headline point, the price, the service level: thetalker.report.settings), each
    setting an attribute of the parsed arguments (args.models, args.headline, ...)."""
    parser.add_argument("--points", required=True, type=Path)
    return add_settings_argument(parser)


def report_parser(prog: str, description: str | None, suffix: str) -> argparse.ArgumentParser:
    """The arguments the tables and the figures share (the settings' ratio is the tables')."""
    parser = add_point_arguments(argparse.ArgumentParser(prog=prog, description=description))
    for name in ("throughput", "continuity", "ttfa", "cost"):
        parser.add_argument(f"--{name}", required=True, type=Path, help=f"{name}{suffix} to write")
    return parser


def table_figure_parser(prog: str, description: str | None, name: str) -> argparse.ArgumentParser:
    """A report of one table (`--table NAME.md`, its CSV beside it) and an optional figure."""
    parser = add_point_arguments(argparse.ArgumentParser(prog=prog, description=description))
    parser.add_argument("--table", required=True, type=Path, help=f"{name}.md to write")
    parser.add_argument("--figure", type=Path, help=f"{name}.png to write")
    return parser


def write_table_and_figure(
    args: argparse.Namespace, text: str, rows: Sequence[Row], draw: Callable[[Path], None]
) -> int:
    """`args.table` and its CSV, then `args.figure` drawn by `draw(path)` when one is asked
    for; the exit status (thetalker.report.output.exit_status)."""

    def write() -> None:
        csv_path = write_table(args.table, text, rows, getattr(args, "note", None))
        print(f"wrote {args.table} and {csv_path}")
        if args.figure:
            draw(args.figure)
            print(f"wrote {args.figure}")

    return exit_status(write)


def save_figure(fig: Any, out: Path, dpi: int) -> None:
    """Lay `fig` out and write it to `out` whole or not at all, then close it."""
    import matplotlib.pyplot as plt  # the report module has chosen the Agg backend already

    fig.tight_layout()
    try:
        write_output(out, lambda tmp: fig.savefig(tmp, dpi=dpi))
    finally:
        plt.close(fig)


def load_points_or_report(path: Path) -> pd.DataFrame | None:
    """points.csv, or None after printing the one-line reason it cannot be read."""
    try:
        return load_points(path)
    except (PointsError, OSError, pd.errors.ParserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


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


class CostBasis(NamedTuple):
    """What a price is taken at, the same for the cost table, its rows and its figure: the
    headline concurrency, the machine's USD per hour and the continuity a priced point needs."""

    headline: int
    gpu_hour_usd: float
    min_continuity_pct: float

    def cost(self, points: pd.DataFrame, model: str, system: str) -> float | None:
        """`point_cost_at` of (model, system) at the headline concurrency."""
        return point_cost_at(points, model, system, *self)
