"""GPU power for the resource sampler (thetalker.pipeline.sampler): nvidia-smi's
``power.draw,mig.mode.current`` answer read, a run's time-weighted mean draw, and the idle
draw measured before a job's first point. No energy figure is made up: a ``[N/A]`` draw or an
MIG slice (its draw is the whole GPU's) gives a reason instead of watts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from thetalker.metrics.usage import trapezoid_j

if TYPE_CHECKING:
    from thetalker.pipeline.sampler import ResourceSampler

__all__ = ["IDLE_POWER_S", "parse_power_csv", "mean_power_w", "measure_idle_power"]

IDLE_POWER_S = 5.0  # the idle draw's measurement before a job's first point (GPU only)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_power_csv(text: str) -> tuple[float | None, str | None]:
    """Lines of ``power.draw,mig.mode.current`` (one per GPU) -> (watts summed over the GPUs,
    None) or (None, why not): a ``[N/A]`` draw, MIG enabled, or no GPU listed."""
    total = 0.0
    rows = [line.split(",") for line in text.splitlines() if line.strip()]
    if not rows:
        return None, "nvidia-smi listed no power.draw"
    for cells in rows:
        if len(cells) > 1 and cells[1].strip() == "Enabled":
            return None, "MIG slice: power.draw is the whole GPU's, shared by every slice"
        watts = _number(cells[0])
        if watts is None:
            return None, f"power.draw {cells[0].strip()} (not reported by this GPU)"
        total += watts
    return total, None


def mean_power_w(samples: list[tuple[float, float]]) -> float | None:
    """Time-weighted mean of (monotonic s, W) samples; None under two samples."""
    energy = trapezoid_j([t for t, _ in samples], [w for _, w in samples])
    span = samples[-1][0] - samples[0][0] if samples else 0.0
    return round(energy / span, 2) if energy is not None and span > 0 else None


def measure_idle_power(sampler: ResourceSampler, seconds: float) -> dict[str, Any]:
    """Run `sampler` for `seconds` while the caller sends nothing: the idle draw in W
    (`idle_w`; None with `power_note` where power cannot be read, at once: no wait)."""
    sampler.start()  # its first sample says whether power can be read at all
    note = sampler.result()["power_note"]
    if sampler.source != "nvidia-smi" or note is not None:
        sampler.stop()
        return {"seconds": None, "idle_w": None, "power_note": note}
    sampler.mark("begin")
    time.sleep(seconds)
    sampler.mark("end")
    sampler.stop()
    result = sampler.result()
    scored = result["scored"] or {}
    energy, span = scored.get("energy_j"), scored.get("seconds")
    return {
        "seconds": span,
        "idle_w": round(energy / span, 6) if energy is not None and span else None,
        "power_note": result["power_note"],
    }
