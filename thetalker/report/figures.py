"""PNG figures from results/points.csv (matplotlib, Agg backend, fixed sizes).

One function per figure: throughput bars by system at the headline concurrency, continuity
against concurrency, TTFA p50 against concurrency on log axes (hollow markers where
continuity is under the threshold), and cost bars sorted by price. They read the point
summaries; the price is `thetalker.metrics.point_cost`.

    python -m thetalker.report.figures --points results/points.csv --models M... \
        --systems S... --headline 32 --throughput T.png --continuity C.png --ttfa F.png \
        --cost P.png
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402

from thetalker.report.tables import (  # noqa: E402
    concurrency_levels,
    load_points_or_report,
    point_cost_at,
    point_summary,
    point_value,
    report_parser,
)

__all__ = [
    "FIGSIZE",
    "throughput_figure",
    "continuity_figure",
    "ttfa_figure",
    "cost_figure",
    "main",
]

FIGSIZE = (8.0, 4.5)
DPI = 120


def _save(fig: plt.Figure, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def throughput_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], headline: int, out: Path
) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    x = np.arange(len(models))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        values = [point_value(points, m, system, headline, "rtfx") or 0.0 for m in models]
        ax.bar(x + (i - (len(systems) - 1) / 2) * width, values, width, label=system)
    ax.set_xticks(x, list(models))
    ax.set_ylabel("RTFx (audio s per wall s)")
    ax.set_title(f"Throughput at concurrency {headline}")
    ax.legend()
    _save(fig, out)


def continuity_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    levels = concurrency_levels(points)
    for model in models:
        for system in systems:
            ys = [point_value(points, model, system, c, "continuity_pct") for c in levels]
            xs = [c for c, y in zip(levels, ys, strict=True) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], marker="o", label=f"{model} {system}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_ylim(0, 105)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("continuous streams (%)")
    ax.set_title("Stream continuity")
    ax.legend(fontsize="small")
    _save(fig, out)


def ttfa_figure(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    min_continuity_pct: float,
    out: Path,
) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    levels = concurrency_levels(points)
    for model in models:
        for system in systems:
            xs, ys, continuous = [], [], []
            for c in levels:
                summary = point_summary(points, model, system, c)
                if summary is None or summary.get("ttfa_s_p50") is None:
                    continue
                xs.append(c)
                ys.append(summary["ttfa_s_p50"])
                continuous.append((summary.get("continuity_pct") or 0.0) >= min_continuity_pct)
            if not xs:
                continue
            (line,) = ax.plot(xs, ys, label=f"{model} {system}")
            colour = line.get_color()
            # Filled where streams were continuous enough, hollow where they were not.
            for x, y, ok in zip(xs, ys, continuous, strict=True):
                ax.plot(x, y, "o", color=colour, markerfacecolor=colour if ok else "none")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    # Plain seconds on the log axis, not powers of ten.
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("TTFA p50 (s)")
    ax.set_title(f"Time to first audio (hollow: continuity < {min_continuity_pct:g}%)")
    ax.legend(fontsize="small")
    _save(fig, out)


def cost_figure(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    headline: int,
    gpu_hour_usd: float,
    min_continuity_pct: float,
    out: Path,
) -> None:
    bars = []
    for model in models:
        for system in systems:
            cost = point_cost_at(points, model, system, headline, gpu_hour_usd, min_continuity_pct)
            if cost is not None:
                bars.append((cost, f"{model}\n{system}"))
    bars.sort()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.bar(range(len(bars)), [c for c, _ in bars])
    ax.set_xticks(range(len(bars)), [label for _, label in bars], fontsize="small")
    ax.set_ylabel("USD per million characters")
    ax.set_title(f"Cost at concurrency {headline}, {gpu_hour_usd:g} USD/h (cheapest first)")
    _save(fig, out)


def main(argv: Sequence[str] | None = None) -> int:
    args = report_parser("python -m thetalker.report.figures", __doc__, ".png").parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    throughput_figure(points, args.models, args.systems, args.headline, args.throughput)
    continuity_figure(points, args.models, args.systems, args.continuity)
    ttfa_figure(points, args.models, args.systems, args.min_continuity_pct, args.ttfa)
    cost_figure(
        points,
        args.models,
        args.systems,
        args.headline,
        args.gpu_hour_usd,
        args.min_continuity_pct,
        args.cost,
    )
    for path in (args.throughput, args.continuity, args.ttfa, args.cost):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
