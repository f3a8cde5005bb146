"""Markdown tables (and the same numbers as CSV beside them) from results/points.csv:
throughput, continuity (headline and at each threshold), TTFA, cost.

They print the point summaries and their intervals as points.csv holds them (every one
from `thetalker.metrics`), plus two things computed here, both by `thetalker.metrics`: the
price of a point (`point_cost`, only where continuity reaches the threshold) and the
interval of the ratio column (`rtfx_ratio_interval`, over the records files points.csv
names: paired by round when both systems ran N > 1 rounds, else a bootstrap over each
run's requests). Intervals are 95%: `value ± half-width` for RTFx, `value [low, high]` for
percentages and TTFA percentiles (neither is symmetric). A point with failed requests says
so beside its figure (`(k/n failed)`); a ratio whose interval holds 1.0 is marked `†`, and
a config that names no `report.ratio` gets no ratio column.
Rows follow the config's order of models and systems; a missing point prints `n/a`.
Each `X.md` gets an `X.csv` beside it with one number per cell (value, low, high) for the
report's sortable view; continuity.md's threshold table is `continuity_thresholds.csv`.

    python -m thetalker.report.tables --points results/points.csv --settings JSON|FILE \
        --throughput T.md --continuity C.md --ttfa F.md --cost P.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from thetalker.data import layout
from thetalker.data.record_reads import RecordError, read_rounds
from thetalker.metrics import Interval, rtfx_ratio_interval
from thetalker.report.common import (
    INTERVAL_NOTE,
    MISSING,
    NOT_DISTINGUISHABLE,
    CostBasis,
    Row,
    cell_numbers,
    cell_pm,
    cell_range,
    failed_mark,
    load_points_or_report,
    markdown_table,
    measured_points,
    onset_words,
    point_at,
    point_labels,
    point_summary,
    report_parser,
    thresholds_of,
    write_table,
)
from thetalker.report.machine_cost import machine_cost_row, machine_cost_table
from thetalker.report.output import exit_status, write_output
from thetalker.report.points import threshold_column
from thetalker.report.start_cells import (
    START_KEYS,
    start_cells,
    start_header,
    start_words,
    usable_words,
)

__all__ = [
    "ratio_at",
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
    "main",
]


def _rounds(summary: Mapping[str, Any]) -> list[list[dict]] | None:
    """The records of each round of a point, read from the files points.csv names."""
    files = summary.get("records")
    if not files:
        return None
    try:
        return read_rounds(str(files).split(";"))
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
    ratio: Sequence[str] | None,
) -> list[Row]:
    """One row per model: each system's RTFx with its interval and failures, and the ratio
    (none when the config asks for none)."""
    point = layout.concurrency_label(headline)
    rows = []
    for model in models:
        row: Row = {"model": model}
        for system in systems:
            summary = point_at(points, model, system, point)
            row.update(cell_numbers(summary, "rtfx", f"{system}_rtfx"))
            row[f"{system}_rtfx_method"] = summary.get("rtfx_method") if summary else None
            row[f"{system}_n_failed"] = summary.get("n_failed") if summary else None
            row[f"{system}_n_scored"] = summary.get("n_scored") if summary else None
        if not ratio:
            rows.append(row)
            continue
        ci = ratio_at(points, model, ratio[0], ratio[1], point)
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
    ratio: Sequence[str] | None,
) -> str:
    header = ["model", *systems, *([f"{ratio[0]} / {ratio[1]}"] if ratio else [])]
    point = layout.concurrency_label(headline)
    rows = []
    for model in models:
        cells = []
        for system in systems:
            summary = point_at(points, model, system, point)
            cells.append(cell_pm(summary, "rtfx", 1) + failed_mark(summary))
        if ratio:
            cells.append(_ratio_cell(ratio_at(points, model, ratio[0], ratio[1], point)))
        rows.append([model, *cells])
    title = (
        f"RTFx at concurrency {headline}: seconds of audio delivered per second of wall clock, "
        f"all streams together (a failed request delivers none). {INTERVAL_NOTE}"
    )
    if ratio:
        title += (
            " The ratio's interval [low, high] is paired by round when both systems ran N > 1 "
            f"rounds, else a bootstrap over each run's requests; {NOT_DISTINGUISHABLE}: it "
            "contains 1.0, the two systems are not distinguishable at this point."
        )
    title += "\n\n"
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
    return [
        {"model": model, "system": system, "point": label, **row(model, system, label, summary)}
        for model, system, label, summary in measured_points(
            points, models, systems, point_labels(points)
        )
    ]


def continuity_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        return {
            **cell_numbers(s, "continuity_pct"),
            "n_failed": s.get("n_failed"),
            "n_scored": s.get("n_scored"),
        }

    return _long_rows(points, models, systems, row)


def continuity_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    def cell(model: str, system: str, label: str) -> str:
        summary = point_at(points, model, system, label)
        return cell_range(summary, "continuity_pct", 1) + failed_mark(summary)

    title = (
        "Continuous streams (%), player model max_deficit_0.1s (vllm-omni's): a real-time "
        "player starting at the first byte, never pausing, never fell more than 0.1 s behind; "
        "a failed request counts as not continuous. [low, high]: the 95% Wilson interval "
        "over the scored requests (100% of 10 is not certain).\n\n"
    )
    text = _per_level_table(points, models, systems, cell, title)
    if thresholds_of(points):
        text += "\n" + continuity_thresholds_table(points, models, systems)
    text += "\n" + player_models_table(points, models, systems)
    return text


_PLAYER_COLUMNS = (
    ("continuity_pct", "max_deficit_0.1s %", 1),
    ("stall_gate_pct", "stall_gate %", 1),
    ("no_stall_pct", "no_stall %", 1),
    ("start_buffer_s_p90", "buffer for 90% (s)", 3),
    ("start_buffer_s_p95", "buffer for 95% (s)", 3),
    ("start_buffer_s_p99", "buffer for 99% (s)", 3),
)


def player_models_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    """Continuity of each point under each named player model (thetalker.metrics.players),
    and the start buffer a player needs for 90/95/99% of the streams to play gapless."""
    header = ["model", "system", "point", *(name for _, name, _ in _PLAYER_COLUMNS), "failed"]
    rows = []
    for model, system, label, s in measured_points(points, models, systems, point_labels(points)):
        cells = [_plain(s.get(column), digits) for column, _, digits in _PLAYER_COLUMNS]
        failed = f"{int(s.get('n_failed') or 0)}/{int(s.get('n_scored') or 0)}"
        rows.append([model, system, label, *cells, failed])
    title = (
        "Continuity under each player model (% of the scored requests; a failed request "
        "passes none): max_deficit_0.1s, vllm-omni's never-pausing player at most 0.1 s "
        "behind; stall_gate, the public tts_bench report's per-request gate (a pausing "
        "zero-buffer player's largest stall <= 500 ms and total <= 1000 ms); no_stall, that "
        "player never stalls (tts_bench's `continuous`). Buffer for P%: the least start-up "
        "buffer with which P% of the streams play gapless (nearest rank; n/a where more than "
        "100 - P% could not be played at all, or points.csv predates the figure).\n\n"
    )
    return title + markdown_table(header, rows, label_columns=3)


def _plain(value: Any, digits: int) -> str:
    return MISSING if value is None else f"{float(value):.{digits}f}"


def continuity_threshold_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        out: Row = {}
        for t in thresholds_of(points):
            out.update(cell_numbers(s, threshold_column(t), f"continuity_pct_{t:g}s"))
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
                cell_range(
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
    ("ttfa_audible_s_p95", "audible p95"),
    ("perceived_first_audio_s_p50", "perceived p50"),
    ("perceived_first_audio_s_p90", "perceived p90"),
)


def ttfa_rows(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> list[Row]:
    def row(model: str, system: str, label: str, s: Mapping[str, Any]) -> Row:
        out: Row = {}
        for column, _ in _TTFA_COLUMNS:
            out.update(cell_numbers(s, column))
        out.update(n_ok=s.get("n_ok"), n_failed=s.get("n_failed"), n_scored=s.get("n_scored"))
        out.update(audible_pct=s.get("audible_pct"), n_inaudible=s.get("n_inaudible"))
        out.update({key: s.get(key) for key in START_KEYS})
        return out

    return _long_rows(points, models, systems, row)


def ttfa_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    usable = usable_words(points)
    header = ["model", "system", "point", *(name for _, name in _TTFA_COLUMNS)]
    header += ["audible %", "failed", *start_header(usable)]
    rows = []
    for r in ttfa_rows(points, models, systems):
        summary = point_at(points, r["model"], r["system"], r["point"])
        cells = [cell_range(summary, column, 3) for column, _ in _TTFA_COLUMNS]
        audible = (summary or {}).get("audible_pct")
        inaudible = int((summary or {}).get("n_inaudible") or 0)
        rows.append(
            [
                r["model"],
                r["system"],
                r["point"],
                *cells,
                _plain(audible, 1) + (f" ({inaudible} inaudible)" if inaudible else ""),
                f"{int(r['n_failed'] or 0)}/{int(r['n_scored'] or 0)}",
                *start_cells(summary),
            ]
        )
    title = (
        "Time to first audio in seconds, over the successful requests: first byte, first "
        f"audible sample ({onset_words(points, detail=True)}; a stream with no onset is "
        "inaudible: it has "
        "no audible time and counts against audible %, never as audible at once), and "
        "perceived first audio (first byte plus the prebuffer that would have made that "
        "stream gapless, `ttfa_s + max_underrun_s`). [low, high]: the 95% interval over "
        "requests where points.csv has one, a percentile bootstrap, or from 5,000 requests "
        "the order-statistic interval (`ttfa_s_method` says which; percentiles are skewed, "
        f"so not ±). {start_words(usable)}\n\n"
    )
    return title + markdown_table(header, rows, label_columns=3)


def cost_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], basis: CostBasis
) -> list[Row]:
    return [
        {
            "model": model,
            **{
                f"{system}_usd_per_million_chars": basis.cost(points, model, system)
                for system in systems
            },
            **machine_cost_row(points, model, systems, basis.headline),
        }
        for model in models
    ]


def cost_table(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], basis: CostBasis
) -> str:
    headline, gpu_hour_usd, min_continuity_pct = basis
    header = ["model", *systems]
    rows = []
    for model in models:
        cells = []
        for system in systems:
            cost = basis.cost(points, model, system)
            summary = point_summary(points, model, system, headline)
            cells.append((MISSING if cost is None else f"{cost:.2f}") + failed_mark(summary))
        rows.append([model, *cells])
    title = (
        f"USD per million characters at concurrency {headline} and {gpu_hour_usd:g} USD per "
        f"hour, counting characters delivered continuously; {MISSING} where continuity is "
        f"under {min_continuity_pct:g}% or the point is missing.\n\n"
    )
    machine = machine_cost_table(points, models, systems, headline)
    return title + markdown_table(header, rows) + "\n" + machine


def _parser() -> argparse.ArgumentParser:
    return report_parser("python -m thetalker.report.tables", __doc__, ".md")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    m, s = args.models, args.systems
    basis = CostBasis(args.headline, args.gpu_hour_usd, args.min_continuity_pct)
    tables = [
        (
            args.throughput,
            throughput_table(points, m, s, args.headline, args.ratio),
            throughput_rows(points, m, s, args.headline, args.ratio),
        ),
        (args.continuity, continuity_table(points, m, s), continuity_rows(points, m, s)),
        (args.ttfa, ttfa_table(points, m, s), ttfa_rows(points, m, s)),
        (args.cost, cost_table(points, m, s, basis), cost_rows(points, m, s, basis)),
    ]

    def write() -> None:
        for path, text, rows in tables:
            csv_path = write_table(path, text, rows, args.note)
            print(f"wrote {path} and {csv_path}")
        if thresholds_of(points):
            extra = args.continuity.with_name("continuity_thresholds.csv")
            frame = pd.DataFrame(continuity_threshold_rows(points, m, s))
            write_output(extra, lambda tmp: frame.to_csv(tmp, index=False))
            print(f"wrote {extra}")

    return exit_status(write)


if __name__ == "__main__":
    sys.exit(main())
