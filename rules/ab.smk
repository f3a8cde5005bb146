# The A/B of two systems, builds or deploy files (docs/ab.md): every arm of every round is a
# bench job on a fresh server under results/ab/{pair}/{model}/round{k}/{a|b}/, chained in the
# order A B, B A, ... (thetalker.pipeline.ab_plan); ab_table reads them all and gives each
# figure its interval and verdict.


wildcard_constraints:
    pair=wfc.wildcard_pattern(sorted({r.pair for r in AB_RUNS.values()}) or ["none"]),
    k=r"\d+",
    arm="a|b",


localrules:
    ab_dnsmos,
    ab_table,


rule ab_arm:
    input:
        unpack(ab_arm_inputs),
    output:
        records=ab_arm_outputs("records.jsonl"),
        summaries=ab_arm_outputs("summary.json"),
        provenance=ab_arm_outputs("provenance.json"),
        server_metrics=ab_arm_outputs("server_metrics.json"),
        search=AB_MANIFEST,
    log:
        bench=f"{AB_LOGS}/bench.log",
        server=f"{AB_LOGS}/server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=ab_arm_job,
    shell:
        "python -m thetalker.pipeline.serve_and_sweep --job {params.job:q} --server-log {log.server:q} --records {output.records:q} --search-manifest {output.search:q} > {log.bench:q} 2>&1"


# DNSMOS of each arm's utterances (ab.dnsmos; thetalker.quality.dnsmos, as rules/listen.smk's).
rule ab_dnsmos:
    input:
        records=f"{AB_ARM}/{{point}}/records.jsonl",
    output:
        f"{AB_ARM}/{{point}}/dnsmos.json",
    log:
        f"{AB_LOGS}/dnsmos_{{point}}.log",
    conda:
        "../envs/listen.yaml"
    threads: 1
    shell:
        "python -m thetalker.quality.dnsmos --records {input.records:q} --out {output:q} --threads {threads} > {log:q} 2>&1"


rule ab_table:
    input:
        ab_manifests(),
        ab_dnsmos_files(),
    output:
        table=report(
            "results/tables/ab.md",
            category="Tables",
            caption="../report/ab_table.rst",
        ),
        csv="results/tables/ab.csv",
        figure="results/figures/ab.png",
    log:
        "results/logs/ab_table.log",
    conda:
        "../envs/report.yaml"
    params:
        runs=ab_table_runs(),
        min_effect=json.dumps(AB["min_effect"], sort_keys=True),
        seed=config["quality"]["seed"],
    shell:
        "python -m thetalker.report.ab_table --runs {params.runs:q} --min-effect {params.min_effect:q} --seed {params.seed} --table {output.table:q} --csv {output.csv:q} --figure {output.figure:q} > {log:q} 2>&1"
