"""by_rate.md and by_rate.png: the public report's load shape, p95 audible first audio by
request rate per system.

From results/points.csv, the open-loop points (`r{R}`: Poisson arrivals at R requests per
second, seeded, with `max_in_flight` capping the requests in flight): for each (model,
system) and rate, the p95 of audible first audio (the -45 dBFS onset, as the public
`tts_bench` report; inaudible streams have no audible time and are counted beside it), the
p95 first byte, the share of streams passing the report's stall gate, the arrivals dropped at
the cap, the scheduling lag (p95 and max: how late the client sent on its schedule; a
large one means the client, not the server, shaped the load), and the failures. A CSV with
the same numbers is written beside.

TheTalker's percentiles are linear (numpy's default) over the successful requests of one
run; the public table gives nearest-rank p95s, aggregated as the median over seeds 0, 1, 2
(docs/capacity.md, "The public report's load shape", says where the definitions differ).

    python -m thetalker.report.by_rate --points results/points.csv --settings JSON|FILE \\
        --table by_rate.md --figure by_rate.png

(the report settings, thetalker.report.settings: the rows are its models and systems)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from thetalker.report.common import (  # noqa: E402
    DPI,
    FIGSIZE,
    MISSING,
    load_points_or_report,
    markdown_table,
    measured_points,
    onset_words,
    point_labels,
    save_figure,
    table_figure_parser,
    write_table_and_figure,
)

__all__ = ["rate_labels", "by_rate_rows", "by_rate_table", "by_rate_figure", "main"]


def rate_labels(points: pd.DataFrame) -> list[str]:
    """The open-loop points' labels (`r0.5`, `r2`), by rate."""
    return [label for label in point_labels(points) if label.startswith("r")]


def _ms(value: Any) -> float | None:
    return None if value is None else 1000.0 * float(value)


def by_rate_rows(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]
) -> list[dict[str, Any]]:
    return [
        {
            "model": model,
            "system": system,
            "request_rate": float(label[1:]),
            "ttfa_audible_ms_p95": _ms(s.get("ttfa_audible_s_p95")),
            "ttfa_ms_p95": _ms(s.get("ttfa_s_p95")),
            "audible_pct": s.get("audible_pct"),
            "n_inaudible": s.get("n_inaudible"),
            "stall_gate_pct": s.get("stall_gate_pct"),
            "n_dropped": s.get("n_dropped"),
            "schedule_lag_ms_p95": _ms(s.get("schedule_lag_s_p95")),
            "schedule_lag_ms_max": _ms(s.get("schedule_lag_s_max")),
            "n_failed": s.get("n_failed"),
            "n_scored": s.get("n_scored"),
        }
        for model, system, label, s in measured_points(points, models, systems, rate_labels(points))
    ]


def _cell(value: Any, digits: int) -> str:
    return MISSING if value is None else f"{float(value):.{digits}f}"


def _count(row: Mapping[str, Any], key: str) -> str:
    return MISSING if row.get(key) is None else str(int(row[key]))


def by_rate_table(points: pd.DataFrame, models: Sequence[str], systems: Sequence[str]) -> str:
    rows = by_rate_rows(points, models, systems)
    header = ["model", "system", "req/s", "audible p95 (ms)", "first byte p95 (ms)"]
    header += ["audible %", "stall_gate %", "dropped", "sched. lag p95 / max (ms)", "failed"]
    body = []
    for r in rows:
        inaudible = int(r["n_inaudible"] or 0)
        lag = f"{_cell(r['schedule_lag_ms_p95'], 1)} / {_cell(r['schedule_lag_ms_max'], 1)}"
        body.append(
            [
                r["model"],
                r["system"],
                f"{r['request_rate']:g}",
                _cell(r["ttfa_audible_ms_p95"], 1),
                _cell(r["ttfa_ms_p95"], 1),
                _cell(r["audible_pct"], 1) + (f" ({inaudible} inaudible)" if inaudible else ""),
                _cell(r["stall_gate_pct"], 1),
                _count(r, "n_dropped"),
                lag,
                f"{int(r['n_failed'] or 0)}/{int(r['n_scored'] or 0)}",
            ]
        )
    title = (
        "By request rate (open loop, the public tts_bench report's load shape): p95 audible "
        f"first audio in ms ({onset_words(points)}; inaudible streams have none and are counted "
        "in audible %), p95 first byte, the share passing the report's stall gate (largest "
        "stall <= 500 ms, total <= 1000 ms), arrivals dropped at max_in_flight (never sent, "
        "not scored), the client's scheduling lag, failures. Percentiles: linear over one "
        "run's successful requests (the published table: nearest rank, median of 3 seeds).\n\n"
    )
    if not body:
        return title + "No open-loop points (config request_rates is empty).\n"
    return title + markdown_table(header, body, label_columns=2)


def by_rate_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    """p95 audible first audio (ms) against request rate, one line per (model, system)."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    rows = by_rate_rows(points, models, systems)
    for model in models:
        for system in systems:
            mine = [
                r
                for r in rows
                if r["model"] == model
                and r["system"] == system
                and r["ttfa_audible_ms_p95"] is not None
            ]
            if mine:
                xs = [r["request_rate"] for r in mine]
                ys = [r["ttfa_audible_ms_p95"] for r in mine]
                ax.plot(xs, ys, marker="o", label=f"{model} {system}")
    ax.set_xlabel("request rate (req/s, Poisson)")
    ax.set_ylabel("audible first audio p95 (ms)")
    ax.set_title(f"p95 audible first audio by request rate ({onset_words(points)})")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    save_figure(fig, out, DPI)


def main(argv: Sequence[str] | None = None) -> int:
    parser = table_figure_parser("python -m thetalker.report.by_rate", __doc__, "by_rate")
    args = parser.parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    return write_table_and_figure(
        args,
        by_rate_table(points, args.models, args.systems),
        by_rate_rows(points, args.models, args.systems),
        lambda out: by_rate_figure(points, args.models, args.systems, out),
    )


if __name__ == "__main__":
    sys.exit(main())
