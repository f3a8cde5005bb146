"""Verdicts on scored points, one rule each for every caller.

- `point_failure`: whether a point is acceptable (something succeeded, the scored error
  rate at most the limit); `thetalker-bench` (exit status 1) and the bench job (the job
  fails) both ask it.
- `point_warning` / `failed_points_warning`: an accepted point that had failures (with
  `max_error_rate: 1.0`, the published setting, most requests may fail and the point still
  passes): the tables mark it (thetalker.report.tables), and so do the bench job's log, one
  line per point, and the end of a Snakemake run (rules/common.smk, `onsuccess`).
- `contaminated_points_warning`: stock points served with the optimized library installed
  (`stock_contaminated` in provenance.json, thetalker.pipeline.provenance), said once more
  at the end of a run, the capacity search's points (from the search manifests) included.

    python -m thetalker.pipeline.verdicts results/runs/*/*/c*/summary.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.data.manifest import ManifestError, read_search_manifest

__all__ = [
    "point_failure",
    "point_warning",
    "failed_points",
    "failed_points_warning",
    "main",
    "contaminated_points",
    "contaminated_points_warning",
]


def point_failure(summary: Mapping[str, Any], max_error_rate: float) -> str | None:
    """Why the point's `summary.json` fails it, in one line, or None when it is acceptable.
    A server that failed during the point fails it whatever `max_error_rate` allows: what
    follows the failure measures a dead server, not the load."""
    failed = (summary.get("errors_by_type") or {}).get("server_failed")
    if failed:
        return f"the server failed during the point ({failed} request(s) answered server_failed)"
    if not summary.get("n_ok"):
        return "no scored request succeeded"
    error_rate = summary.get("error_rate") or 0.0
    if error_rate > max_error_rate:
        return f"error rate {error_rate:.3f} above max_error_rate {max_error_rate}"
    return None


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
    try:
        where = layout.point_location(path)
    except layout.PointPathError:
        return str(path)
    return f"{where.system}/{where.model} {where.point}"


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


def _read(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not written (a dry run, a target that did not need it)


def contaminated_points(
    provenance_paths: Iterable[str | Path], manifests: Iterable[str | Path] = ()
) -> list[str]:
    """The provenance.json files (grid points, then every manifest's search points) whose
    `stock_contaminated` is true; files that cannot be read are skipped."""
    paths = [Path(p) for p in provenance_paths]
    for manifest in manifests:
        try:  # not written (a dry run), or refused (the points rule says why)
            paths += [Path(p) for p in read_search_manifest(manifest).provenance()]
        except (OSError, ManifestError):
            continue
    found = []
    for path in paths:
        data = _read(path)
        if isinstance(data, dict) and data.get("stock_contaminated") is True:
            found.append(str(path))
    return found


def contaminated_points_warning(
    provenance_paths: Iterable[str | Path], manifests: Iterable[str | Path] = ()
) -> str | None:
    """`WARNING: N point(s) ...` with one line per point, or None when there are none."""
    found = contaminated_points(provenance_paths, manifests)
    if not found:
        return None
    lines = [
        f"WARNING: {len(found)} stock point(s) ran with the optimized library installed in the "
        "server's environment (stock_contaminated; marked in the tables): not stock numbers"
    ]
    return "\n".join(lines + [f"  {path}" for path in found])


if __name__ == "__main__":
    sys.exit(main())
