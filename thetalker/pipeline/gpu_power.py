"""GPU power for the resource sampler (thetalker.pipeline.sampler): nvidia-smi's
``power.draw,mig.mode.current`` answer read, a run's time-weighted mean draw, and the idle
draw's parts. No energy figure is made up: a ``[N/A]`` draw or an
MIG slice (its draw is the whole GPU's) gives a reason instead of watts."""

from __future__ import annotations

from thetalker.metrics.usage import trapezoid_j

__all__ = ["parse_power_csv", "mean_power_w"]


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
