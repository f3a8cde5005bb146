"""The report's settings: one object for every table and figure over points.csv, instead
of a flag each (which models and systems, the headline point, the ratio, the price, the
service level, the grid). The workflow builds it from the filled config (rules/report.smk,
`--settings {params.report:q}`); by hand, `--settings` takes the same JSON or a file of it.

    {"models": [...], "systems": [...], "headline": 32, "ratio": ["a", "b"] or null,
     "gpu_hour_usd": 2.99, "min_continuity_pct": 95, "ttfa_slo_s": null, "grid": [1, 2],
     "slo": {"player_model": "max_deficit_0.1s", "min_continuity_pct": 95, ...}}

`slo` is the capacity's service level (thetalker.pipeline.load_points.service_level_spec:
capacity.slo with report.min_continuity_pct and report.ttfa_slo_s filled in), the JSON
thetalker.pipeline.capacity.ServiceLevel.from_spec reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["ReportSettings", "ReportSettingsError", "add_settings_argument"]


class ReportSettingsError(ValueError):
    """Settings that cannot make the report; the message names the field (or file)."""


@dataclass(frozen=True)
class ReportSettings:
    models: tuple[str, ...]
    systems: tuple[str, ...]
    headline: int  # report.headline_concurrency
    ratio: tuple[str, str] | None  # report.ratio: numerator, denominator; None: no ratio
    gpu_hour_usd: float
    min_continuity_pct: float
    ttfa_slo_s: float | None  # None: no TTFA limit in the service level
    grid: tuple[int, ...]  # the config's concurrency points
    slo: Mapping[str, Any]  # the capacity's service level (service_level_spec)
    # report.note: a line every table of the run opens with (what its numbers can and cannot
    # say, e.g. random weights on a CPU); None: none
    note: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ReportSettings:
        """From the config as rules/common.smk leaves it (the schema's defaults filled)."""
        from thetalker.pipeline.load_points import service_level_spec

        report = config["report"]
        return cls(
            models=tuple(config["models"]),
            systems=tuple(config["systems"]),
            headline=int(report["headline_concurrency"]),
            ratio=_ratio(report.get("ratio"), "config"),
            gpu_hour_usd=float(report["gpu_hour_usd"]),
            min_continuity_pct=float(report["min_continuity_pct"]),
            ttfa_slo_s=report["ttfa_slo_s"],
            grid=tuple(int(c) for c in config["concurrency"]),
            slo=service_level_spec(config),
            note=report.get("note"),
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "settings") -> ReportSettings:
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data and n != "note"]  # note: optional
        unknown = sorted(set(data) - set(names))
        if missing or unknown:
            what = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"
            raise ReportSettingsError(f"{where}: report settings field(s) {what}")
        slo = data["ttfa_slo_s"]
        return cls(
            models=tuple(map(str, data["models"])),
            systems=tuple(map(str, data["systems"])),
            headline=int(data["headline"]),
            ratio=_ratio(data["ratio"], where),
            gpu_hour_usd=float(data["gpu_hour_usd"]),
            min_continuity_pct=float(data["min_continuity_pct"]),
            ttfa_slo_s=None if slo is None else float(slo),
            grid=tuple(int(c) for c in data["grid"]),
            slo=_slo(data["slo"], where),
            note=None if data.get("note") is None else str(data["note"]),
        )

    @classmethod
    def parse(cls, text: str) -> ReportSettings:
        """`text` is the JSON itself (starts with `{`) or the path of a file holding it."""
        where = "settings JSON"
        if not text.lstrip().startswith("{"):
            where = text
            try:
                text = Path(text).read_text(encoding="utf-8")
            except OSError as exc:
                raise ReportSettingsError(f"{where}: cannot read ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ReportSettingsError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ReportSettingsError(f"{where}: report settings are a JSON object")
        return cls.from_mapping(data, where)

    def to_json(self) -> str:
        """Canonical JSON (Snakemake compares params: equal settings, equal strings)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def _ratio(value: Any, where: str) -> tuple[str, str] | None:
    """Two systems, or None: a config that asks for no ratio gets no ratio column."""
    if value is None:
        return None
    if isinstance(value, str) or len(value) != 2:
        raise ReportSettingsError(f"{where}: report settings field ratio: two systems or null")
    return (str(value[0]), str(value[1]))


def _slo(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ReportSettingsError(f"{where}: report settings field slo: a JSON object")
    return dict(value)


class _SettingsAction(argparse.Action):
    """`--settings`: parsed at once, each field set on the namespace (args.models,
    args.headline, ...); bad settings end the program with one line (exit 2)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        try:
            settings = ReportSettings.parse(str(values))
        except ReportSettingsError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, settings)
        for f in fields(settings):
            value = getattr(settings, f.name)
            setattr(namespace, f.name, list(value) if isinstance(value, tuple) else value)


def add_settings_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--settings",
        required=True,
        action=_SettingsAction,
        metavar="JSON|FILE",
        help="the report settings (thetalker.report.settings): models, systems, headline, "
        "ratio, gpu_hour_usd, min_continuity_pct, ttfa_slo_s, grid, slo",
    )
    return parser
