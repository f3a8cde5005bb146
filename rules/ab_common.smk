# The A/B's inputs (rules/ab.smk, docs/ab.md): its runs and the functions its rules call.
# Functions only: Snakemake's lint keeps rules and functions in separate files.
from thetalker.pipeline import ab_plan

AB = config["ab"]
AB_RUNS = {(r.pair, r.model): r for r in ab_plan.ab_runs(config)}
AB_ARM = "results/ab/{pair}/{model}/round{k}/{arm}"
AB_LOGS = "results/logs/ab/{pair}/{model}/round{k}/{arm}"
# Each arm's manifest (written by every bench job): the link of the chain.
AB_MANIFEST = "results/ab/{pair}/{model}/round{k}/{arm}/search.json"


def ab_run(wildcards):
    return AB_RUNS[(wildcards.pair, wildcards.model)]


def ab_arm_outputs(filename):
    return expand(f"{AB_ARM}/{{point}}/{filename}", point=POINTS, allow_missing=True)


def ab_arm_inputs(wildcards):
    """The arm's files (prompts, its deploy file) and the arm before it in the chain: the
    arms of a pair run one at a time, in the order A B, B A, ... (a rerun resumes at the
    first arm without its manifest)."""
    run = ab_run(wildcards)
    if (int(wildcards.k), wildcards.arm) not in ab_plan.slot_order(run.rounds):
        raise ValueError(
            f"ab pair {run.pair} runs {run.rounds} rounds: no round {wildcards.k}"
        )
    spec = run.arm(wildcards.arm)
    inputs = wfc.bench_inputs(config, spec.system, run.model)
    if spec.deploy:
        inputs["deploy"] = spec.deploy
    before = ab_plan.previous_slot(run.rounds, int(wildcards.k), wildcards.arm)
    if before is not None:
        inputs["before"] = AB_MANIFEST.format(
            pair=run.pair, model=run.model, k=before[0], arm=before[1]
        )
    return inputs


def ab_arm_job(wildcards):
    return ab_plan.arm_job(config, ab_run(wildcards), wildcards.arm).to_json()


def ab_manifests():
    return [
        AB_MANIFEST.format(pair=r.pair, model=r.model, k=k, arm=arm)
        for r in AB_RUNS.values()
        for k, arm in ab_plan.slot_order(r.rounds)
    ]


def ab_dnsmos_files():
    """Each arm's dnsmos.json at every point, when the A/B scores its audio (ab.dnsmos)."""
    if not AB["dnsmos"]:
        return []
    return [
        f"{AB_ARM}/{point}/dnsmos.json".format(pair=r.pair, model=r.model, k=k, arm=arm)
        for r in AB_RUNS.values()
        for k, arm in ab_plan.slot_order(r.rounds)
        for point in POINTS
    ]


def ab_table_runs():
    """What the table reads of each run: its arms' folders in run order, and the settings
    a verdict depends on."""
    return json.dumps(
        [
            {
                "pair": r.pair,
                "model": r.model,
                "a": r.a.describe(),
                "b": r.b.describe(),
                "dir": r.folder,
                "points": POINTS,
                "rounds": r.rounds,
            }
            for r in AB_RUNS.values()
        ],
        sort_keys=True,
    )
