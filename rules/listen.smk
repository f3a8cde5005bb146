# What the listener hears beside WER (docs/quality.md): audio health and DNSMOS of every point
# whose audio was saved (the quality runs; the speed points when save_audio or
# quality.at_speed_points saves theirs), their tables, and a listening pack of the worst
# streams per point. CPU only and cheap: local rules, never a cluster job on a GPU node.


localrules:
    stream_health,
    stream_dnsmos,
    health_report,
    naturalness_report,
    listening_pack,


wildcard_constraints:
    run="runs|quality",
    point=r"[cr][0-9][0-9.]*(/round[0-9]+)?",  # a point, or a round of one (repeats)


rule stream_health:
    input:
        records=f"{LISTEN_POINT}/records.jsonl",
    output:
        f"{LISTEN_POINT}/health.json",
    log:
        "results/logs/{system}/{model}/health_{run}_{point}.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.quality.health --records {input.records} --out {output} > {log} 2>&1"


# DNSMOS P.835 through the speechmos wheel's ONNX file; without it the file says "not
# installed" and so does the table (the `quality` extra installs it).
rule stream_dnsmos:
    input:
        records=f"{LISTEN_POINT}/records.jsonl",
    output:
        f"{LISTEN_POINT}/dnsmos.json",
    log:
        "results/logs/{system}/{model}/dnsmos_{run}_{point}.log",
    conda:
        "../envs/listen.yaml"
    threads: 1
    shell:
        "python -m thetalker.quality.dnsmos --records {input.records} --out {output} --threads {threads} > {log} 2>&1"


rule health_report:
    input:
        every_listened_point("health.json"),
    output:
        table=report(
            "results/tables/health.md",
            category="Tables",
            caption="../report/health_table.rst",
        ),
        csv=report(
            "results/tables/health.csv",
            category="Tables",
            caption="../report/health_table.rst",
        ),
    log:
        "results/logs/health_report.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.health --health {input} --table {output.table} > {log} 2>&1"


rule naturalness_report:
    input:
        every_listened_point("dnsmos.json"),
    output:
        table=report(
            "results/tables/naturalness.md",
            category="Tables",
            caption="../report/naturalness_table.rst",
        ),
        csv=report(
            "results/tables/naturalness.csv",
            category="Tables",
            caption="../report/naturalness_table.rst",
        ),
    log:
        "results/logs/naturalness_report.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m thetalker.report.naturalness --dnsmos {input} --table {output.table} > {log} 2>&1"


# The worst streams of a point by each figure: their WAVs under listen/ (one cut copy per
# stream) and one page of players (WAVs embedded up to a budget, then linked) that plays in
# the Snakemake report's iframe.
rule listening_pack:
    input:
        unpack(pack_inputs),
    output:
        wavs=directory(f"{LISTEN_POINT}/listen"),
        page=report(
            f"{LISTEN_POINT}/listen.html",
            category="Listening packs",
            subcategory="{system} {model}",
            caption="../report/listening_pack.rst",
            labels={
                "system": "{system}",
                "model": "{model}",
                "point": "{run} {point}",
            },
        ),
    log:
        "results/logs/{system}/{model}/pack_{run}_{point}.log",
    conda:
        "../envs/report.yaml"
    params:
        transcripts=lambda wildcards, input: (
            f"--transcripts {input.transcripts}"
            if "transcripts" in input.keys()
            else ""
        ),
        label=lambda wildcards: f"{wildcards.system} {wildcards.model} {wildcards.run} {wildcards.point}",
    shell:
        "python -m thetalker.quality.pack --records {input.records} --health {input.health} "
        "--dnsmos {input.dnsmos} {params.transcripts} --out-dir {output.wavs} "
        "--html {output.page} --label {params.label:q} > {log} 2>&1"
