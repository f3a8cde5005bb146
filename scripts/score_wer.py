"""Action of rules score_wer and score_point_wer: pooled WER with its bootstrap interval
(thetalker.quality.wer score). The row label is params.label where the rule gives one (a speed
point: "model cN"), else the model."""

import os
import sys

from thetalker.quality.wer import main

snakemake = globals()["snakemake"]  # set by Snakemake's script preamble

log_fd = os.open(snakemake.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log_fd, 1)
os.dup2(log_fd, 2)
label = snakemake.params.get("label", snakemake.wildcards.model)
args = ["score", "--transcripts", snakemake.input.transcripts, "--out", snakemake.output[0]]
args += ["--system", snakemake.wildcards.system, "--model", label]
args += ["--n-resamples", str(snakemake.params.n_resamples), "--seed", str(snakemake.params.seed)]
sys.exit(main(args))
