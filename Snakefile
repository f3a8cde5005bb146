# TheTalker: streaming TTS serving benchmark. Table of contents only; the Python lives in
# rules/common.smk and thetalker/. Default run: `snakemake --cores 2` (every table and figure,
# WER and provenance included; a few minutes on 2 cores).
from snakemake.utils import min_version

min_version("9.0")


# Snakemake's own error for a broken config file names no file: check it first.
from thetalker.pipeline.config_checks import check_config_file

check_config_file("config/config.yaml")


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/bench.smk"
include: "rules/summary.smk"
include: "rules/report.smk"
include: "rules/quality.smk"
include: "rules/listen.smk"
include: "rules/settings_common.smk"
include: "rules/settings.smk"
include: "rules/ab_common.smk"
include: "rules/ab.smk"


rule all:
    default_target: True
    input:
        get_final_output(),
