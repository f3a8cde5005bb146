# One job per (system, model): serve, warm up, sweep every concurrency point, stop.


rule bench:
    input:
        unpack(get_bench_inputs),
    output:
        records=expand(
            "results/runs/{{system}}/{{model}}/c{n}/records.jsonl", n=CONCURRENCY
        ),
        summaries=expand(
            "results/runs/{{system}}/{{model}}/c{n}/summary.json", n=CONCURRENCY
        ),
        provenance=expand(
            "results/runs/{{system}}/{{model}}/c{n}/provenance.json", n=CONCURRENCY
        ),
    log:
        bench="results/logs/{system}/{model}/bench.log",
        server="results/logs/{system}/{model}/server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=get_bench_job,
    shell:
        "python -m thetalker.bench --job {params.job:q} --out-dir results/runs/{wildcards.system}/{wildcards.model} --server-log {log.server} > {log.bench} 2>&1"
