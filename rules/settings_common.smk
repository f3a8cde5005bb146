# The settings search's inputs (rules/settings.smk): each system's settings, their files and
# the functions its rules call. Functions only: Snakemake's lint keeps rules and functions in
# separate files.
import json
import os

from thetalker.pipeline import settings_grid as sgrid

SETTINGS_RUNS = sgrid.settings_systems(config)
SETTINGS = {(s, m): sgrid.settings_of(config, s, m) for s, m in SETTINGS_RUNS}
SETTINGS_SEARCH = config["settings_search"]
SETTINGS_SCREEN = SETTINGS_SEARCH["screen"]
# The command that measured the search, for best.yaml's header (not in params: a dry run
# or another target list must not rerun the table).
SETTINGS_COMMAND = "snakemake " + " ".join(shlex.quote(a) for a in sys.argv[1:])
SETTING = "results/settings/{system}/{model}/{setting}"
SETTING_LOGS = "results/logs/settings/{system}/{model}/{setting}"
# The live search's level, given to the bench jobs on their command line, not in params.
SETTINGS_SLO = json.dumps(
    (
        wfc.capacity_search(
            {**config, "capacity": {**config["capacity"], "refine": True}}
        )
        or {}
    ).get("slo")
    or {},
    sort_keys=True,
)
# The level and the command reach the jobs through the environment, not params: a change of
# either is no reason to rerun a bench job (or, for the command, the table). `envvars` in
# rules/settings.smk passes them on to cluster jobs.
os.environ["THETALKER_SETTINGS_SLO"] = SETTINGS_SLO
os.environ["THETALKER_SETTINGS_COMMAND"] = SETTINGS_COMMAND


def setting_of(wildcards):
    for found in SETTINGS[(wildcards.system, wildcards.model)]:
        if found.label == wildcards.setting:
            return found
    raise ValueError(
        f"no setting {wildcards.setting} of {wildcards.system}/{wildcards.model}"
    )


def setting_file(wildcards):
    return f"{SETTING}/{setting_of(wildcards).filename}".format(**wildcards)


def setting_outputs(filename):
    return expand(f"{SETTING}/{{point}}/{filename}", point=POINTS, allow_missing=True)


SCREEN_POINT = (
    layout.concurrency_label(SETTINGS_SCREEN["concurrency"])
    if SETTINGS_SCREEN
    else "c0"
)


def screen_summaries(wildcards):
    if not SETTINGS_SCREEN:
        return []
    return [
        f"{SETTING}/screen/{SCREEN_POINT}/summary.json".format(
            system=wildcards.system, model=wildcards.model, setting=x.label
        )
        for x in SETTINGS[(wildcards.system, wildcards.model)]
    ]


def settings_list(wildcards):
    return json.dumps(
        [
            {
                "label": x.label,
                "sha256": x.sha256,
                "stock": x.stock,
                "values": dict(x.values),
            }
            for x in SETTINGS[(wildcards.system, wildcards.model)]
        ],
        sort_keys=True,
    )


def settings_searched(wildcards):
    """Every kept setting's search.json, from each run's screen.json (the checkpoint)."""
    files = []
    for system, model in SETTINGS_RUNS:
        screen = checkpoints.settings_select.get(system=system, model=model).output[0]
        kept = [
            s["label"]
            for s in json.loads(Path(screen).read_text())["settings"]
            if s["kept"]
        ]
        files += [
            f"{SETTING}/search.json".format(system=system, model=model, setting=x)
            for x in kept
        ]
    return files
