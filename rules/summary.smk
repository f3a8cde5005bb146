# Every load point, recomputed from records.jsonl alone. Cheap: it runs where Snakemake runs
# (a localrule, never submitted to a cluster).


localrules:
    points,


rule points:
    input:
        records=every_point("records.jsonl"),
    output:
        "results/points.csv",
    log:
        "results/logs/points.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.points --out {output} {input.records} > {log} 2>&1"
