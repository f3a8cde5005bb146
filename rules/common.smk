# Config validation, wildcard constraints, and every target, input and params function.
import shlex

from snakemake.utils import validate

from thetalker import workflow_config as wfc

validate(config, "../config/schema.yaml")
wfc.check_config(config)
# Prompts, deploy files and the reference clip, before any server starts.
wfc.check_inputs(config)
wfc.check_quality(config)

SYSTEMS = list(config["systems"])
MODELS = list(config["models"])
CONCURRENCY = wfc.concurrency_points(config)
QUALITY = wfc.quality_settings(config)
QUALITY_CONCURRENCY = wfc.quality_concurrency(config)


wildcard_constraints:
    system=wfc.wildcard_pattern(SYSTEMS),
    model=wfc.wildcard_pattern(MODELS),
    system_a=wfc.wildcard_pattern(SYSTEMS),
    system_b=wfc.wildcard_pattern(SYSTEMS),
    n=r"\d+",


def get_final_output():
    return wfc.final_targets(config)


def get_bench_inputs(wildcards):
    return wfc.bench_inputs(config, wildcards.system, wildcards.model)


def get_bench_job(wildcards):
    return wfc.bench_job(config, wildcards.system, wildcards.model)


def get_all_records(wildcards):
    return wfc.records_paths(config)


def get_all_provenance(wildcards):
    return wfc.provenance_paths(config)


def get_quality_inputs(wildcards):
    return wfc.quality_inputs(config, wildcards.system, wildcards.model)


def get_quality_job(wildcards):
    return wfc.quality_job(config, wildcards.system, wildcards.model)


def get_asr_model_arg(wildcards):
    return wfc.asr_model_arg(config)


def get_all_wer(wildcards):
    return wfc.wer_paths(config)


def get_all_load_wer(wildcards):
    return wfc.load_wer_paths(config)


def get_point_wer_label(wildcards):
    return wfc.load_wer_label(wildcards.model, wildcards.n)


def get_load_wer_labels(wildcards):
    return " ".join(shlex.quote(label) for label in wfc.load_wer_labels(config))
