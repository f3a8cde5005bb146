# Every load point, recomputed from records.jsonl alone.


rule points:
    input:
        records=get_all_records,
    output:
        "results/points.csv",
    log:
        "results/logs/points.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.points --out {output} {input.records} > {log} 2>&1"
