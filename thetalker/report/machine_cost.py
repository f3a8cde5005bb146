"""points.csv's machine-cost columns: what a second of speech cost the machine, from each
round's provenance.json (the resource sampler's scored window, thetalker.pipeline.sampler)
and the point's figures (thetalker.metrics.usage defines each).

- `cpu_s_per_audio_s`: CPU-seconds of the server's process tree in the scored windows per
  second of audio delivered (the sampler's proc source: no GPU sampled).
- `gpu_idle_w`: the draw with the server loaded and nothing sent, measured before the job's
  first point (stated apart, never hidden in the figures below).
- `gpu_energy_j`: joules over the scored windows, less the idle draw over the same seconds.
- `j_per_audio_s`, `wh_per_million_chars`: that energy per second of audio, and in
  watt-hours per million characters delivered continuously (the characters the price counts).
- `energy_note`: why a GPU point has no energy figure (`[N/A]`, MIG, a shared GPU, no idle
  draw); empty where it has one, or where no GPU was sampled.
- `busy_device`, `busy_pct`: how busy the machine that serves was in the scored windows:
  `gpu`, the mean utilization.gpu; `cpu`, the server tree's CPU-seconds over the seconds
  times the cores it may use (100: every core busy throughout).

A point without provenance.json, or a round without the scored window (written before it
was kept), has none of them: nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from thetalker.data.records import RecordError, read_json
from thetalker.metrics.usage import (
    energy_above_idle_j,
    per_audio_s,
    wh_per_million_chars,
)
from thetalker.report.common import markdown_table, point_summary

__all__ = [
    "MACHINE_COST_COLUMNS",
    "MACHINE_COST_WORDS",
    "machine_cost_columns",
    "machine_cost_cell",
    "machine_cost_values",
    "machine_cost_row",
    "machine_cost_table",
]

MACHINE_COST_COLUMNS = (
    "cpu_s_per_audio_s",
    "gpu_idle_w",
    "gpu_energy_j",
    "j_per_audio_s",
    "wh_per_million_chars",
    "energy_note",
    "busy_device",
    "busy_pct",
)


def _provenance(path: str | Path) -> Mapping[str, Any] | None:
    try:
        found = read_json(Path(path).with_name("provenance.json"))
    except (OSError, RecordError):
        return None
    return found if isinstance(found, Mapping) else None


def machine_cost_columns(
    paths: Sequence[str | Path], audio_s: float | None, chars: float | None
) -> dict[str, Any]:
    """The columns for a point whose rounds' records are `paths`, which delivered `audio_s`
    seconds of audio (ok requests) and `chars` characters continuously, over all rounds."""
    row: dict[str, Any] = dict.fromkeys(MACHINE_COST_COLUMNS)
    provenances = [_provenance(p) for p in paths]
    if any(p is None for p in provenances):
        return row
    resources = [p.get("resources") or {} for p in provenances if p is not None]
    scored = [r.get("scored") for r in resources]
    if any(not isinstance(s, Mapping) for s in scored):
        return row
    windows = [s for s in scored if isinstance(s, Mapping)]
    sources = {r.get("source") for r in resources}
    if sources == {"proc"}:
        cpu = [s.get("cpu_seconds") for s in windows]
        if None not in cpu:
            row["cpu_s_per_audio_s"] = per_audio_s(sum(float(c) for c in cpu), audio_s)
            capacity = sum(float(s.get("seconds") or 0) * (s.get("cpus") or 0) for s in windows)
            if capacity > 0:
                row.update(busy_device="cpu", busy_pct=100.0 * sum(map(float, cpu)) / capacity)
        return row
    if sources != {"nvidia-smi"}:
        return row
    busy = [s.get("mean_utilization_pct") for s in windows]
    if None not in busy:
        row.update(busy_device="gpu", busy_pct=sum(map(float, busy)) / len(busy))
    idle = next((p.get("idle_power") for p in provenances if p and p.get("idle_power")), None)
    notes = [r.get("power_note") for r in resources if r.get("power_note")]
    idle_w = (idle or {}).get("idle_w")
    if not notes and idle_w is None:
        notes.append((idle or {}).get("power_note") or "no idle draw measured")
    row["gpu_idle_w"] = idle_w
    energies = [s.get("energy_j") for s in windows]
    if notes or None in energies:
        row["energy_note"] = notes[0] if notes else "power not read over a scored window"
        return row
    seconds = sum(float(s.get("seconds") or 0.0) for s in windows)
    energy = energy_above_idle_j(sum(float(e) for e in energies), float(idle_w), seconds)
    row["gpu_energy_j"] = energy
    row["j_per_audio_s"] = per_audio_s(energy, audio_s)
    row["wh_per_million_chars"] = wh_per_million_chars(energy, chars)
    return row


def machine_cost_cell(summary: Mapping[str, Any] | None) -> str:
    """One point's machine cost in a table: `12.5 J/audio-s, 3.47 Wh/M chars (idle 80 W
    apart)` with energy, else why not (`energy_note`), else `0.50 CPU-s/audio-s`, else n/a."""
    get = (summary or {}).get
    if get("j_per_audio_s") is not None:
        wh = get("wh_per_million_chars")
        wh_words = "n/a" if wh is None else f"{float(wh):.2f}"
        return (
            f"{float(get('j_per_audio_s')):.2f} J/audio-s, {wh_words} Wh/M chars "
            f"(idle {float(get('gpu_idle_w')):.0f} W apart)"
        )
    if get("energy_note"):
        return f"no energy: {get('energy_note')}"
    if get("cpu_s_per_audio_s") is not None:
        return f"{float(get('cpu_s_per_audio_s')):.2f} CPU-s/audio-s"
    return "n/a"


def machine_cost_values(summary: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """The machine-cost columns of a point for a table's CSV, named `{prefix}{column}`."""
    get = (summary or {}).get
    return {f"{prefix}{column}": get(column) for column in MACHINE_COST_COLUMNS}


MACHINE_COST_WORDS = (
    "Machine cost: GPU energy over the scored window less the idle draw (measured before the "
    "first point, stated apart) per second of audio and in Wh per million characters "
    "delivered continuously; where no GPU was sampled, CPU-seconds of the server's process "
    "tree per second of audio (thetalker.metrics.usage; n/a: not sampled, or an older run)."
)


def machine_cost_row(
    points: pd.DataFrame, model: str, systems: Sequence[str], headline: int
) -> dict[str, Any]:
    """cost.csv's machine-cost columns of one model at the headline concurrency."""
    out: dict[str, Any] = {}
    for system in systems:
        out.update(
            machine_cost_values(point_summary(points, model, system, headline), f"{system}_")
        )
    return out


def machine_cost_table(
    points: pd.DataFrame, models: Sequence[str], systems: Sequence[str], headline: int
) -> str:
    """cost.md's second table: each system's machine cost at the headline concurrency."""
    rows = [
        [model, *(machine_cost_cell(point_summary(points, model, s, headline)) for s in systems)]
        for model in models
    ]
    title = f"{MACHINE_COST_WORDS} At concurrency {headline}.\n\n"
    return title + markdown_table(["model", *systems], rows)
