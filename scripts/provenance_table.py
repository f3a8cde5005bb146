"""Action of rule provenance_table: provenance.md with one row per speed point (the capacity
search's points too, listed in the search manifests), and every point's provenance.json
copied into the report as {system}_{model}_{point}[_search][_round{k}].json."""

import os
import shutil
import sys
from pathlib import Path

from thetalker.data.layout import point_file_stem
from thetalker.data.manifest import read_search_manifest
from thetalker.report.provenance_table import main

snakemake = globals()["snakemake"]  # set by Snakemake's script preamble


log_fd = os.open(snakemake.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log_fd, 1)
os.dup2(log_fd, 2)
paths = list(snakemake.input.points)
for manifest in snakemake.input.search:
    paths += read_search_manifest(manifest).provenance()
status = main(["--out", snakemake.output.table, *paths])
if status:
    sys.exit(status)
copies = Path(snakemake.output.points)
copies.mkdir(parents=True, exist_ok=True)
for path in map(Path, paths):
    shutil.copyfile(path, copies / f"{point_file_stem(path)}.json")
