# The settings search (docs/settings.md): every setting of a system's `settings:` knobs is
# its own wildcard {setting}, served from its own file (deploy-<sha12>.yaml, or args-<sha12>.yaml
# for flags and variables) under results/settings/{system}/{model}/{setting}/. With
# settings_search.screen, each setting first runs one short point (settings_screen); the
# checkpoint settings_select keeps the best (and the stock one), whose full capacity search
# (settings_bench) runs next. The service level is no part of any job's spec (given at run
# time, --slo), so changing capacity.slo reruns no bench job: settings_table recomputes every
# capacity from the records.


envvars:
    "THETALKER_SETTINGS_SLO",
    "THETALKER_SETTINGS_COMMAND",


wildcard_constraints:
    setting=wfc.wildcard_pattern(
        sorted({x.label for found in SETTINGS.values() for x in found}) or ["stock"]
    ),
    settingfile=r"(deploy|args)-[0-9a-f]{12}\.yaml",


localrules:
    settings_file,
    settings_select,
    settings_table,


# The setting's own file: the base deploy file with the knobs' values (or the flags and
# variables of an argument set), named by its sha256: bench jobs read it like a deploy file.
rule settings_file:
    output:
        f"{SETTING}/{{settingfile}}",
    log:
        "results/logs/settings/{system}/{model}/{setting}/{settingfile}.log",
    conda:
        "../envs/report.yaml"
    params:
        text=lambda w: setting_of(w).text,
    # A shell line, not `run:` (a run block re-parses the workflow in a subprocess).
    shell:
        "printf '%s' {params.text:q} > {output:q} 2> {log:q}"


rule settings_screen:
    input:
        setting=setting_file,
        prompts=config["prompts"],
    output:
        records=f"{SETTING}/screen/{SCREEN_POINT}/records.jsonl",
        summary=f"{SETTING}/screen/{SCREEN_POINT}/summary.json",
        provenance=f"{SETTING}/screen/{SCREEN_POINT}/provenance.json",
        server_metrics=f"{SETTING}/screen/{SCREEN_POINT}/server_metrics.json",
    log:
        bench=f"{SETTING_LOGS}/screen.log",
        server=f"{SETTING_LOGS}/screen-server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=lambda w, input: sgrid.screen_job(
            wfc.bench_job(config, w.system, w.model),
            config,
            setting_of(w),
            input.setting,
        ).to_json(),
    shell:
        "python -m thetalker.pipeline.serve_and_sweep --job {params.job:q} --server-log {log.server:q} --records {output.records:q} > {log.bench:q} 2>&1"


# Which settings the full search gets: ranked on the screen by figures that are no part of
# capacity.slo (thetalker.pipeline.settings_screen), so a change of the level keeps them.
checkpoint settings_select:
    input:
        screen_summaries,
    output:
        "results/settings/{system}/{model}/screen.json",
    log:
        "results/logs/settings/{system}/{model}/select.log",
    conda:
        "../envs/report.yaml"
    params:
        settings=settings_list,
        keep=SETTINGS_SEARCH["keep"],
        load=(
            f"--load {SETTINGS_SCREEN['concurrency']} --summaries"
            if SETTINGS_SCREEN
            else ""
        ),
    shell:
        "python -m thetalker.pipeline.settings_screen --out {output:q} --keep {params.keep} --settings {params.settings:q} {params.load} {input:q} > {log:q} 2>&1"


rule settings_bench:
    input:
        setting=setting_file,
        prompts=config["prompts"],
    output:
        records=setting_outputs("records.jsonl"),
        summaries=setting_outputs("summary.json"),
        provenance=setting_outputs("provenance.json"),
        server_metrics=setting_outputs("server_metrics.json"),
        search=f"{SETTING}/search.json",
    log:
        bench=f"{SETTING_LOGS}/bench.log",
        server=f"{SETTING_LOGS}/server.log",
    conda:
        "../envs/bench.yaml"
    resources:
        gpu=1,
    params:
        job=lambda w, input: sgrid.search_job(
            wfc.bench_job(config, w.system, w.model),
            config,
            setting_of(w),
            input.setting,
        ).to_json(),
    shell:
        'python -m thetalker.pipeline.serve_and_sweep --job {params.job:q} --server-log {log.server:q} --records {output.records:q} --search-manifest {output.search:q} --slo "$THETALKER_SETTINGS_SLO" > {log.bench:q} 2>&1'


rule settings_table:
    input:
        # Every run's screen.json named plainly, so every run's screen is planned at once
        # (the checkpoint function below stops at the first run not yet screened).
        screens=[f"results/settings/{s}/{m}/screen.json" for s, m in SETTINGS_RUNS],
        searched=settings_searched,
    output:
        table=report(
            "results/tables/settings.md",
            category="Tables",
            caption="../report/settings_table.rst",
        ),
        csv="results/tables/settings.csv",
        figure="results/figures/settings.png",
        best=[f"results/settings/{s}/{m}/best.yaml" for s, m in SETTINGS_RUNS],
    log:
        "results/logs/settings_table.log",
    conda:
        "../envs/report.yaml"
    params:
        runs=json.dumps(
            [
                {
                    "system": s,
                    "model": m,
                    "dir": f"results/settings/{s}/{m}",
                    "points": POINTS,
                }
                for s, m in SETTINGS_RUNS
            ]
        ),
        slo=json.dumps(wfc.service_level_spec(config), sort_keys=True),
        usd=config["report"]["gpu_hour_usd"],
    shell:
        'python -m thetalker.report.settings_table --runs {params.runs:q} --slo {params.slo:q} --gpu-hour-usd {params.usd} --table {output.table:q} --csv {output.csv:q} --figure {output.figure:q} --command "$THETALKER_SETTINGS_COMMAND" > {log:q} 2>&1'
