# One job per (system, model): serve, warm up, sweep every concurrency point, stop.
# Its params are the whole job spec (thetalker.job.BenchJob as canonical JSON): any setting
# that changes reruns exactly this (system, model), and nothing else.


rule bench:
    input:
        unpack(get_bench_inputs),
    output:
        records=expand(f"{POINT}/records.jsonl", n=CONCURRENCY, allow_missing=True),
        summaries=expand(f"{POINT}/summary.json", n=CONCURRENCY, allow_missing=True),
        provenance=expand(f"{POINT}/provenance.json", n=CONCURRENCY, allow_missing=True),
    log:
        bench=f"{LOGS}/bench.log",
        server=f"{LOGS}/server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=get_bench_job,
    shell:
        "python -m thetalker.serve_and_sweep --job {params.job:q} --server-log {log.server} --records {output.records} > {log.bench} 2>&1"
