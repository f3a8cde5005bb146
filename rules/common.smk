# Config validation, wildcard constraints, and every target, input and params function.
from snakemake.utils import validate

from thetalker import workflow_config as wfc

validate(config, "../config/schema.yaml")
wfc.check_config(config)

SYSTEMS = list(config["systems"])
MODELS = list(config["models"])
CONCURRENCY = wfc.concurrency_points(config)


wildcard_constraints:
    system=wfc.wildcard_pattern(SYSTEMS),
    model=wfc.wildcard_pattern(MODELS),


def get_final_output():
    return wfc.final_targets(config)


def get_bench_inputs(wildcards):
    return wfc.bench_inputs(config, wildcards.system, wildcards.model)


def get_bench_job(wildcards):
    return wfc.bench_job(config, wildcards.system, wildcards.model)


def get_all_records(wildcards):
    return wfc.records_paths(config)
