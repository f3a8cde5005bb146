"""Same audio? The A/B's waveform check at one point (docs/ab.md).

Where two builds should render the same audio (the same model, seed and deterministic
decoding), sglang-omni's waveform tolerance (thetalker.metrics.waveform) between A's and B's
rendering of each prompt, round by round, says whether they do. Whether decoding is
deterministic is measured, not assumed: the check applies only where A's own renderings of
each prompt in two rounds agree within the tolerance (`decoding_repeatable`); otherwise (one
round, sampled decoding, no saved audio) the line says why it does not apply.
"""

from __future__ import annotations

from typing import Any

from thetalker.data.saved_audio import read_utterance
from thetalker.metrics.waveform import decoding_repeatable, summarize_waveforms, waveform_diff
from thetalker.report.ab_inputs import ArmPoint

__all__ = ["same_audio"]


def _rendered(arm: ArmPoint, k: int) -> dict[int, Any]:
    """request_index -> samples of round k's successful scored requests with saved audio."""
    out = {}
    for record in arm.scored(k):
        if record.get("ok") and record.get("audio_path"):
            try:
                out[int(record["request_index"])] = read_utterance(
                    arm.dirs[k] / "audio", int(record["request_index"])
                )[0]
            except (OSError, ValueError):
                continue  # no file to hear: this prompt is left out of the check
    return out


def _diffs(x: dict[int, Any], y: dict[int, Any]) -> dict[int, Any]:
    return {i: waveform_diff(x[i], y[i]) for i in sorted(x.keys() & y.keys())}


def _not_applying(why: str) -> dict[str, Any]:
    return {"applies": False, "within_tolerance": None, "line": f"does not apply: {why}"}


def same_audio(a: ArmPoint, b: ArmPoint) -> dict[str, Any]:
    """{"applies": bool, "within_tolerance": bool | None, "line": one line for the table}."""
    rounds = len(a.dirs)
    a_audio = [_rendered(a, k) for k in range(rounds)]
    b_audio = [_rendered(b, k) for k in range(rounds)]
    if not any(a_audio) or not any(b_audio):
        return _not_applying("no saved audio on one side")
    if rounds < 2:
        return _not_applying("one round, so whether decoding repeats is unknown")
    own = _diffs(a_audio[0], a_audio[1])
    if not decoding_repeatable(own):
        worst = summarize_waveforms(own)
        return _not_applying(
            "A's own renderings of a prompt differ between rounds "
            f"(worst SNR {worst.worst_snr_db:.3g} dB over {worst.n_prompts} prompts): "
            "decoding is not deterministic"
        )
    diffs = {(k, i): d for k in range(rounds) for i, d in _diffs(a_audio[k], b_audio[k]).items()}
    summary = summarize_waveforms(diffs)
    verdict = "within tolerance" if summary.within_tolerance else "OUTSIDE tolerance"
    line = (
        f"{verdict} over {summary.n_prompts} renderings: worst SNR {summary.worst_snr_db:.3g} dB, "
        f"peak difference {summary.max_peak_abs:.3g}, at most {summary.max_share_over_pct:.3g}% "
        f"of samples over 1e-2"
    )
    if summary.n_lengths_differ:
        line += f"; {summary.n_lengths_differ} of different length"
    return {"applies": True, "within_tolerance": summary.within_tolerance, "line": line}
