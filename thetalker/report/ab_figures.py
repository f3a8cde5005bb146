"""The figures the A/B judges (docs/ab.md), each defined once: what a record gives, the
statistic over a point's requests, how B is set against A, and which way is better.

- RTFx: audio seconds delivered per second of the round's window, B / A (its own resampling,
  thetalker.metrics.intervals.paired.paired_rtfx_ratio).
- first byte p50 / p95 (`ttfa_s`) and audible first audio p50 / p95 (`ttfa_audible_s`), B - A
  in seconds, over the requests that succeeded.
- first audio per second of audio (`ttfa_s / audio_s`, p50), B / A: duration-free (vllm-omni
  #6929), so a build whose outputs got shorter cannot pose as faster to first audio.
- continuity under each player model (thetalker.metrics.players), B - A in percentage points
  of the scored requests (a failed request plays under none).
- failures: the share of scored requests that failed, B - A in percentage points.
- output length: mean audio seconds per successful request, B / A; no side is better (a
  verdict says longer or shorter).
- DNSMOS OVRL (where the A/B scored its audio, ab.dnsmos: thetalker.quality.dnsmos), mean
  over the utterances the model scored, B - A in points of its 1-5 scale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from thetalker.metrics.intervals.paired import mean_statistic, percentile_statistic
from thetalker.metrics.players import PLAYER_MODELS, has_no_stall, passes_stall_gate
from thetalker.metrics.stream import CONTINUITY_THRESHOLD_S
from thetalker.report.ab_inputs import DNSMOS_KEY

__all__ = ["AbFigure", "AB_FIGURES", "RTFX"]

Value = Callable[[Mapping[str, Any]], float | None]


@dataclass(frozen=True)
class AbFigure:
    name: str
    kind: str  # "ratio" (B / A), "time" (B - A, s), "share" (B - A, pp), "score" (B - A)
    higher_is_better: bool | None  # None: neither side is better (output length)
    value: Value | None  # per record; None for RTFx (a point's window, not a request's)
    statistic: Callable[..., Any] | None  # vectorised: statistic(values, axis=-1)
    # A ratio of times (first audio per audio second): its minimum effect is the times'
    # relative one (ab.min_effect.time_pct), not the rates' 5%.
    time_ratio: bool = False
    # The family it is judged in (thetalker.metrics.ab_verdicts: Bonferroni over families).
    family: str = ""

    @property
    def change(self) -> str:
        return "ratio" if self.kind == "ratio" else "difference"


def _ok(field: str) -> Value:
    def value(record: Mapping[str, Any]) -> float | None:
        x = record.get(field)
        return float(x) if record.get("ok") and x is not None else None

    return value


def _per_audio_second(record: Mapping[str, Any]) -> float | None:
    ttfa, audio = record.get("ttfa_s"), record.get("audio_s") or 0.0
    return float(ttfa) / float(audio) if record.get("ok") and ttfa is not None and audio else None


def _passes(test: Callable[[Mapping[str, Any]], bool]) -> Value:
    return lambda record: 100.0 if record.get("ok") and test(record) else 0.0


def _within_deficit(record: Mapping[str, Any]) -> bool:
    return float(record.get("max_underrun_s") or 0.0) <= CONTINUITY_THRESHOLD_S


def _player(name: str) -> str:
    return f"continuity ({PLAYER_MODELS[name].name})"


_P50, _P95 = percentile_statistic(50), percentile_statistic(95)
_FIRST = "first audio"
RTFX = AbFigure("RTFx", "ratio", True, None, None, family="RTFx")
AB_FIGURES: tuple[AbFigure, ...] = (
    RTFX,
    AbFigure("first byte p50", "time", False, _ok("ttfa_s"), _P50, family=_FIRST),
    AbFigure("first byte p95", "time", False, _ok("ttfa_s"), _P95, family=_FIRST),
    AbFigure("audible first audio p50", "time", False, _ok("ttfa_audible_s"), _P50, family=_FIRST),
    AbFigure("audible first audio p95", "time", False, _ok("ttfa_audible_s"), _P95, family=_FIRST),
    AbFigure(
        "first audio per audio second p50",
        "ratio",
        False,
        _per_audio_second,
        _P50,
        time_ratio=True,
        family=_FIRST,
    ),
    *(
        AbFigure(_player(name), "share", True, _passes(test), mean_statistic, family="continuity")
        for name, test in (
            ("max_deficit_0.1s", _within_deficit),
            ("stall_gate", passes_stall_gate),
            ("no_stall", has_no_stall),
        )
    ),
    AbFigure(
        "failures",
        "share",
        False,
        lambda r: 0.0 if r.get("ok") else 100.0,
        mean_statistic,
        family="failures",
    ),
    AbFigure("output length", "ratio", None, _ok("audio_s"), mean_statistic, family="length"),
    AbFigure("DNSMOS OVRL", "score", True, _ok(DNSMOS_KEY), mean_statistic, family="DNSMOS"),
)
