# One job per (system, model): serve, warm up, sweep every point (each `repeats` times, back
# to back), search the capacity (capacity.refine), stop. One server per job: the rounds of
# two systems cannot interleave within a job, and two jobs on one GPU would share it.
# Its params are the whole job spec (thetalker.pipeline.job.BenchJob as canonical JSON): any setting
# that changes reruns exactly this (system, model), and nothing else.


rule bench:
    input:
        unpack(get_bench_inputs),
    output:
        records=bench_outputs("records.jsonl"),
        summaries=bench_outputs("summary.json"),
        provenance=bench_outputs("provenance.json"),
        # The server's /metrics around each point (no server metrics: said inside).
        server_metrics=bench_outputs("server_metrics.json"),
        # The search points are not known before the job runs: this lists them.
        search=SEARCH,
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
        "python -m thetalker.pipeline.serve_and_sweep --job {params.job:q} --server-log {log.server} --records {output.records} --search-manifest {output.search} > {log.bench} 2>&1"
