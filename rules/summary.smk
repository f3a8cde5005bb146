# Every load point, recomputed from records.jsonl alone. Cheap: it runs where Snakemake runs
# (a localrule, never submitted to a cluster).


localrules:
    points,


rule points:
    input:
        records=every_point("records.jsonl"),
        # The capacity search's points: their records are listed in each manifest.
        search=every_search_manifest(),
        # stock_contaminated of each point (provenance.json) marks it in the tables.
        provenance=every_point("provenance.json"),
    output:
        "results/points.csv",
    log:
        "results/logs/points.log",
    conda:
        "../envs/report.yaml"
    # Points are computed in parallel, one process each (the same rows on one core).
    threads: 8  # at most: Snakemake gives a local job no more than --cores (workflow.cores is
    # undefined under an executor such as Slurm, which then refuses the workflow)
    params:
        thresholds=config["report"]["continuity_thresholds_s"],
        usable=config["report"]["usable_audio_s"],
    shell:
        "python -m thetalker.report.points --jobs {threads} --out {output} --continuity-thresholds-s {params.thresholds} --usable-audio-s {params.usable} --search-manifests {input.search} -- {input.records} > {log} 2>&1"
