"""PNG figures from results/points.csv (matplotlib, Agg backend, fixed sizes).

One function per figure: throughput bars by system at the headline concurrency, continuity
against concurrency, TTFA p50 against concurrency on log axes (hollow markers where
continuity is under the threshold), cost bars sorted by price, continuity at each threshold
of points.csv (one panel per threshold), and perceived first audio (p50 and p90 of first
byte plus the gapless prebuffer) against concurrency, and the start buffer for 90/95/99%
gapless playback against concurrency. Error bars are the 95% intervals
points.csv holds (RTFx: repeats or bootstrap; continuity: Wilson; TTFA: bootstrap). They
read the point summaries; the price is `thetalker.metrics.point_cost`. Closed-loop points
only: the x axis is concurrency.

    python -m thetalker.report.figures --points results/points.csv --models M... \
        --systems S... --headline 32 --throughput T.png --continuity C.png --ttfa F.png \
        --cost P.png [--continuity-thresholds CT.png] [--perceived PF.png] \
        [--start-buffer SB.png]
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

from thetalker.report.common import (  # noqa: E402
    DPI,
    FIGSIZE,
    CostBasis,
    concurrency_levels,
    load_points_or_report,
    point_summary,
    report_parser,
    save_figure,
    thresholds_of,
)
from thetalker.report.output import ReportWriteError  # noqa: E402
from thetalker.report.points import threshold_column  # noqa: E402

__all__ = [
    "throughput_figure",
    "continuity_figure",
    "ttfa_figure",
    "cost_figure",
    "continuity_thresholds_figure",
    "perceived_figure",
    "start_buffer_figure",
    "main",
]


def _save(fig: plt.Figure, out: Path) -> None:
    save_figure(fig, out, DPI)


def _yerr(summaries: Sequence[dict | None], column: str) -> tuple[list[float], np.ndarray]:
    """Values of `column` (0 where missing) and matplotlib's asymmetric error bars from
    `column_low` / `column_high` (0 where there is no interval)."""
    values, below, above = [], [], []
    for s in summaries:
        value = (s or {}).get(column)
        low, high = (s or {}).get(f"{column}_low"), (s or {}).get(f"{column}_high")
        values.append(value or 0.0)
        ok = value is not None and low is not None and high is not None
        below.append(max(0.0, value - low) if ok else 0.0)
        above.append(max(0.0, high - value) if ok else 0.0)
    return values, np.array([below, above])


def _series(
    points: pd.DataFrame, model: str, system: str, column: str
) -> tuple[list[int], list[float], np.ndarray]:
    """(concurrency, value, error bars) of one (model, system) where `column` has a value."""
    levels = concurrency_levels(points)
    found = [(c, point_summary(points, model, system, c)) for c in levels]
    found = [(c, s) for c, s in found if s is not None and s.get(column) is not None]
    values, err = _yerr([s for _, s in found], column)
    return [c for c, _ in found], values, err


def throughput_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], headline: int, out: Path
) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    x = np.arange(len(models))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        summaries = [point_summary(points, m, system, headline) for m in models]
        values, err = _yerr(summaries, "rtfx")
        offset = x + (i - (len(systems) - 1) / 2) * width
        ax.bar(offset, values, width, yerr=err, capsize=3, label=system)
    ax.set_xticks(x, list(models))
    ax.set_ylabel("RTFx (audio s per wall s), 95% interval")
    ax.set_title(f"Throughput at concurrency {headline}")
    ax.legend()
    _save(fig, out)


def _continuity_panel(
    ax: plt.Axes, points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], column: str
) -> None:
    """Each model and system's `column` (a continuity %) against concurrency, log2 axis."""
    levels = concurrency_levels(points)
    for model in models:
        for system in systems:
            xs, ys, err = _series(points, model, system, column)
            if xs:
                ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{model} {system}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_ylim(0, 105)
    ax.set_xlabel("concurrency")


def continuity_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    _continuity_panel(ax, points, models, systems, "continuity_pct")
    ax.set_ylabel("continuous streams (%)")
    ax.set_title("Stream continuity (95% Wilson interval)")
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
            _, _, err = _series(points, model, system, "ttfa_s_p50")
            bars = ax.errorbar(xs, ys, yerr=err, capsize=3, label=f"{model} {system}")
            colour = bars.lines[0].get_color()
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
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], basis: CostBasis, out: Path
) -> None:
    bars = []
    for model in models:
        for system in systems:
            cost = basis.cost(points, model, system)
            if cost is not None:
                bars.append((cost, f"{model}\n{system}"))
    bars.sort()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.bar(range(len(bars)), [c for c, _ in bars])
    ax.set_xticks(range(len(bars)), [label for _, label in bars], fontsize="small")
    ax.set_ylabel("USD per million characters")
    ax.set_title(
        f"Cost at concurrency {basis.headline}, {basis.gpu_hour_usd:g} USD/h (cheapest first)"
    )
    _save(fig, out)


def continuity_thresholds_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    """One panel per threshold of points.csv: continuity against concurrency."""
    thresholds = thresholds_of(points) or [0.1]
    fig, axes = plt.subplots(
        1, len(thresholds), figsize=(FIGSIZE[0] * 1.4, FIGSIZE[1]), sharey=True, squeeze=False
    )
    for ax, t in zip(axes[0], thresholds, strict=True):
        column = threshold_column(t) if threshold_column(t) in points.columns else "continuity_pct"
        _continuity_panel(ax, points, models, systems, column)
        ax.set_title(f"gap <= {t * 1000:g} ms")
    axes[0][0].set_ylabel("continuous streams (%)")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("Continuity at several thresholds (95% Wilson interval)")
    _save(fig, out)


def perceived_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    """Perceived first audio (first byte + gapless prebuffer) p50 (solid) and p90 (dashed),
    with the first byte p50 (dotted) for reference."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    levels = concurrency_levels(points)
    for model in models:
        for system in systems:
            xs, ys, err = _series(points, model, system, "perceived_first_audio_s_p50")
            if not xs:
                continue
            bars = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{model} {system}")
            colour = bars.lines[0].get_color()
            x90, y90, e90 = _series(points, model, system, "perceived_first_audio_s_p90")
            ax.errorbar(x90, y90, yerr=e90, marker="s", capsize=3, linestyle="--", color=colour)
            x1, y1, _ = _series(points, model, system, "ttfa_s_p50")
            ax.plot(x1, y1, linestyle=":", color=colour)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("seconds")
    ax.set_title("Perceived first audio: p50 solid, p90 dashed; first byte p50 dotted")
    ax.legend(fontsize="small")
    _save(fig, out)


def start_buffer_figure(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], out: Path
) -> None:
    """The start buffer a player needs for 90% (solid), 95% (dashed) and 99% (dotted) of a
    point's streams to play gapless (thetalker.metrics.players), against concurrency. A
    share out of reach (too many requests failed) leaves a gap in its line."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    levels = concurrency_levels(points)
    for model in models:
        for system in systems:
            colour = None
            for pct, style in ((90, "-"), (95, "--"), (99, ":")):
                xs, ys, _ = _series(points, model, system, f"start_buffer_s_p{pct}")
                if not xs:
                    continue
                label = f"{model} {system}" if colour is None else None
                (line,) = ax.plot(xs, ys, marker="o", linestyle=style, color=colour, label=label)
                colour = line.get_color()
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("start buffer (s)")
    ax.set_title("Start buffer for gapless playback: 90% solid, 95% dashed, 99% dotted")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    _save(fig, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report_parser("python -m thetalker.report.figures", __doc__, ".png")
    parser.add_argument("--continuity-thresholds", type=Path, help="continuity_thresholds.png")
    parser.add_argument("--perceived", type=Path, help="perceived_first_audio.png")
    parser.add_argument("--start-buffer", type=Path, help="start_buffer.png")
    args = parser.parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    try:
        throughput_figure(points, args.models, args.systems, args.headline, args.throughput)
        continuity_figure(points, args.models, args.systems, args.continuity)
        ttfa_figure(points, args.models, args.systems, args.min_continuity_pct, args.ttfa)
        basis = CostBasis(args.headline, args.gpu_hour_usd, args.min_continuity_pct)
        cost_figure(points, args.models, args.systems, basis, args.cost)
        written = [args.throughput, args.continuity, args.ttfa, args.cost]
        if args.continuity_thresholds:
            out = args.continuity_thresholds
            continuity_thresholds_figure(points, args.models, args.systems, out)
            written.append(args.continuity_thresholds)
        if args.perceived:
            perceived_figure(points, args.models, args.systems, args.perceived)
            written.append(args.perceived)
        if args.start_buffer:
            start_buffer_figure(points, args.models, args.systems, args.start_buffer)
            written.append(args.start_buffer)
    except ReportWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
