# Tables and figures from results/points.csv: cheap, so they run where Snakemake runs. Each
# takes the report's settings as one JSON object (REPORT_SETTINGS: thetalker.report.settings).


localrules:
    agent_table,
    server_table,
    by_rate,
    capacity,
    tables,
    figures,
    provenance_table,


rule tables:
    input:
        "results/points.csv",
    output:
        throughput=report(
            "results/tables/throughput.md",
            category="Tables",
            caption="../report/throughput_table.rst",
        ),
        continuity=report(
            "results/tables/continuity.md",
            category="Tables",
            caption="../report/continuity_table.rst",
        ),
        ttfa=report(
            "results/tables/ttfa.md",
            category="Tables",
            caption="../report/ttfa_table.rst",
        ),
        cost=report(
            "results/tables/cost.md",
            category="Tables",
            caption="../report/cost_table.rst",
        ),
        # The same numbers, one per cell: sortable tables in the Snakemake report.
        throughput_csv=report(
            "results/tables/throughput.csv",
            category="Tables",
            caption="../report/throughput_csv.rst",
        ),
        continuity_csv=report(
            "results/tables/continuity.csv",
            category="Tables",
            caption="../report/continuity_csv.rst",
        ),
        continuity_thresholds_csv=report(
            "results/tables/continuity_thresholds.csv",
            category="Tables",
            caption="../report/continuity_thresholds_csv.rst",
        ),
        ttfa_csv=report(
            "results/tables/ttfa.csv",
            category="Tables",
            caption="../report/ttfa_csv.rst",
        ),
        cost_csv=report(
            "results/tables/cost.csv",
            category="Tables",
            caption="../report/cost_csv.rst",
        ),
    log:
        "results/logs/tables.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT_SETTINGS,
    shell:
        "python -m thetalker.report.tables --points {input} --settings {params.report:q} "
        "--throughput {output.throughput} --continuity {output.continuity} "
        "--ttfa {output.ttfa} --cost {output.cost} > {log} 2>&1"


rule figures:
    input:
        "results/points.csv",
    output:
        throughput=report(
            "results/figures/throughput.png",
            category="Figures",
            caption="../report/throughput_figure.rst",
        ),
        continuity=report(
            "results/figures/continuity.png",
            category="Figures",
            caption="../report/continuity_figure.rst",
        ),
        ttfa=report(
            "results/figures/ttfa.png",
            category="Figures",
            caption="../report/ttfa_figure.rst",
        ),
        cost=report(
            "results/figures/cost.png",
            category="Figures",
            caption="../report/cost_figure.rst",
        ),
        continuity_thresholds=report(
            "results/figures/continuity_thresholds.png",
            category="Figures",
            caption="../report/continuity_thresholds_figure.rst",
        ),
        perceived=report(
            "results/figures/perceived_first_audio.png",
            category="Figures",
            caption="../report/perceived_figure.rst",
        ),
        start_buffer=report(
            "results/figures/start_buffer.png",
            category="Figures",
            caption="../report/start_buffer_figure.rst",
        ),
    log:
        "results/logs/figures.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT_SETTINGS,
    shell:
        "python -m thetalker.report.figures --points {input} --settings {params.report:q} "
        "--throughput {output.throughput} --continuity {output.continuity} "
        "--ttfa {output.ttfa} --cost {output.cost} "
        "--continuity-thresholds {output.continuity_thresholds} "
        "--perceived {output.perceived} --start-buffer {output.start_buffer} > {log} 2>&1"


# How many streams each (system, model) holds (thetalker.report.capacity), from points.csv:
# the grid's points and the capacity search's alike (hollow in the figure), and the price
# at capacity beside the headline one.
rule capacity:
    input:
        points="results/points.csv",
        server="results/tables/server.csv",  # queue and generation times: "limited by"
        wer=capacity_wer_inputs(),
        listened=capacity_listen_inputs(),
    output:
        table=report(
            "results/tables/capacity.md",
            category="Tables",
            caption="../report/capacity_table.rst",
        ),
        csv=report(
            "results/tables/capacity.csv",
            category="Tables",
            caption="../report/capacity_csv.rst",
        ),
        figure=report(
            "results/figures/capacity.png",
            category="Figures",
            caption="../report/capacity_figure.rst",
        ),
    log:
        "results/logs/capacity.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT_SETTINGS,
    shell:
        "python -m thetalker.report.capacity --points {input.points} --settings {params.report:q} "
        "--server-table {input.server} --table {output.table} --figure {output.figure} > {log} 2>&1"


# The public report's load shape: p95 audible first audio by request rate per system, from
# the open-loop points (request_rates, capped at max_in_flight) of points.csv.
rule by_rate:
    input:
        "results/points.csv",
    output:
        table=report(
            "results/tables/by_rate.md",
            category="Tables",
            caption="../report/by_rate_table.rst",
        ),
        csv=report(
            "results/tables/by_rate.csv",
            category="Tables",
            caption="../report/by_rate_table.rst",
        ),
        figure=report(
            "results/figures/by_rate.png",
            category="Figures",
            caption="../report/by_rate_figure.rst",
        ),
    log:
        "results/logs/by_rate.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT_SETTINGS,
    shell:
        "python -m thetalker.report.by_rate --points {input} --settings {params.report:q} "
        "--table {output.table} --figure {output.figure} > {log} 2>&1"


# The agent mode's table and figure, from the records of the protocol: websocket systems.
rule agent_table:
    input:
        # The closed-loop points; with repeats, each point's first round.
        [
            path
            for model, system in wfc.runs(config, AGENT_SYSTEMS)
            for path in expand(
                f"{POINT}/{ROUNDS[0]}records.jsonl",
                model=model,
                system=system,
                n=CONCURRENCY,
            )
        ],
    output:
        table=report(
            "results/tables/agent.md",
            category="Tables",
            caption="../report/agent_table.rst",
        ),
        csv=report(
            "results/tables/agent.csv",
            category="Tables",
            caption="../report/agent_csv.rst",
        ),
        figure=report(
            "results/figures/agent.png",
            category="Figures",
            caption="../report/agent_figure.rst",
        ),
    log:
        "results/logs/agent_table.log",
    conda:
        "../envs/report.yaml"
    # Points are computed in parallel, one process each (the same table on one core).
    threads: 8  # at most: Snakemake gives a local job no more than --cores (workflow.cores is
    # undefined under an executor such as Slurm, which then refuses the workflow)
    shell:
        "python -m thetalker.report.agent --jobs {threads} --records {input} --table {output.table} --figure {output.figure} > {log} 2>&1"


# Where each point's numbers came from: one row per speed point in provenance.md (the
# capacity search's too, from the manifests), and every point's full provenance.json copied
# (as {system}_{model}_c{N}.json, with _search, _round{k} where they apply) into the report.
rule provenance_table:
    input:
        points=every_point("provenance.json"),
        search=every_search_manifest(),
    output:
        table=report(
            "results/tables/provenance.md",
            category="Provenance",
            caption="../report/provenance.rst",
        ),
        points=report(
            directory("results/provenance"),
            patterns=["{point}.json"],
            category="Provenance",
            subcategory="provenance.json of each point",
            caption="../report/provenance.rst",
            labels={"point": "{point}"},
        ),
    log:
        "results/logs/provenance_table.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/provenance_table.py"


# The server's own view beside the client's (thetalker.report.server): each point's
# server_metrics.json (/metrics deltas over its scored requests) reconciled with its records
# and its GPU sampler; the capacity search's points too, from the manifests.
rule server_table:
    input:
        metrics=every_point("server_metrics.json"),
        records=every_point("records.jsonl"),
        provenance=every_point("provenance.json"),
        search=every_search_manifest(),
    output:
        table=report(
            "results/tables/server.md",
            category="Tables",
            caption="../report/server_table.rst",
        ),
        csv=report(
            "results/tables/server.csv",
            category="Tables",
            caption="../report/server_table.rst",
        ),
        figure=report(
            "results/figures/server.png",
            category="Figures",
            caption="../report/server_figure.rst",
        ),
    log:
        "results/logs/server_table.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.server --server-metrics {input.metrics} --search-manifests {input.search} --table {output.table} --figure {output.figure} > {log} 2>&1"
