"""`thetalker-plan`: the bill before the run (thetalker.pipeline.plan computes it).

    thetalker-plan --configfile config/published.yaml --gpus 8
    thetalker-plan --configfile config/published.yaml --gpus 8 --results results   # after

Run from the workflow's folder (the config's paths are relative to it). The config is
checked and filled by the workflow's own schema, then every bench job it would run (speed,
and quality when enabled) is listed with its points and requests, its estimate, and the
totals: GPU-hours and wall time on the GPUs that run at once; then the settings search's
(docs/settings.md), its screen and its full search apart.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _jobs(config: dict) -> tuple[list, list[str]]:
    """The bench jobs the workflow would run, and each one's results folder kind."""
    from thetalker.pipeline import config_checks as wfc

    systems, models = list(config["systems"]), list(config["models"])
    # Each system on the models it runs (`systems.S.models`), as the workflow plans them.
    jobs = [wfc.bench_job(config, s, m) for s in systems for m in wfc.system_models(config, s)]
    kinds = ["runs"] * len(jobs)
    if config["quality"]["enabled"]:
        agents = set(wfc.agent_systems(config))
        runs = set(wfc.quality_runs(config, [s for s in systems if s not in agents]))
        for m in models:
            qcfg = wfc.quality_run_config(config, m)
            quality = [wfc.bench_job(qcfg, s, m) for s in systems if (m, s) in runs]
            jobs += quality
            kinds += ["quality"] * len(quality)
    return jobs, kinds


def _schema_error(exc: BaseException) -> str:
    """The schema's verdict in one line: the field's path and jsonschema's message."""
    cause: BaseException | None = exc
    while cause is not None and not hasattr(cause, "absolute_path"):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return "does not match config/schema.yaml"
    where = ".".join(str(p) for p in getattr(cause, "absolute_path", ())) or "(top level)"
    return f"{where}: {getattr(cause, 'message', cause)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="thetalker-plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--configfile", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--schema", type=Path, default=Path("config/schema.yaml"))
    parser.add_argument("--gpus", type=int, help="GPUs at once (default: the config's plan.gpus)")
    parser.add_argument("--results", type=Path, help="a finished run: set what each job took")
    args = parser.parse_args(argv)
    if args.gpus is not None and args.gpus < 1:
        parser.error("--gpus: at least 1")
    from snakemake.utils import validate

    from thetalker.data.yaml_files import YamlFileError, load_yaml_mapping
    from thetalker.pipeline import config_checks as wfc
    from thetalker.pipeline.plan import format_plan, make_plan

    try:
        config = load_yaml_mapping(args.configfile)
        try:
            validate(config, str(args.schema.resolve()))
        except Exception as exc:  # snakemake's WorkflowError wraps the schema's own error
            raise ValueError(_schema_error(exc)) from None
        wfc.check_config(config)
        jobs, kinds = _jobs(config)
    except YamlFileError as exc:  # names the file already
        print(f"thetalker-plan: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # the schema's or a cross-field check's first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"thetalker-plan: {args.configfile}: {first}", file=sys.stderr)
        return 2
    plan = make_plan(jobs, config["plan"], args.gpus, kinds)
    print(format_plan(plan, args.results), end="")
    from thetalker.pipeline.settings_plan import estimate_settings, format_settings_plan

    # The settings search (docs/settings.md), screen and full search apart.
    print(format_settings_plan(estimate_settings(config, wfc.bench_job)), end="")
    from thetalker.pipeline.ab_cost import estimate_ab, format_ab_plan

    print(format_ab_plan(estimate_ab(config)), end="")  # the A/B's arms (docs/ab.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
