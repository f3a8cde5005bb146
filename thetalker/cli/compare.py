"""`thetalker-compare A B`: every (system, model, point) in both result folders, B against A,
with 95% intervals and a verdict per figure (thetalker.report.compare computes; this parses
and prints). Exit 0 compared, 1 nothing to compare, 2 bad input, 3 with
`--fail-on-regression` when a figure's verdict is regression or B is a failed arm."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from thetalker import metrics
from thetalker.metrics import MinEffect
from thetalker.report import compare
from thetalker.report.compare import (
    CompareError,
    compare_folders,
    csv_rows,
    format_changes,
    regressions,
)

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="thetalker-compare",
        description=compare.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", type=Path, help="base result folder (e.g. last month's results/)")
    parser.add_argument("b", type=Path, help="new result folder")
    parser.add_argument("--csv", type=Path, help="also write the changes as CSV here")
    parser.add_argument("--seed", type=int, default=metrics.SEED, help="bootstrap seed")
    default = MinEffect()
    for flag, field, units in (
        ("--min-effect-rate-pct", "rate_pct", "percent of A, for RTFx B/A"),
        ("--min-effect-time-s", "time_s", "seconds, for a TTFA change (or time-pct, larger)"),
        ("--min-effect-time-pct", "time_pct", "percent of A's value, for a TTFA change"),
        ("--min-effect-share-pp", "share_pp", "percentage points, for continuity and clean"),
        ("--min-effect-score", "score", "points of DNSMOS OVRL's 1-5 scale"),
    ):
        parser.add_argument(
            flag, type=float, default=getattr(default, field), dest=field,
            help=f"minimum effect a verdict names: {units} (default %(default)s)",
        )  # fmt: skip
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 3 when any figure's verdict is regression, or B is a failed arm",
    )
    args = parser.parse_args(argv)
    try:
        effect = MinEffect(args.rate_pct, args.time_s, args.time_pct, args.share_pp, args.score)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        rows, only_a, only_b, unlike = compare_folders(args.a, args.b, args.seed, min_effect=effect)
    except (CompareError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in unlike:  # in both, but not the same measurement: never a ratio
        print(f"{'warning' if rows else 'error'}: {line}", file=sys.stderr)
    if not rows:
        if not unlike:
            print(
                f"error: no (run, system, model, point) has records in both {args.a} and "
                f"{args.b} (a run is a folder with the bench job's search.json)",
                file=sys.stderr,
            )
        return 1
    print(f"B = {args.b} against A = {args.a}; 95% intervals; RTFx as B/A, the rest as B - A.\n")
    print(format_changes(rows), end="")
    for label, keys in ((f"only in {args.a}", only_a), (f"only in {args.b}", only_b)):
        if keys:
            print(f"\n{label}: " + ", ".join("/".join(k) for k in keys))
    if args.csv:
        import pandas as pd

        args.csv.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(csv_rows(rows)).to_csv(args.csv, index=False)
        print(f"\nwrote {args.csv}")
    found = regressions(rows)
    if args.fail_on_regression and found:
        for line in found:
            print(f"regression: {line}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
