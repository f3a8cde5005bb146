"""`thetalker-compare A B`: every (system, model, point) in both result folders, B against A,
with 95% intervals (thetalker.report.compare computes; this parses and prints)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from thetalker import metrics
from thetalker.report import compare
from thetalker.report.compare import CompareError, compare_folders, csv_rows, format_changes

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
    args = parser.parse_args(argv)
    try:
        rows, only_a, only_b, unlike = compare_folders(args.a, args.b, args.seed)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
