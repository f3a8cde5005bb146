# Quality (docs/quality.md): a quality run per (system, model) through the same serve-and-sweep
# job as the speed runs, Whisper on its own job, WER with bootstrap intervals, paired
# comparisons, then the table and figure. Optionally (quality.at_speed_points) the same WER at
# every speed point: quality under load. Settings: QUALITY (config["quality"], rules/common.smk).


localrules:
    score_wer,
    score_point_wer,
    compare_wer,
    wer_report,
    wer_load_report,


# The speed job with the quality run's overrides (thetalker.pipeline.quality_config.quality_run_config):
# quality.prompts, one point at quality.concurrency with quality.requests sentences, every
# utterance saved, and quality.models.<model> over the model's spec (e.g. a -Base checkpoint).
use rule bench as synthesize_quality with:
    input:
        unpack(get_quality_inputs),
    output:
        records=expand(f"{QUALITY_POINT}/records.jsonl", allow_missing=True),
        summary=expand(f"{QUALITY_POINT}/summary.json", allow_missing=True),
        provenance=expand(f"{QUALITY_POINT}/provenance.json", allow_missing=True),
        search=f"{QUALITY_RUN}/search.json",  # empty: a quality run searches nothing
    log:
        bench=f"{LOGS}/quality_bench.log",
        server=f"{LOGS}/quality_server.log",
    params:
        job=get_quality_job,


rule transcribe:
    input:
        records=rules.synthesize_quality.output.records,
    output:
        transcripts=f"{QUALITY_RUN}/transcripts.jsonl",
        meta=f"{QUALITY_RUN}/transcripts.meta.json",
    log:
        f"{LOGS}/transcribe.log",
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
        "python -m thetalker.quality.asr --records {input.records} --out {output.transcripts} --backend {params.backend} {params.model} --workers {params.workers} --no-progress > {log} 2>&1"


# WER under load: the same transcription of each speed point's saved audio.
use rule transcribe as transcribe_point with:
    input:
        records=f"{POINT}/records.jsonl",
    output:
        transcripts=f"{POINT}/transcripts.jsonl",
        meta=f"{POINT}/transcripts.meta.json",
    log:
        f"{LOGS}/transcribe_c{{n}}.log",


rule score_wer:
    input:
        transcripts=rules.transcribe.output.transcripts,
        meta=rules.transcribe.output.meta,
    output:
        f"{QUALITY_RUN}/wer.json",
    log:
        f"{LOGS}/score_wer.log",
    conda:
        "../envs/asr.yaml"
    params:
        n_resamples=QUALITY["n_resamples"],
        seed=QUALITY["seed"],
    script:
        "../scripts/score_wer.py"


# A speed point's WER, its row labelled "model cN" in wer_load.md.
use rule score_wer as score_point_wer with:
    input:
        transcripts=rules.transcribe_point.output.transcripts,
        meta=rules.transcribe_point.output.meta,
    output:
        f"{POINT}/wer.json",
    log:
        f"{LOGS}/score_wer_c{{n}}.log",
    params:
        label=get_wer_under_load_label,


rule compare_wer:
    input:
        a="results/quality/{system_a}/{model}/transcripts.jsonl",
        b="results/quality/{system_b}/{model}/transcripts.jsonl",
    output:
        report(
            COMPARISON,
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
        "python -m thetalker.quality.wer compare --a {input.a} --b {input.b} --out {output} --n-resamples {params.n_resamples} --seed {params.seed} > {log} 2>&1"


rule wer_report:
    input:
        every_quality_run("wer.json"),  # QUALITY_SYSTEMS: the agent mode has no quality run
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
        systems=QUALITY_SYSTEMS,
    shell:
        "python -m thetalker.report.quality --wer {input} --models {params.models} --systems {params.systems} --table {output.table} --figure {output.figure} > {log} 2>&1"


rule wer_load_report:
    input:
        every_point("wer.json", CLOSED_POINTS),
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
        labels=get_wer_under_load_labels,
        systems=SYSTEMS,
    shell:
        "python -m thetalker.report.quality --wer {input} --models {params.labels} --systems {params.systems} --table {output.table} > {log} 2>&1"
