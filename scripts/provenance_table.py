"""Action of rule provenance_table: provenance.md with one row per speed point, and every
point's provenance.json copied into the report as {system}_{model}_c{N}.json."""

import os
import shutil
import sys
from pathlib import Path

from thetalker.report.provenance_table import main

snakemake = globals()["snakemake"]  # set by Snakemake's script preamble

log_fd = os.open(snakemake.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log_fd, 1)
os.dup2(log_fd, 2)
status = main(["--out", snakemake.output.table, *snakemake.input])
if status:
    sys.exit(status)
copies = Path(snakemake.output.points)
copies.mkdir(parents=True, exist_ok=True)
for path in map(Path, snakemake.input):
    # A point folder ends in {system}/{model}/c{N}: those three parts name the copy.
    shutil.copyfile(path, copies / ("_".join(path.parent.parts[-3:]) + ".json"))
