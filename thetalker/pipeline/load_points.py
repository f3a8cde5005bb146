"""The config's load: its points, their request counts, the service level and the search.

A point is a concurrency (`c{N}`) or a request rate (`r{R}`), each run `repeats` times
(`round1/` .. `roundN/`); `request_counts` says how many scored requests each concurrency
point sends (a model's own map over the top-level one). The service level (`capacity.slo`,
with its gaps filled from report.*) is what the capacity search bisects for and what the
report judges each point by. Checked after the schema by
thetalker.pipeline.config_checks.check_config, each error one line naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thetalker.data import layout
from thetalker.pipeline.job import ConfigError
from thetalker.pipeline.quality_config import quality_settings
from thetalker.util.checks import field_message

__all__ = [
    "LISTENED_SLO_KEYS",
    "capacity_search",
    "check_plan_rates",
    "check_point_labels",
    "check_service_level",
    "point_labels",
    "request_counts",
    "round_dirs",
    "service_level_spec",
]


def request_counts(config: Mapping[str, Any], model: str | None = None) -> dict[int, int]:
    """Scored requests per concurrency point; YAML gives int keys, --config may give str.

    A model's own `requests` map overrides the top-level one point by point, so changing
    one model's count reruns that model's jobs only.
    """
    sources = [("requests", config["requests"])]
    if model is not None and config["models"][model].get("requests"):
        sources.append((f"models.{model}.requests", config["models"][model]["requests"]))
    counts: dict[int, int] = {}
    for field, mapping in sources:
        seen: dict[int, Any] = {}  # a key per point: {1: 2, "01": 5} would silently run 5
        for key, value in mapping.items():
            try:
                point = int(key)
                counts[point] = int(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"config field {field}.{key}: not a concurrency integer"
                ) from None
            if point in seen:
                raise ConfigError(
                    f"config field {field}: keys {seen[point]!r} and {key!r} both mean "
                    f"concurrency {point}"
                )
            seen[point] = key
    return counts


def check_point_labels(config: Mapping[str, Any]) -> None:
    """Every point's folder name is its own (no two points share one, or one overwrites the
    other) and says its load exactly as thetalker.report.points reads it back."""
    seen: dict[str, str] = {}
    for i, rate in enumerate(config["request_rates"]):
        label = layout.rate_label(rate)
        field = f"request_rates[{i}]"
        if layout.parse_point_label(label) != (None, float(rate)):
            raise ConfigError(
                f"config field {field}: {rate} would be named {label}, which does not say it "
                "exactly; give at most 6 significant digits, between 0.0001 and 999999"
            )
        if label in seen:
            raise ConfigError(
                f"config field {field}: {rate} and {seen[label]} share the label {label}"
            )
        seen[label] = f"{field} ({rate})"
    for i, c in enumerate(config["concurrency"]):
        label = layout.concurrency_label(c)
        if label in seen:
            raise ConfigError(f"config field concurrency[{i}]: {c} and {seen[label]} share {label}")
        seen[label] = f"concurrency[{i}] ({c})"


def check_plan_rates(config: Mapping[str, Any]) -> None:
    """Every plan rate gets the check nan gets (thetalker.pipeline.plan.plan_rate_problem):
    thetalker-plan divides by them, so 0, {} or a string is one line, not a traceback."""
    from thetalker.pipeline.plan import plan_rate_problem

    problem = plan_rate_problem(config.get("plan") or {})
    if problem:
        raise ConfigError(f"config field {problem}")


def check_service_level(config: Mapping[str, Any]) -> None:
    """capacity.slo: a known player model; WER only where it is measured at each point."""
    from thetalker.pipeline.capacity import ServiceLevel

    try:
        ServiceLevel.from_spec(service_level_spec(config))
    except (TypeError, ValueError) as exc:
        raise ConfigError(field_message("config", "capacity.slo", str(exc))) from None
    if (
        config["capacity"]["slo"]["max_wer_pct"] is not None
        and not quality_settings(config)["at_speed_points"]
    ):
        raise ConfigError(
            field_message(
                "config",
                "capacity.slo.max_wer_pct",
                "needs quality.at_speed_points true (the WER of each load's audio)",
            )
        )
    slo = config["capacity"]["slo"]
    saved = config["save_audio"] or quality_settings(config)["at_speed_points"]
    for key in LISTENED_SLO_KEYS:
        if slo.get(key) is not None and not saved:
            raise ConfigError(
                field_message(
                    "config",
                    f"capacity.slo.{key}",
                    "needs each load's audio: save_audio true (or quality.at_speed_points)",
                )
            )


def capacity_search(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bench job's bisection (`capacity.refine`): its step limit, the boundary repeats and
    the service level it searches for (`service_level_spec`), or None when off."""
    capacity = config["capacity"]
    if not capacity["refine"]:
        return None
    slo = service_level_spec(config)
    for key in LISTENED_SLO_KEYS:  # judged by the report on the saved audio, never live
        slo.pop(key, None)
    return {
        "max_steps": int(capacity["max_steps"]),
        "repeat_boundary": int(capacity["repeat_boundary"]),
        "slo": slo,
    }


# capacity.slo figures of what the listener hears (docs/quality.md), off by default: left
# out of the level when off, so stating none changes no job's params.
LISTENED_SLO_KEYS = ("min_dnsmos_ovrl", "max_unhealthy_pct")


def service_level_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """`capacity.slo` with its gaps filled from report.*: continuity defaults to
    report.min_continuity_pct, and report.ttfa_slo_s (first byte p90) joins the level."""
    report = config["report"]
    slo = dict(config["capacity"]["slo"])
    if slo.get("min_continuity_pct") is None:
        slo["min_continuity_pct"] = float(report["min_continuity_pct"])
    slo["ttfa_slo_s"] = report["ttfa_slo_s"]
    for key in LISTENED_SLO_KEYS:
        if slo.get(key) is None:
            slo.pop(key, None)
    return slo


def point_labels(config: Mapping[str, Any]) -> list[str]:
    """The grid's points, in the order a bench job runs them: `c{N}`, then `r{R}`."""
    return layout.point_labels(config["concurrency"], config["request_rates"])


def round_dirs(config: Mapping[str, Any]) -> list[str]:
    """The part of a point's files' path below the point: "" for one run, else
    `round1/` .. `roundN/` (`repeats`)."""
    return layout.round_dirs(config["repeats"])
