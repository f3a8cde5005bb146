"""The settings search's config checks, before any server starts (called from
`thetalker.pipeline.config_checks.check_inputs`; each error one line naming the knob):

- a deploy-file knob whose path is not in the deploy file, or a value of another type than
  the stock one (thetalker.pipeline.settings_grid);
- a setting the server itself would refuse (the embedded server reads each setting's deploy
  file as it will serve it: `workers: 0`, an unknown scheduling policy);
- two settings with one label (they would share a folder);
- a grid over the budget: more settings than `settings_search.max_settings`, or a search
  whose estimate (thetalker.pipeline.settings_plan) exceeds `settings_search.budget_hours`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import BenchJob, ConfigError, read_as_served
from thetalker.pipeline.settings_grid import DEPLOY, SettingsError, settings_of, settings_systems

__all__ = ["check_settings"]


def check_settings(
    config: Mapping[str, Any], bench_job: Callable[[Any, str, str], BenchJob]
) -> None:
    """ConfigError (one line naming the knob) for the first knob that cannot run; `bench_job`:
    config_checks.bench_job, for the budget's estimate."""
    search = config.get("settings_search") or {}
    unknown = [m for m in search.get("models") or [] if m not in config["models"]]
    if unknown:
        raise ConfigError(
            f"config field settings_search.models: unknown model {unknown[0]!r} "
            f"(models: {', '.join(config['models'])})"
        )
    for system, model in settings_systems(config):
        where = f"config field systems.{system}.settings"
        try:
            settings = settings_of(config, system, model)
        except SettingsError as exc:
            raise ConfigError(str(exc)) from None
        knobs = config["systems"][system]["settings"]
        sizes = " x ".join(f"{k} {len(v)}" for k, v in knobs.items())
        if len(settings) > int(search.get("max_settings", 16)):
            raise ConfigError(
                f"{where}: {len(settings)} settings ({sizes}, the stock values included) "
                f"exceed settings_search.max_settings {search.get('max_settings', 16)}"
            )
        labels = [s.label for s in settings]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ConfigError(f"{where}: two settings would both be named {twice[0]!r}")
        launcher = backends.launcher(config["systems"][system]["launcher"])
        for setting in settings:
            if setting.kind != DEPLOY:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / setting.filename
                path.write_text(setting.text, encoding="utf-8")
                try:
                    read_as_served(launcher, str(path))
                except ValueError as exc:
                    why = str(exc).replace(str(path), setting.filename)
                    raise ConfigError(f"{where}: setting {setting.label}: {why}") from None
    _check_budget(config, bench_job)


def _check_budget(
    config: Mapping[str, Any], bench_job: Callable[[Any, str, str], BenchJob]
) -> None:
    budget = (config.get("settings_search") or {}).get("budget_hours")
    if budget is None:
        return
    from thetalker.pipeline.settings_plan import estimate_settings

    estimates = estimate_settings(config, bench_job)
    total = sum(e.hours for e in estimates)
    if total > float(budget):
        worst = max(estimates, key=lambda e: e.hours)
        raise ConfigError(
            f"config field systems.{worst.system}.settings: the settings search is estimated "
            f"at {total:.2f} server-hours ({worst.settings} settings of {worst.system}/"
            f"{worst.model}: {worst.hours:.2f} h), over settings_search.budget_hours "
            f"{float(budget):g} (thetalker-plan shows the estimate)"
        )
