# Tables and figures from results/points.csv: cheap, so they run where Snakemake runs.


localrules:
    agent_table,
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
    log:
        "results/logs/tables.log",
    conda:
        "../envs/report.yaml"
    params:
        models=MODELS,
        systems=SYSTEMS,
        headline=config["report"]["headline_concurrency"],
        ratio=config["report"]["ratio"],
        gpu_hour_usd=config["report"]["gpu_hour_usd"],
        min_continuity_pct=config["report"]["min_continuity_pct"],
    shell:
        "python -m thetalker.report.tables --points {input} --models {params.models} --systems {params.systems} --headline {params.headline} --ratio {params.ratio} --gpu-hour-usd {params.gpu_hour_usd} --min-continuity-pct {params.min_continuity_pct} --throughput {output.throughput} --continuity {output.continuity} --ttfa {output.ttfa} --cost {output.cost} > {log} 2>&1"


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
    log:
        "results/logs/figures.log",
    conda:
        "../envs/report.yaml"
    params:
        models=MODELS,
        systems=SYSTEMS,
        headline=config["report"]["headline_concurrency"],
        gpu_hour_usd=config["report"]["gpu_hour_usd"],
        min_continuity_pct=config["report"]["min_continuity_pct"],
    shell:
        "python -m thetalker.report.figures --points {input} --models {params.models} --systems {params.systems} --headline {params.headline} --gpu-hour-usd {params.gpu_hour_usd} --min-continuity-pct {params.min_continuity_pct} --throughput {output.throughput} --continuity {output.continuity} --ttfa {output.ttfa} --cost {output.cost} > {log} 2>&1"


# The agent mode's table and figure, from the records of the protocol: websocket systems.
rule agent_table:
    input:
        expand(
            f"{POINT}/records.jsonl", model=MODELS, system=AGENT_SYSTEMS, n=CONCURRENCY
        ),
    output:
        table=report(
            "results/tables/agent.md",
            category="Tables",
            caption="../report/agent_table.rst",
        ),
        csv="results/tables/agent.csv",
        figure=report(
            "results/figures/agent.png",
            category="Figures",
            caption="../report/agent_figure.rst",
        ),
    log:
        "results/logs/agent_table.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.agent --records {input} --table {output.table} --figure {output.figure} > {log} 2>&1"


# Where each point's numbers came from: one row per speed point in provenance.md, and every
# point's full provenance.json copied (as {system}_{model}_c{N}.json) into the report.
rule provenance_table:
    input:
        every_point("provenance.json"),
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
