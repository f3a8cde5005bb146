"""thetalker-compare's verdict per figure: the A/B's rule (thetalker.metrics.ab_verdicts) on
two independent result folders, so a nightly job that keeps yesterday's results can gate on
today's.

Each figure's change (its interval from thetalker.report.compare) is judged by
`ab_verdicts.judge` with the same `MinEffect`: RTFx B / A as a ratio (higher is better),
TTFA p50 and p90 B - A as times (lower is better; the minimum relative to A's own
percentile), continuity and the clean-stream share B - A as shares (higher is better).
DNSMOS OVRL B - A as a score (higher is better, MinEffect.score points).

Conditions 3 and 4 (every round agrees; the rounds' own interval, at 95% over the five
families judged: `FAMILIES`) need per-round estimates: where both folders ran the same
number of rounds, round k of B is set against round k of A (a verdict needs 3 or more;
RTFx over the round's own window, the round's TTFA percentile, its continuity share);
otherwise, and for the clean share (scored once per point), the verdict rests on the
interval alone and its `why` says so. A side whose scored requests mostly failed is a
failed arm: every figure's verdict is "failed arm (A|B): k of n requests failed"
(`ab_verdicts.failed_arm`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from thetalker import metrics
from thetalker.metrics import REGRESSION, Interval, MinEffect, PairedChange, Verdict

__all__ = ["JUDGED", "point_verdicts", "regressions", "verdict_cell"]

Rounds = Sequence[Sequence[Mapping[str, Any]]]

# (key of compare_point, verdict kind, higher is better)
JUDGED = (
    ("rtfx_ratio", "ratio", True),
    ("ttfa_s_p50_change", "time", False),
    ("ttfa_s_p90_change", "time", False),
    ("continuity_pct_change", "share", True),
    ("clean_pct_change", "share", True),
    ("dnsmos_ovrl_change", "score", True),
)
# The families judged at once (RTFx, TTFA, continuity, clean streams, DNSMOS): the
# between-rounds interval is taken at 95% over them together, as the A/B's is (ab_verdicts,
# condition 4).
FAMILIES = 5


def _ok_ttfa(records: Sequence[Mapping[str, Any]]) -> list[float | None]:
    return [r.get("ttfa_s") for r in records if r.get("ok") and not r.get("warmup")]


def _continuity_pct(records: Sequence[Mapping[str, Any]]) -> float | None:
    (flags, _), _ = metrics.continuity_change_job(records, [])
    return 100.0 * sum(flags) / len(flags) if flags else None


def _minus(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _per_round(key: str, rounds_a: Rounds, rounds_b: Rounds) -> list[float | None]:
    """Round k of B against round k of A, for `key`'s figure; [] without a like number of
    rounds (2+) on both sides, or for a figure measured once per point."""
    if len(rounds_a) != len(rounds_b) or len(rounds_a) < 2:
        return []
    out: list[float | None] = []
    for ra, rb in zip(rounds_a, rounds_b, strict=True):
        if key == "rtfx_ratio":
            xa, xb = metrics.round_rtfx(ra), metrics.round_rtfx(rb)
            out.append(None if not xa or xb is None else xb / xa)
        elif key in ("ttfa_s_p50_change", "ttfa_s_p90_change"):
            q = "p50" if key == "ttfa_s_p50_change" else "p90"
            pa, pb = metrics.percentiles(_ok_ttfa(ra))[q], metrics.percentiles(_ok_ttfa(rb))[q]
            out.append(_minus(pb, pa))
        elif key == "continuity_pct_change":
            out.append(_minus(_continuity_pct(rb), _continuity_pct(ra)))
        else:
            return []
    return out


def _base(key: str, row: Mapping[str, Any], pooled_a: Sequence[Mapping[str, Any]]) -> Any:
    """A's own value of the figure (a time's minimum effect is relative to it)."""
    if key == "ttfa_s_p90_change":
        return metrics.percentiles(_ok_ttfa(pooled_a))["p90"]
    if key == "ttfa_s_p50_change":
        return row.get("ttfa_s_p50_a")
    return None


def point_verdicts(
    row: Mapping[str, Any],
    rounds_a: Rounds,
    rounds_b: Rounds,
    min_effect: MinEffect | None = None,
) -> dict[str, Verdict]:
    """A verdict for each judged figure of one compared point (`row`: compare_point's),
    keyed as the row (module note)."""
    effect = min_effect or MinEffect()
    pooled_a = [r for one in rounds_a for r in one]
    pooled_b = [r for one in rounds_b for r in one]
    failed = metrics.failed_arm(pooled_b, "B") or metrics.failed_arm(pooled_a, "A")
    out: dict[str, Verdict] = {}
    for key, kind, higher in JUDGED:
        ci = row.get(key)
        if not isinstance(ci, Interval):
            continue
        if failed is not None:
            out[key] = failed
            continue
        per_round = _per_round(key, rounds_a, rounds_b)
        change = PairedChange(
            ci.value,
            ci,
            per_round,
            ci.n,
            _base(key, row, pooled_a),
            None,
            "ratio" if kind == "ratio" else "difference",
            len(per_round),
        )
        verdict = metrics.judge(change, kind, higher, effect, FAMILIES)
        if not per_round and verdict.label != metrics.NO_CHANGE:
            why = verdict.why.split("; ")[0]
            verdict = replace(verdict, why=f"{why}; no rounds to set side by side: it rests "
                              "on the interval alone")  # fmt: skip
        out[key] = verdict
    return out


def verdict_cell(verdicts: Mapping[str, Verdict], names: Mapping[str, str]) -> str:
    """The row's verdict column: the failed arm, or each figure named regression or
    improvement (`names`: key to the figure's printed name), or no change the run can
    show."""
    labels = {v.label for v in verdicts.values()}
    failed = [label for label in labels if label.startswith("failed arm")]
    if failed:
        return failed[0]
    parts = [
        f"{label}: " + ", ".join(names[k] for k, v in verdicts.items() if v.label == label)
        for label in (REGRESSION, metrics.IMPROVEMENT)
        if label in labels
    ]
    return "; ".join(parts) or metrics.NO_CHANGE


def regressions(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """`point: figure` for each regression, and each point where B is a failed arm: what
    `thetalker-compare --fail-on-regression` exits 3 on."""
    out = []
    for row in rows:
        point = "/".join(str(row[k]) for k in ("run", "system", "model", "point"))
        for key, verdict in row.get("verdicts", {}).items():
            if verdict.label == REGRESSION:
                out.append(f"{point}: {key} regression ({verdict.why})")
            elif verdict.label.startswith("failed arm (B)"):
                out.append(f"{point}: {verdict.label}")
                break
    return out
