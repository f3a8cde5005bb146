# The Python of the workflow: config validation, the lists every rule expands over, the
# folder layout (written here once), and the input, params and target functions.
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

from thetalker.data import layout
from thetalker.lifecycle.leftover import leftover_warnings
from thetalker.pipeline import config_checks as wfc
from thetalker.report.settings import ReportSettings

# The schema checks types and ranges and fills in every default; then what a schema cannot
# say (cross-field checks, the files a run reads), each error one line naming the field.
wfc.check_config_size(config)  # an alias bomb first: validate would print it expanded
validate(config, "../config/schema.yaml")
wfc.check_config(config)
wfc.check_inputs(config)
# A server left by a SIGKILLed run holds its GPU even when this run has nothing to do.
for line in leftover_warnings(Path("results/logs")):
    print(f"WARNING: {line}", file=sys.stderr)
wfc.check_quality(config)

SYSTEMS = list(config["systems"])
# protocol: websocket systems (the agent mode, results/tables/agent.md).
AGENT_SYSTEMS = wfc.agent_systems(config)
MODELS = list(config["models"])
# (model, system) of every run, models then systems: a system runs its `models` (default all).
RUNS = wfc.runs(config)
# Quality (WER) runs are whole-text runs: the agent mode measures timing, not the voice; and
# none where the server cannot serve the quality checkpoint (Nari: no -Base model).
QUALITY_RUNS = wfc.quality_runs(config, [s for s in SYSTEMS if s not in AGENT_SYSTEMS])
QUALITY_SYSTEMS = [s for s in SYSTEMS if any(s == system for _, system in QUALITY_RUNS)]
CONCURRENCY = [int(c) for c in config["concurrency"]]
# The grid's points, in the order a bench job runs them: c{N}, then r{R} (request_rates).
POINTS = wfc.point_labels(config)
# Below each point: "" for one run, else round1/ .. roundN/ (repeats, run back to back).
ROUNDS = wfc.round_dirs(config)
QUALITY = wfc.quality_settings(config)
# What every table and figure over points.csv reads, as one canonical JSON object.
REPORT_SETTINGS = ReportSettings.from_config(config).to_json()

# The layout. A speed run's point: its records, summary, provenance (and audio, wer).
RUN = "results/runs/{system}/{model}"
POINT = f"{RUN}/{layout.CLOSED_PREFIX}{{n}}"
# A quality run: one point at quality.concurrency, then transcripts and wer.json.
QUALITY_RUN = "results/quality/{system}/{model}"
QUALITY_POINT = f"{QUALITY_RUN}/{layout.concurrency_label(QUALITY['concurrency'])}"
COMPARISON = "results/quality/compare/{model}/{system_a}_vs_{system_b}.json"
LOGS = "results/logs/{system}/{model}"
# The capacity search's manifest (always written by the bench job): the points it added,
# under {RUN}/search/{point}/, which no rule can name before the job runs. (The point and
# round folder names: thetalker.data.layout.)
SEARCH = f"{RUN}/search.json"


wildcard_constraints:
    system=wfc.wildcard_pattern(SYSTEMS),
    model=wfc.wildcard_pattern(MODELS),
    system_a=wfc.wildcard_pattern(SYSTEMS),
    system_b=wfc.wildcard_pattern(SYSTEMS),
    n=r"\d+",


def bench_outputs(filename):
    """One file of each grid point (and round) of a bench job, in the order it runs them."""
    return expand(
        f"{RUN}/{{point}}/{{round}}{filename}",
        point=POINTS,
        round=ROUNDS,
        allow_missing=True,
    )


def capacity_wer_inputs():
    """The speed points' wer.json when capacity.slo gates on WER (quality.at_speed_points):
    the capacity table reads each one beside its point's records."""
    slo = (config.get("capacity") or {}).get("slo") or {}
    if slo.get("max_wer_pct") is None:
        return []
    return expand(f"{POINT}/wer.json", model=MODELS, system=SYSTEMS, n=CONCURRENCY)


def capacity_listen_inputs():
    """The speed points' dnsmos.json and health.json when capacity.slo gates on what the
    listener hears (min_dnsmos_ovrl, max_unhealthy_pct): read beside each point's records.
    """
    slo = (config.get("capacity") or {}).get("slo") or {}
    files = []
    if slo.get("min_dnsmos_ovrl") is not None:
        files += every_point("dnsmos.json")
    if slo.get("max_unhealthy_pct") is not None:
        files += every_point("health.json")
    return files


def every_point(filename, points=POINTS):
    """One file of every speed point (and round) on the grid, in config order: models, then
    systems, then points. The search points are in the manifests (every_search_manifest).
    """
    return [
        path
        for model, system in RUNS
        for path in expand(
            f"{RUN}/{{point}}/{{round}}{filename}",
            model=model,
            system=system,
            point=points,
            round=ROUNDS,
        )
    ]


# WER under load is per concurrency point (transcribe_point): the closed-loop grid only.
CLOSED_POINTS = [layout.concurrency_label(c) for c in CONCURRENCY]


def every_search_manifest():
    return [SEARCH.format(model=m, system=s) for m, s in RUNS]


def every_quality_run(filename):
    """One file of every quality run, in config order: models, then systems."""
    return [
        f"{QUALITY_RUN}/{filename}".format(model=m, system=s) for m, s in QUALITY_RUNS
    ]


def every_listened_point(filename):
    """One file of every point whose audio is saved (rules/listen.smk): the speed grid's when
    save_audio or quality.at_speed_points saves it, then each quality run's point."""
    speed = []
    if config["save_audio"] or QUALITY["at_speed_points"]:
        speed = every_point(filename)
    quality = [
        f"{QUALITY_POINT}/{filename}".format(model=m, system=s) for m, s in QUALITY_RUNS
    ]
    return speed + quality


def compare_outputs():
    """The paired comparisons: every model, each (system_a, system_b) of quality.compare."""
    return [
        COMPARISON.format(model=m, system_a=a, system_b=b)
        for a, b in wfc.wer_pairs(config)
        for m in MODELS
        if (m, a) in QUALITY_RUNS and (m, b) in QUALITY_RUNS
    ]


def get_final_output():
    targets = [
        *expand(
            "results/tables/{table}.md",
            table=["throughput", "continuity", "ttfa", "cost"],
        ),
        *expand(
            "results/figures/{figure}.png",
            figure=["throughput", "continuity", "ttfa", "cost"],
        ),
        "results/tables/provenance.md",
        "results/tables/capacity.md",
        "results/figures/capacity.png",
        "results/tables/server.md",
        "results/figures/server.png",
    ]
    if config["request_rates"]:  # the open-loop points: the public report's load shape
        targets += ["results/tables/by_rate.md", "results/figures/by_rate.png"]
    if AGENT_SYSTEMS:
        targets += ["results/tables/agent.md", "results/figures/agent.png"]
    if QUALITY["enabled"]:
        targets += [
            "results/tables/wer.md",
            "results/figures/wer.png",
            *compare_outputs(),
            # rules/listen.smk: what the listener hears beside WER
            "results/tables/health.md",
            "results/tables/naturalness.md",
            *every_listened_point("listen.html"),
        ]
        if QUALITY["at_speed_points"]:
            targets.append("results/tables/wer_load.md")
    return targets


def get_bench_inputs(wildcards):
    return wfc.bench_inputs(config, wildcards.system, wildcards.model)


def get_bench_job(wildcards):
    return wfc.bench_job(config, wildcards.system, wildcards.model).to_json()


def get_quality_inputs(wildcards):
    quality_config = wfc.quality_run_config(config, wildcards.model)
    return wfc.bench_inputs(quality_config, wildcards.system, wildcards.model)


def get_quality_job(wildcards):
    quality_config = wfc.quality_run_config(config, wildcards.model)
    return wfc.bench_job(quality_config, wildcards.system, wildcards.model).to_json()


def get_asr_model_arg(wildcards):
    return wfc.asr_model_arg(config)


def get_wer_under_load_label(wildcards):
    return wfc.wer_under_load_label(wildcards.model, wildcards.n)


def get_wer_under_load_labels(wildcards):
    labels = [wfc.wer_under_load_label(m, c) for m in MODELS for c in CONCURRENCY]
    return " ".join(shlex.quote(label) for label in labels)


# An earlier run's bench job still writing (an orphan of a SIGKILLed Snakemake): Snakemake
# would delete its outputs before rerunning the job, so the run is refused first.
onstart:
    from snakemake.exceptions import WorkflowError
    from thetalker.lifecycle.run_lock import held_locks

    busy = held_locks("results/logs")
    if busy:
        raise WorkflowError(
            "an earlier run's bench job still writes its results; stop it or wait: "
            + "; ".join(busy)
        )


# With max_error_rate 1.0 (the published setting) a point where most requests failed still
# passes its job: the tables mark it, and the end of the run says so (thetalker.pipeline.verdicts).
onsuccess:
    import sys
    from thetalker.pipeline.verdicts import failed_points_warning

    summaries = every_point("summary.json")
    if QUALITY["enabled"]:
        summaries += [
            f"{QUALITY_POINT}/summary.json".format(model=m, system=s)
            for m, s in QUALITY_RUNS
        ]
    failed = failed_points_warning(summaries)
    if failed:
        print(failed, file=sys.stderr)
    # A stock point served with the optimized library installed is no stock number.
    from thetalker.pipeline.verdicts import contaminated_points_warning

    contaminated = contaminated_points_warning(
        every_point("provenance.json"), every_search_manifest()
    )
    if contaminated:
        print(contaminated, file=sys.stderr)


# The listening pack's inputs (rules/listen.smk): a point's records and health, its DNSMOS
# where it ships, and the transcripts that cover it.
# The quality run's point, the one its transcripts.jsonl (one folder up) transcribes.
QUALITY_POINT_LABEL = layout.concurrency_label(QUALITY["concurrency"])
# A point's folder: results/runs/{system}/{model}/{point}[/round{k}] or
# results/quality/{system}/{model}/{point}.
LISTEN_POINT = "results/{run}/{system}/{model}/{point}"


def pack_inputs(wildcards):
    """A point's records, health and DNSMOS, and its transcripts where it was transcribed
    (the quality run's, one folder up; a speed point's with quality.at_speed_points)."""
    point = LISTEN_POINT.format(**wildcards)
    inputs = {
        "records": f"{point}/records.jsonl",
        "health": f"{point}/health.json",
        "dnsmos": f"{point}/dnsmos.json",
    }
    if wildcards.run == "quality" and wildcards.point == QUALITY_POINT_LABEL:
        inputs["transcripts"] = str(Path(point).parent / "transcripts.jsonl")
    elif QUALITY["at_speed_points"] and wildcards.point.startswith("c"):
        inputs["transcripts"] = f"{point}/transcripts.jsonl"
    return inputs
