"""ab.md, ab.csv and ab.png: B against A, figure by figure, with a verdict each (docs/ab.md).

Per run (a pair on a model, results/ab/{pair}/{model}/) and grid point: every figure of
thetalker.report.ab_figures over both arms' rounds, paired by prompt within each round (the
same request_index is the same prompt in the same slot of the arrival schedule), its 95%
interval (thetalker.metrics.intervals.paired), each round's own estimate, the smallest change
the run can show, and the verdict (thetalker.metrics.ab_verdicts): regression, improvement,
or no change the run can show, against the minimum effects given. An arm whose requests
mostly failed is a failed arm: every verdict of the point says so, never a speed-up. Beside
them: whether the two builds render the same audio (thetalker.metrics.waveform, where
decoding repeats), and what each build served with (thetalker.report.ab_builds).

    python -m thetalker.report.ab_table --runs JSON --min-effect JSON [--seed 0] \\
        --table ab.md --csv ab.csv --figure ab.png

`--runs`: [{"pair", "model", "a", "b", "dir", "points", "rounds"}, ...].
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from thetalker.metrics import SEED
from thetalker.metrics.ab_verdicts import (
    MinEffect,
    between_rounds,
    failed_arm,
    judge,
    minimum_effect,
    requests_to_show,
    resolution,
)
from thetalker.metrics.intervals.paired import pair_rounds, paired_change, paired_rtfx_ratio
from thetalker.report.ab_audio import same_audio
from thetalker.report.ab_builds import build_rows
from thetalker.report.ab_figures import AB_FIGURES, AbFigure
from thetalker.report.ab_inputs import AbInputError, ArmPoint, check_alike, read_arm_point
from thetalker.report.ab_render import render_figure, render_markdown

__all__ = ["point_rows", "run_result", "main", "CSV_FIELDS"]

CSV_FIELDS = ["pair", "model", "point", "figure", "kind", "a", "b", "change", "lo", "hi",
              "rounds_lo", "rounds_hi", "per_round", "n_pairs", "resolution", "requests_to_show",
              "verdict", "why"]  # fmt: skip


def _verdict_label(figure: AbFigure, label: str) -> str:
    """Output length has no better side: its change is longer or shorter."""
    if figure.higher_is_better is not None or label not in ("regression", "improvement"):
        return label
    return "longer" if label == "improvement" else "shorter"


def _change(figure: AbFigure, pairs: Any, seed: int) -> Any:
    if figure.value is None:
        return paired_rtfx_ratio(pairs, seed=seed)
    return paired_change(pairs, figure.value, figure.statistic, figure.change, seed=seed)


def _figure_row(
    figure: AbFigure, change: Any, min_effect: MinEffect, n_per_arm: int, families: int
) -> dict[str, Any]:
    if figure.time_ratio:
        min_effect = replace(min_effect, rate_pct=min_effect.time_pct)
    spread = between_rounds(change, figure.kind, families)
    row: dict[str, Any] = {
        "figure": figure.name,
        "kind": figure.kind,
        "a": change.a,
        "b": change.b,
        "change": change.estimate,
        "lo": change.interval.low,
        "hi": change.interval.high,
        "rounds_lo": spread.low,
        "rounds_hi": spread.high,
        "per_round": list(change.per_round),
        "n_pairs": change.n_pairs,
        "resolution": _resolution(change, spread, figure.kind),
        "requests_to_show": requests_to_show(
            change, n_per_arm, _target(figure, min_effect, change.a)
        ),
    }
    better = True if figure.higher_is_better is None else figure.higher_is_better
    verdict = judge(change, figure.kind, better, min_effect, families)
    row["verdict"] = _verdict_label(figure, verdict.label)
    row["why"] = verdict.why
    return row


def _resolution(change: Any, spread: Any, kind: str) -> float | None:
    """The smallest change the run can show: the wider half-width of the bootstrap's
    interval and the between-rounds one, in `resolution`'s units (% for a ratio)."""
    widths = [resolution(change, kind)]
    half = spread.half_width
    if half is not None:
        widths.append(100.0 * half if kind == "ratio" else half)
    known = [w for w in widths if w is not None]
    return max(known) if known else None


def _target(figure: AbFigure, min_effect: MinEffect, base: float | None) -> float:
    """The minimum effect in `requests_to_show`'s units: % for a ratio, else the figure's."""
    if figure.kind == "ratio":
        return min_effect.rate_pct
    return minimum_effect(figure.kind, min_effect, base)


def point_rows(
    a: ArmPoint, b: ArmPoint, min_effect: MinEffect, seed: int = SEED
) -> tuple[list[dict[str, Any]], str | None, int]:
    """Every figure's row at one point, the failed arm's line (None when both served), and
    the number of families of figures judged together there (ab_verdicts, condition 4)."""
    check_alike(a, b)
    rounds = len(a.dirs)
    try:
        pairs = pair_rounds(
            [a.scored(k) for k in range(rounds)], [b.scored(k) for k in range(rounds)]
        )
    except ValueError as exc:
        raise AbInputError(f"{a.dirs[0].parent.parent.parent}: {exc}") from None
    n_per_arm = sum(len(p) for p in pairs)  # requests per arm over the rounds
    failed = [
        verdict
        for side, arm in (("A", a), ("B", b))
        if (verdict := failed_arm([r for k in range(rounds) for r in arm.scored(k)], side))
    ]
    changes = [(f, _change(f, pairs, seed)) for f in AB_FIGURES]
    # A figure the run did not measure (DNSMOS without ab.dnsmos) is no row and no family.
    changes = [(f, c) for f, c in changes if c.n_pairs or f.family != "DNSMOS"]
    families = len({f.family for f, c in changes if c.estimate is not None}) or 1
    rows = [_figure_row(f, c, min_effect, n_per_arm, families) for f, c in changes]
    if failed:  # its figures measure failures: never a speed-up
        for row in rows:
            row["verdict"], row["why"] = failed[0].label, failed[0].why
    return rows, (failed[0].label if failed else None), families


def run_result(run: Mapping[str, Any], min_effect: MinEffect, seed: int = SEED) -> dict[str, Any]:
    """One run's points, builds and audio check, as the renderers take them."""
    points = []
    arms: dict[str, list[ArmPoint]] = {"a": [], "b": []}
    for point in run["points"]:
        a = read_arm_point(run["dir"], "a", point, int(run["rounds"]))
        b = read_arm_point(run["dir"], "b", point, int(run["rounds"]))
        rows, failed, families = point_rows(a, b, min_effect, seed)
        points.append(
            {
                "point": point,
                "rows": rows,
                "failed": failed,
                "families": families,
                "audio": same_audio(a, b),
            }  # fmt: skip
        )
        arms["a"].append(a)
        arms["b"].append(b)
    return {**run, "points_done": points, "builds": build_rows(arms["a"], arms["b"])}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.ab_table")
    parser.add_argument("--runs", required=True, help="JSON list of the runs")
    parser.add_argument("--min-effect", required=True, help="ab.min_effect, JSON")
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed")
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--csv", required=True, type=Path)
    parser.add_argument("--figure", required=True, type=Path)
    args = parser.parse_args(argv)
    min_effect = MinEffect(**json.loads(args.min_effect))
    try:
        results = [run_result(run, min_effect, args.seed) for run in json.loads(args.runs)]
    except AbInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in (args.table, args.csv, args.figure):
        path.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(render_markdown(results, min_effect), encoding="utf-8")
    with args.csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for result in results:
            for point in result["points_done"]:
                for row in point["rows"]:
                    writer.writerow(
                        {
                            "pair": result["pair"],
                            "model": result["model"],
                            "point": point["point"],
                            **row,
                            "per_round": json.dumps(row["per_round"]),
                        }
                    )
    render_figure(results, min_effect, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
