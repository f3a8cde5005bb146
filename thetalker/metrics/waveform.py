"""Same audio? Two renderings of one prompt compared by waveform tolerance, not bitwise.

Serves the A/B table's "same audio" column (results/tables/ab.md): for two builds that
should produce the same output (same model, seed, greedy or seeded decoding), each prompt's
rendering by B against A's, and the check that says whether the column applies at all.

The figures and the gate are sglang-omni's
(sgl-project/sglang-omni/benchmarks/metrics/waveform_tolerance.py, its `compare_waveforms`
and `tolerance_failures`, which replaced bitwise equality as its
"audio not degraded" gate between code versions; the thresholds are the defaults of the
code2wav batching benchmark that applies it: `--diff-threshold 1e-2`, `--min-snr-db 40`,
`--max-peak-diff 0.2`, `--max-exceed-fraction 0.01`):

- SNR of the difference: 10 log10(sum a^2 / sum (b - a)^2) in dB, A the reference; inf
  when the two are identical, -inf when A is silent and B is not;
- peak absolute difference: max |b - a|;
- share over: the share of samples with |b - a| > 1e-2, here in percent;
- renderings of different lengths are compared over the shorter (the common prefix, for
  diagnosis) and fail the gate ("waveform lengths differ").

Within tolerance: same length, SNR >= 40 dB, peak <= 0.2, share over <= 1%. For scale
(sglang-omni #1126): bf16 batched decode differs from per-request decode by about 9e-2
peak on about 0.2% of samples, within tolerance.

Samples are float PCM in [-1, 1] (`thetalker.data.saved_audio.read_utterance` reads a
saved request's). Where decoding is not deterministic, two renderings by one build differ
too, and the comparison of two builds says nothing: `decoding_repeatable` over one arm's
own renderings of each prompt in two rounds decides whether the check applies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DIFF_THRESHOLD",
    "MIN_SNR_DB",
    "MAX_PEAK_ABS",
    "MAX_SHARE_OVER_PCT",
    "WaveformDiff",
    "WaveformSummary",
    "waveform_diff",
    "summarize_waveforms",
    "decoding_repeatable",
]

# sglang-omni's gate (module note).
DIFF_THRESHOLD = 1e-2  # a sample "over" differs by more than this
MIN_SNR_DB = 40.0
MAX_PEAK_ABS = 0.2
MAX_SHARE_OVER_PCT = 1.0  # its max_exceed_fraction 0.01, in percent


@dataclass(frozen=True)
class WaveformDiff:
    """B's rendering of one prompt against A's (over the shorter when lengths differ).

    snr_db: SNR of the difference (inf: identical). peak_abs: max |b - a|. share_over_pct:
    percent of samples with |b - a| > DIFF_THRESHOLD. length_a, length_b: samples."""

    snr_db: float
    peak_abs: float
    share_over_pct: float
    length_a: int
    length_b: int

    @property
    def lengths_differ(self) -> bool:
        return self.length_a != self.length_b

    def failures(self) -> list[str]:
        """Why this pair is outside sglang-omni's tolerance; empty: within it."""
        out = []
        if self.lengths_differ:
            out.append(f"lengths differ ({self.length_a} against {self.length_b} samples)")
        if self.snr_db < MIN_SNR_DB:
            out.append(f"SNR {self.snr_db:.2f} dB < {MIN_SNR_DB:g} dB")
        if self.peak_abs > MAX_PEAK_ABS:
            out.append(f"peak difference {self.peak_abs:.3g} > {MAX_PEAK_ABS:g}")
        if self.share_over_pct > MAX_SHARE_OVER_PCT:
            out.append(
                f"{self.share_over_pct:.3g}% of samples over {DIFF_THRESHOLD:g} "
                f"(limit {MAX_SHARE_OVER_PCT:g}%)"
            )
        return out

    @property
    def within_tolerance(self) -> bool:
        return not self.failures()


def _samples(x: Any, name: str) -> np.ndarray:
    data = np.asarray(x, dtype=np.float64).reshape(-1)
    if not np.isfinite(data).all():
        raise ValueError(f"waveform {name} holds a sample that is not a finite number")
    return data


def waveform_diff(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> WaveformDiff:
    """B's rendering against A's (A the reference; module note for the definitions)."""
    xa, xb = _samples(a, "A"), _samples(b, "B")
    n = min(xa.size, xb.size)
    if n == 0:
        return WaveformDiff(math.inf, 0.0, 0.0, int(xa.size), int(xb.size))
    ref, diff = xa[:n], xb[:n] - xa[:n]
    signal, noise = float(np.sum(ref * ref)), float(np.sum(diff * diff))
    if noise == 0.0:
        snr = math.inf
    elif signal == 0.0:
        snr = -math.inf
    else:
        snr = 10.0 * math.log10(signal / noise)
    absolute = np.abs(diff)
    return WaveformDiff(
        snr,
        float(absolute.max()),
        100.0 * float(np.mean(absolute > DIFF_THRESHOLD)),
        int(xa.size),
        int(xb.size),
    )


@dataclass(frozen=True)
class WaveformSummary:
    """A load point's prompts: the worst of each figure, and the gate over all of them.

    n_prompts: prompts compared. worst_snr_db: the lowest SNR (inf: all identical).
    max_peak_abs, max_share_over_pct: the largest. n_lengths_differ: prompts whose
    renderings differ in length. within_tolerance: every prompt within sglang-omni's gate.
    outside: (prompt, why) for each prompt outside it."""

    n_prompts: int
    worst_snr_db: float | None
    max_peak_abs: float | None
    max_share_over_pct: float | None
    n_lengths_differ: int
    within_tolerance: bool
    outside: list[tuple[Any, str]]


def summarize_waveforms(
    diffs: Mapping[Any, WaveformDiff] | Iterable[WaveformDiff],
) -> WaveformSummary:
    """The summary over a point's prompts (`diffs`: by prompt, e.g. sample_id, or a list).
    No prompt: no figures, and not within tolerance (nothing was shown the same)."""
    named = list(diffs.items()) if isinstance(diffs, Mapping) else list(enumerate(diffs))
    if not named:
        return WaveformSummary(0, None, None, None, 0, False, [])
    found = [d for _, d in named]
    outside = [(key, "; ".join(d.failures())) for key, d in named if not d.within_tolerance]
    return WaveformSummary(
        len(found),
        min(d.snr_db for d in found),
        max(d.peak_abs for d in found),
        max(d.share_over_pct for d in found),
        sum(1 for d in found if d.lengths_differ),
        not outside,
        outside,
    )


def decoding_repeatable(
    diffs_of_same_arm: Mapping[Any, WaveformDiff] | Iterable[WaveformDiff],
) -> bool:
    """Whether the same-audio check applies: one arm's own renderings of each prompt in two
    rounds agree within tolerance (its decoding is deterministic enough that a difference
    between builds means something). False with no prompt to judge by; the table then says
    "does not apply: A's own rounds differ"."""
    return summarize_waveforms(diffs_of_same_arm).within_tolerance
