"""The end-of-run warning for stock points served with the optimized library installed.

thetalker.pipeline.provenance records `stock_contaminated` (a top-level boolean) in each point's
provenance.json: a "stock" system whose server interpreter had the optimized plugin
installed measured something else than stock. The tables mark such points; this says so
once more at the end of a Snakemake run (rules/common.smk, `onsuccess`), one line per
point, the capacity search's points (from the search manifests) included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["contaminated_points", "contaminated_points_warning"]


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
    for manifest in map(Path, manifests):
        data = _read(manifest)
        if isinstance(data, dict):
            paths += [Path(p) for point in data.get("points", []) for p in point["provenance"]]
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
