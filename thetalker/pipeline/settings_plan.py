"""What the settings search will cost before it runs: per (system, model), the screen (every
setting, one short point each) and the full capacity search (the kept settings and the
stock one), each a bench job of its own with its own server start, estimated by
`thetalker.pipeline.plan` like any bench job. `thetalker-plan` prints it; the config
checks refuse a search over `settings_search.budget_hours`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from thetalker.pipeline.job import BenchJob
from thetalker.pipeline.plan import hours_text, make_plan
from thetalker.pipeline.settings_grid import screen_job, search_job, settings_of, settings_systems

__all__ = ["SettingsEstimate", "full_searches", "estimate_settings", "format_settings_plan"]


@dataclass(frozen=True)
class SettingsEstimate:
    system: str
    model: str
    settings: int
    screened: int  # settings run at the screen's load (0: no screen)
    screen_hours: float  # all of them together
    searched: int  # settings given the full search
    search_hours: float
    gpu: bool  # a GPU server (False: CPU, hours of the server's machine)

    @property
    def hours(self) -> float:
        return self.screen_hours + self.search_hours


def full_searches(n_settings: int, screen: Mapping[str, Any] | None, keep: int) -> int:
    """Settings given the full search: all of them without a screen, else the stock one and
    the best `keep` others."""
    return n_settings if screen is None else min(n_settings, keep + 1)


def estimate_settings(
    config: Mapping[str, Any], bench_job: Callable[[Any, str, str], BenchJob]
) -> list[SettingsEstimate]:
    """Per (system, model) with knobs; `bench_job`: config_checks.bench_job (passed in:
    config_checks calls the settings checks, which call this)."""
    search = config["settings_search"]
    out = []
    for system, model in settings_systems(config):
        settings = settings_of(config, system, model)
        stock = settings[0]
        n_full = full_searches(len(settings), search["screen"], int(search["keep"]))
        base = bench_job(config, system, model)
        screened = len(settings) if search["screen"] is not None else 0
        jobs = [screen_job(base, config, stock, "x")] * screened
        jobs += [search_job(base, config, stock, "x")] * n_full
        # One after another on a GPU: the first start is cold, every later one warm.
        plan = make_plan(jobs, config["plan"], 1)
        screen_h = sum(j.hours for j in plan.jobs[:screened])
        search_h = sum(j.hours for j in plan.jobs[screened:])
        out.append(
            SettingsEstimate(
                system,
                model,
                len(settings),
                screened,
                screen_h,
                n_full,
                search_h,
                plan.jobs[-1].gpu,
            )
        )
    return out


def format_settings_plan(estimates: list[SettingsEstimate]) -> str:
    """The settings search's rows and totals, screen and full search apart."""
    if not estimates:
        return ""
    lines = [
        "",
        "Settings search (results/tables/settings.md, docs/settings.md):",
        "",
        "| system | model | settings | screen | full search | estimate |",
        "|---|---|---|---|---|---|",
    ]
    for e in estimates:
        screen = (
            f"{e.screened} x short point: {hours_text(e.screen_hours)}" if e.screened else "none"
        )
        device = "" if e.gpu else " (CPU)"
        lines.append(
            f"| {e.system} | {e.model} | {e.settings} | {screen} | "
            f"{e.searched} x grid + bisection: {hours_text(e.search_hours)} | "
            f"{hours_text(e.hours)}{device} |"
        )
    gpu = [e for e in estimates if e.gpu]
    lines += [
        "",
        f"Settings search: {sum(e.screen_hours for e in gpu):.2f} GPU-hours screening, "
        f"{sum(e.search_hours for e in gpu):.2f} GPU-hours full search "
        "(CPU servers' hours in their rows only).",
    ]
    return "\n".join(lines) + "\n"
