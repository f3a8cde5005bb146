"""Action of rule provenance_table: provenance.md with one row per speed point (the capacity
search's points too, listed in the search manifests), and every point's provenance.json
copied into the report as {system}_{model}_{point}[_search][_round{k}].json."""

import os
import shutil
import sys
from pathlib import Path

from thetalker.data.records import read_json
from thetalker.report.provenance_table import main

snakemake = globals()["snakemake"]  # set by Snakemake's script preamble


def copy_name(path: Path) -> str:
    """A point folder ends in {system}/{model}[/search]/{point}[/round{k}]: name the copy."""
    parts = list(path.parent.parts)
    suffix = []
    if parts[-1].startswith("round"):
        suffix.append(parts.pop())
    point = parts.pop()
    if parts[-1] == "search":
        parts.pop()
        suffix.insert(0, "search")
    return "_".join([*parts[-2:], point, *suffix]) + ".json"


log_fd = os.open(snakemake.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log_fd, 1)
os.dup2(log_fd, 2)
paths = list(snakemake.input.points)
for manifest in snakemake.input.search:
    for point in read_json(manifest)["points"]:
        paths += point["provenance"]
status = main(["--out", snakemake.output.table, *paths])
if status:
    sys.exit(status)
copies = Path(snakemake.output.points)
copies.mkdir(parents=True, exist_ok=True)
for path in map(Path, paths):
    shutil.copyfile(path, copies / copy_name(path))
