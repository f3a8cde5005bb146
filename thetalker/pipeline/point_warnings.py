"""Warnings for accepted points that had failures: a number next to failures is no clean number.

With `max_error_rate: 1.0` (the published setting) a point where most requests failed still
passes `thetalker.pipeline.acceptance.point_failure`; the tables mark it
(thetalker.report.tables), and
so do the bench job's log (`point_warning`, one line per point) and the end of a Snakemake run
(`failed_points_warning`, from the `onsuccess` handler of rules/common.smk).

    python -m thetalker.pipeline.point_warnings results/runs/*/*/c*/summary.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["point_warning", "failed_points", "failed_points_warning", "main"]


def point_warning(summary: Mapping[str, Any], label: str) -> str | None:
    """`WARNING: LABEL: 9 of 10 scored requests failed (90%: connection 9)`, or None."""
    n_failed = int(summary.get("n_failed") or 0)
    if not n_failed:
        return None
    n_scored = int(summary.get("n_scored") or 0)
    by_type = summary.get("errors_by_type") or {}
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(by_type.items()))
    pct = 100.0 * n_failed / n_scored if n_scored else 100.0
    return (
        f"WARNING: {label}: {n_failed} of {n_scored} scored requests failed "
        f"({pct:.0f}%{': ' + kinds if kinds else ''}); its figures count only what succeeded"
    )


def _label(path: Path) -> str:
    """`system/model cN` of `.../{system}/{model}/cN[/roundK]/summary.json`."""
    parts = path.parent.parts
    if parts and parts[-1].startswith("round"):
        parts = parts[:-1]
    return f"{'/'.join(parts[-3:-1])} {parts[-1]}" if len(parts) >= 3 else str(path)


def failed_points(summary_paths: Iterable[str | Path]) -> list[str]:
    """The warning line of every point with failures (files that do not exist are skipped:
    a dry run, or a target that did not need them)."""
    lines = []
    for path in map(Path, summary_paths):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        line = point_warning(summary, _label(path)) if isinstance(summary, dict) else None
        if line:
            lines.append(f"{line} [{path}]")
    return lines


def failed_points_warning(summary_paths: Iterable[str | Path]) -> str | None:
    """One block for the end of a run: a heading and a line per point with failures."""
    lines = failed_points(summary_paths)
    if not lines:
        return None
    return f"WARNING: {len(lines)} point(s) had failed requests:\n" + "\n".join(
        "  " + line.removeprefix("WARNING: ") for line in lines
    )


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    block = failed_points_warning(paths)
    if block:
        print(block, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
