# Quality (docs/quality.md): a quality run per (system, model) through the same bench job as
# the speed runs (the quality prompt set at one concurrency, every utterance saved), Whisper on
# its own job, WER with bootstrap intervals, paired comparisons, then the table and figure.
# Optionally (quality.at_speed_points) the same WER at every speed point: quality under load.
# Settings come from config["quality"] through thetalker.workflow_config (rules/common.smk).


localrules:
    score_wer,
    score_point_wer,
    compare_wer,
    wer_report,
    wer_load_report,


rule synthesize_quality:
    input:
        unpack(get_quality_inputs),
    output:
        records=f"results/quality/{{system}}/{{model}}/c{QUALITY_CONCURRENCY}/records.jsonl",
        summary=f"results/quality/{{system}}/{{model}}/c{QUALITY_CONCURRENCY}/summary.json",
        provenance=f"results/quality/{{system}}/{{model}}/c{QUALITY_CONCURRENCY}/provenance.json",
    log:
        bench="results/logs/{system}/{model}/quality_bench.log",
        server="results/logs/{system}/{model}/quality_server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=get_quality_job,
    shell:
        "python -m thetalker.bench --job {params.job:q} --out-dir results/quality/{wildcards.system}/{wildcards.model} --server-log {log.server} > {log.bench} 2>&1"


rule transcribe:
    input:
        records=f"results/quality/{{system}}/{{model}}/c{QUALITY_CONCURRENCY}/records.jsonl",
    output:
        transcripts="results/quality/{system}/{model}/transcripts.jsonl",
        meta="results/quality/{system}/{model}/transcripts.meta.json",
    log:
        "results/logs/{system}/{model}/transcribe.log",
    conda:
        "../envs/asr.yaml"
    threads: QUALITY["asr"]["threads"]
    resources:
        gpu=QUALITY["asr"]["gpus"],
    params:
        backend=QUALITY["asr"]["backend"],
        model=get_asr_model_arg,
        workers=QUALITY["asr"]["workers"],
    shell:
        "python -m thetalker.asr --records {input.records} --out {output.transcripts} --backend {params.backend} {params.model} --workers {params.workers} --no-progress > {log} 2>&1"


rule transcribe_point:
    input:
        records="results/runs/{system}/{model}/c{n}/records.jsonl",
    output:
        transcripts="results/runs/{system}/{model}/c{n}/transcripts.jsonl",
        meta="results/runs/{system}/{model}/c{n}/transcripts.meta.json",
    log:
        "results/logs/{system}/{model}/transcribe_c{n}.log",
    conda:
        "../envs/asr.yaml"
    threads: QUALITY["asr"]["threads"]
    resources:
        gpu=QUALITY["asr"]["gpus"],
    params:
        backend=QUALITY["asr"]["backend"],
        model=get_asr_model_arg,
        workers=QUALITY["asr"]["workers"],
    shell:
        "python -m thetalker.asr --records {input.records} --out {output.transcripts} --backend {params.backend} {params.model} --workers {params.workers} --no-progress > {log} 2>&1"


rule score_wer:
    input:
        transcripts="results/quality/{system}/{model}/transcripts.jsonl",
        meta="results/quality/{system}/{model}/transcripts.meta.json",
    output:
        "results/quality/{system}/{model}/wer.json",
    log:
        "results/logs/{system}/{model}/score_wer.log",
    conda:
        "../envs/asr.yaml"
    params:
        n_resamples=QUALITY["n_resamples"],
        seed=QUALITY["seed"],
    shell:
        "python -m thetalker.wer score --transcripts {input.transcripts} --out {output} --system {wildcards.system} --model {wildcards.model} --n-resamples {params.n_resamples} --seed {params.seed} > {log} 2>&1"


rule score_point_wer:
    input:
        transcripts="results/runs/{system}/{model}/c{n}/transcripts.jsonl",
        meta="results/runs/{system}/{model}/c{n}/transcripts.meta.json",
    output:
        "results/runs/{system}/{model}/c{n}/wer.json",
    log:
        "results/logs/{system}/{model}/score_wer_c{n}.log",
    conda:
        "../envs/asr.yaml"
    params:
        label=get_point_wer_label,
        n_resamples=QUALITY["n_resamples"],
        seed=QUALITY["seed"],
    shell:
        "python -m thetalker.wer score --transcripts {input.transcripts} --out {output} --system {wildcards.system} --model {params.label:q} --n-resamples {params.n_resamples} --seed {params.seed} > {log} 2>&1"


rule compare_wer:
    input:
        a="results/quality/{system_a}/{model}/transcripts.jsonl",
        b="results/quality/{system_b}/{model}/transcripts.jsonl",
    output:
        report(
            "results/quality/compare/{model}/{system_a}_vs_{system_b}.json",
            category="Quality",
            subcategory="Paired comparisons",
            caption="../report/wer_compare.rst",
            labels={"model": "{model}", "systems": "{system_a} - {system_b}"},
        ),
    log:
        "results/logs/compare_wer/{model}/{system_a}_vs_{system_b}.log",
    conda:
        "../envs/asr.yaml"
    params:
        n_resamples=QUALITY["n_resamples"],
        seed=QUALITY["seed"],
    shell:
        "python -m thetalker.wer compare --a {input.a} --b {input.b} --out {output} --n-resamples {params.n_resamples} --seed {params.seed} > {log} 2>&1"


rule wer_report:
    input:
        get_all_wer,
    output:
        table=report(
            "results/tables/wer.md",
            category="Tables",
            caption="../report/wer_table.rst",
        ),
        figure=report(
            "results/figures/wer.png",
            category="Figures",
            caption="../report/wer_figure.rst",
        ),
    log:
        "results/logs/wer_report.log",
    conda:
        "../envs/report.yaml"
    params:
        models=MODELS,
        systems=SYSTEMS,
    shell:
        "python -m thetalker.report.quality --wer {input} --models {params.models} --systems {params.systems} --table {output.table} --figure {output.figure} > {log} 2>&1"


rule wer_load_report:
    input:
        get_all_load_wer,
    output:
        table=report(
            "results/tables/wer_load.md",
            category="Tables",
            caption="../report/wer_load_table.rst",
        ),
    log:
        "results/logs/wer_load_report.log",
    conda:
        "../envs/report.yaml"
    params:
        labels=get_load_wer_labels,
        systems=SYSTEMS,
    shell:
        "python -m thetalker.report.quality --wer {input} --models {params.labels} --systems {params.systems} --table {output.table} > {log} 2>&1"
