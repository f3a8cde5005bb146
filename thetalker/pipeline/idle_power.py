"""The GPU's idle draw, measured before a job's first point with the server loaded and nothing
sent: energy figures are stated above it, and it is shown apart (never hidden in them)."""

from __future__ import annotations

import time
from typing import Any

from thetalker.pipeline.sampler import ResourceSampler

__all__ = ["IDLE_POWER_S", "measure_idle_power"]

IDLE_POWER_S = 5.0  # the idle draw's measurement before a job's first point (GPU only)


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
