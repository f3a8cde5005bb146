"""The agent mode's table and figure (results/tables/agent.md, results/figures/agent.png).

From the records of the systems run with `protocol: websocket` (text streamed in as an LLM
writes it, audio streamed out): per (system, model, concurrency) the first audio from the
first text piece and from `input.done`, the lag of each sentence's audio behind its last
word (as received and as heard by a player that started at the first frame), continuity,
stalls and RTFx, each with its 95% interval from `thetalker.metrics.agent_intervals`
(`value [low, high]`; RTFx `value ± half-width`). A point with failed sessions says so.
`agent.csv` beside the table holds the same numbers, one per cell.

    python -m thetalker.report.agent --records results/runs/S/M/cN/records.jsonl ... \\
        --table results/tables/agent.md --figure results/figures/agent.png

Each records file is named by its place in the layout: `.../{system}/{model}/c{n}/records.jsonl`.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.data.records import RecordError, read_records
from thetalker.metrics import Interval, agent_intervals
from thetalker.report.common import MISSING, fmt_pm, fmt_range
from thetalker.report.markdown import md_cell

__all__ = [
    "AgentPoint",
    "load_point",
    "load_points",
    "agent_table",
    "agent_rows",
    "agent_figure",
    "main",
]

HEADER = (
    "System",
    "Model",
    "Streams",
    "Pace",
    "First audio from first text p50 (s)",
    "p90 (s)",
    "First audio from input.done p50 (s)",
    "Sentence lag p50 (s)",
    "Heard lag p50 (s)",
    "Heard lag p90 (s)",
    "Continuity (%)",
    "Stalls / session",
    "RTFx",
)


class AgentPoint:
    """One point's figures, from its records (not kept: a table of many points holds one
    point's records at a time, and a worker process hands back figures, not records)."""

    def __init__(self, system: str, model: str, concurrency: int, records: list[dict]) -> None:
        self.system = system
        self.model = model
        self.concurrency = concurrency
        self.figures = agent_intervals(records)
        options = _first_scored(records)
        self.pace = _pace(options)


def _first_scored(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    for r in records:
        if not r.get("warmup"):
            return r
    return {}


def _pace(record: Mapping[str, Any]) -> str:
    """`N words/s, sentence` from one record's own timeline (what was really sent)."""
    times = record.get("text_piece_s") or []
    split = record.get("split_granularity") or "?"
    if len(times) < 2 or times[-1] <= times[0]:
        return f"whole text, {split}"
    return f"{(len(times) - 1) / (times[-1] - times[0]):.0f} words/s, {split}"


def load_point(path: str | Path) -> AgentPoint:
    path = Path(path)
    try:
        where = layout.point_location(path)
    except layout.PointPathError:
        where = None
    if where is None or where.concurrency is None:
        raise RecordError(f"{path}: not under a c<N> point folder ({path.parent.name})")
    records = list(read_records(path))
    return AgentPoint(where.system, where.model, where.concurrency, records)


def load_points(paths: Sequence[str | Path], jobs: int = 1) -> list[AgentPoint]:
    """`load_point` of each path, in order; `jobs` > 1: that many processes at once (each
    point's figures are its own, so the same points)."""
    if jobs <= 1 or len(paths) <= 1:
        return [load_point(p) for p in paths]
    from concurrent.futures import ProcessPoolExecutor

    import scipy.stats  # noqa: F401  (loaded once here: forked workers inherit it)

    with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
        return list(pool.map(load_point, paths))


def _range(ci: Interval, digits: int = 2) -> str:
    return fmt_range(ci.value, ci.low, ci.high, digits)


def _pm(ci: Interval, digits: int = 2) -> str:
    return fmt_pm(ci.value, ci.low, ci.high, digits)


def _failed(p: AgentPoint) -> str:
    failed = p.figures["n_scored"] - p.figures["n_ok"]
    return f" ({failed}/{p.figures['n_scored']} failed)" if failed else ""


def agent_rows(points: Sequence[AgentPoint]) -> list[list[str]]:
    rows = []
    for p in points:
        f = p.figures
        stalls = f["stalls_per_session"]
        rows.append(
            [
                p.system,
                p.model,
                str(p.concurrency),
                p.pace,
                _range(f["ttfa_first_text_s_p50"]) + _failed(p),
                _range(f["ttfa_first_text_s_p90"]),
                _range(f["ttfa_input_done_s_p50"]),
                _range(f["sentence_lag_s_p50"]),
                _range(f["sentence_heard_lag_s_p50"]),
                _range(f["sentence_heard_lag_s_p90"]),
                _range(f["continuity_pct"], 1),
                MISSING if stalls is None else f"{stalls:.2f}",
                _pm(f["rtfx"]),
            ]
        )
    return rows


def agent_table(points: Sequence[AgentPoint]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |"]
    lines.append("|" + "|".join([" --- "] * 4 + [" ---: "] * (len(HEADER) - 4)) + "|")
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in agent_rows(points)]
    note = (
        "\nFirst audio from first text: what a voice agent's user waits from the LLM's first "
        "words; from input.done: from its last word (negative: audio began before the text "
        "ended). Sentence lag: a sentence's first audio minus the time its last word was sent; "
        "heard: when a player that started at the first frame begins to play it. Intervals "
        "95% (bootstrap over sessions, or over the sentences of all sessions; continuity: "
        "Wilson, a failed session counts as not continuous).\n"
    )
    return "\n".join(lines) + "\n" + note


_CSV_FIGURES = (
    "ttfa_first_text_s_p50",
    "ttfa_first_text_s_p90",
    "ttfa_input_done_s_p50",
    "ttfa_input_done_s_p90",
    "sentence_lag_s_p50",
    "sentence_lag_s_p90",
    "sentence_heard_lag_s_p50",
    "sentence_heard_lag_s_p90",
    "continuity_pct",
    "rtfx",
)


def write_csv(points: Sequence[AgentPoint], path: Path) -> None:
    columns = ["system", "model", "concurrency", "pace", "n_scored", "n_ok", "stalls_per_session"]
    for name in _CSV_FIGURES:
        columns += [name, f"{name}_low", f"{name}_high"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for p in points:
            f = p.figures
            row: list[Any] = [p.system, p.model, p.concurrency, p.pace, f["n_scored"], f["n_ok"]]
            row.append(f["stalls_per_session"])
            for name in _CSV_FIGURES:
                row += [f[name].value, f[name].low, f[name].high]
            writer.writerow(row)


def agent_figure(points: Sequence[AgentPoint], out: Path) -> None:
    """First audio from the first text and the heard sentence lag (p50, 95% interval) against
    the streams, one line per (system, model)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    series: dict[tuple[str, str], list[AgentPoint]] = {}
    for p in points:
        series.setdefault((p.system, p.model), []).append(p)
    panels = (
        ("ttfa_first_text_s_p50", "First audio from first text, p50 (s)"),
        ("sentence_heard_lag_s_p50", "Sentence lag as heard, p50 (s)"),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        for (system, model), pts in series.items():
            pts = sorted(pts, key=lambda q: q.concurrency)
            xs, ys, lo, hi = [], [], [], []
            for q in pts:
                ci = q.figures[key]
                if ci.value is None:
                    continue
                xs.append(q.concurrency)
                ys.append(ci.value)
                lo.append(ci.value - (ci.low if ci.low is not None else ci.value))
                hi.append((ci.high if ci.high is not None else ci.value) - ci.value)
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=f"{system} / {model}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent sessions")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.agent", description=__doc__)
    parser.add_argument("--records", nargs="+", required=True, help="records.jsonl of points")
    parser.add_argument("--table", required=True, help="agent.md (agent.csv goes beside it)")
    parser.add_argument("--figure", help="agent.png")
    parser.add_argument(
        "--jobs", type=int, default=1, help="points computed at once, one process each"
    )
    args = parser.parse_args(argv)
    try:
        points = load_points(args.records, args.jobs)
    except (RecordError, OSError) as exc:
        print(f"agent table: {exc}", file=sys.stderr)
        return 2
    table = Path(args.table)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(agent_table(points), encoding="utf-8")
    write_csv(points, table.with_suffix(".csv"))
    if args.figure:
        agent_figure(points, Path(args.figure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
