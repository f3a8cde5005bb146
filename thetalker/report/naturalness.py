"""results/tables/naturalness.md (+ .csv): DNSMOS P.835 (SIG, BAK, OVRL) per (system, model,
load) from each point's dnsmos.json (thetalker.quality.dnsmos), and "does load cost
naturalness?": each load's OVRL against the lowest load of the same system, model and run.

Means carry a percentile bootstrap interval over the point's streams
(thetalker.metrics.intervals.bootstrap); a failed request or a stream with no audio is in
the mean at the scale's floor (dnsmos.FAILED_SCORE), and so is one with no audible onset,
each counted by its reason; a score below the floor is kept as it is and counted. The
difference against the lowest load is paired by prompt (`sample_id`: the same sentence at
both loads, a bootstrap of the mean per-sentence difference) where both points share two or
more prompts, each once; otherwise the two points are resampled on their own (`unpaired`).
A point whose dnsmos.json says the model is not installed prints "not installed" in every
cell.

    python -m thetalker.report.naturalness --dnsmos results/*/*/*/c*/dnsmos.json \
        --table results/tables/naturalness.md
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from thetalker.metrics.intervals import Interval, bootstrap
from thetalker.quality.dnsmos import FAILED_SCORE, SCORES
from thetalker.report import point_files
from thetalker.report.common import MISSING, fmt_range, markdown_table

__all__ = ["NOT_INSTALLED", "naturalness_rows", "naturalness_table", "load_difference", "main"]

NOT_INSTALLED = "not installed"


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _difference_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def load_difference(
    point: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]], score: str = "ovrl"
) -> tuple[Interval, str]:
    """Mean `score` of `point` minus that of `base`, with its interval and how it was paired:
    "paired" (per prompt, both points sharing 2 or more prompts, each once) or "unpaired"."""

    def by_id(rows: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
        ids = [str(r["sample_id"]) for r in rows]
        if len(set(ids)) != len(ids):
            return None  # a prompt sent twice: no one-to-one pairing
        return {str(r["sample_id"]): float(r[score]) for r in rows}

    a, b = by_id(point), by_id(base)
    common = sorted(set(a) & set(b)) if a is not None and b is not None else []
    if len(common) >= 2:
        diffs = np.array([a[i] - b[i] for i in common])  # type: ignore[index]
        return bootstrap([diffs], _mean), "paired"
    xa = np.array([float(r[score]) for r in point])
    xb = np.array([float(r[score]) for r in base])
    return bootstrap([xa, xb], _difference_of_means), "unpaired"


def _put(row: dict[str, Any], name: str, iv: Interval) -> None:
    row[name], row[f"{name}_low"], row[f"{name}_high"] = iv.value, iv.low, iv.high


def naturalness_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """One row per point: SIG, BAK, OVRL means with intervals, and OVRL against the lowest
    load of the same (system, model, run); `available` False where DNSMOS was not installed."""
    loaded = []
    for path in paths:
        data = point_files.load_point_file(path)
        source = point_files.point_source(path)
        if data.get("available") is False:
            loaded.append((source, None, str(data.get("reason") or NOT_INSTALLED)))
            continue
        streams = point_files.point_streams(path, data)
        loaded.append((source, streams, ""))
    loaded.sort(key=lambda item: point_files.point_order(item[0]))
    lowest: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    rows = []
    for source, streams, reason in loaded:
        row: dict[str, Any] = {**source, "available": streams is not None, "reason": reason}
        if streams is None:
            rows.append(row)
            continue
        row["streams"] = len(streams)
        row["unscored"] = sum(1 for s in streams if not s.get("scored"))
        row["unscored_reasons"] = _reasons(streams)
        # Shown as it is: a score under the floor stays in the mean, counted here.
        row["below_floor"] = sum(
            1 for s in streams if s.get("scored") and min(float(s[k]) for k in SCORES) < 1.0
        )
        for score in SCORES:
            _put(row, score, bootstrap([[float(s[score]) for s in streams]], _mean))
        # The lowest load of the same kind: streams against streams, a rate against a rate.
        key = (source["system"], source["model"], source["run"], source["point"][:1])
        base = lowest.setdefault(key, streams)
        if base is not streams:
            iv, how = load_difference(streams, base)
            _put(row, "ovrl_vs_lowest", iv)
            row["ovrl_vs_lowest_pairing"] = how
            row["lowest_load"] = next(
                r["point"]
                for r in rows
                if (r["system"], r["model"], r["run"], r["point"][:1]) == key
            )
        rows.append(row)
    return rows


_REASON_ORDER = ("failed", "no audio", "no audible onset")


def _reasons(streams: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Unscored streams by reason (a file from before reasons were written: failed or not)."""
    counts: dict[str, int] = {}
    for s in streams:
        if not s.get("scored"):
            why = s.get("unscored_reason") or ("silent" if s.get("ok") else "failed")
            counts[why] = counts.get(why, 0) + 1
    order = {r: i for i, r in enumerate(_REASON_ORDER)}
    return dict(sorted(counts.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def _streams_cell(row: Mapping[str, Any]) -> str:
    notes = ", ".join(f"{n} {why}" for why, n in (row.get("unscored_reasons") or {}).items())
    if row.get("below_floor"):
        notes += ("; " if notes else "") + f"{row['below_floor']} below {FAILED_SCORE:.1f}"
    return str(row.get("streams", MISSING)) + (f" ({notes})" if notes else "")


def _cell(row: Mapping[str, Any], name: str) -> str:
    if not row["available"]:
        return NOT_INSTALLED
    if row.get(name) is None:
        return MISSING
    return fmt_range(row[name], row[f"{name}_low"], row[f"{name}_high"], 2)


def naturalness_table(rows: Sequence[Mapping[str, Any]]) -> str:
    text = "# Naturalness: DNSMOS P.835 by load\n\n"
    if not rows:
        return text + f"{MISSING}: no point saved its audio.\n"
    header = ["system", "model", "run", "load", "streams", "SIG", "BAK", "OVRL"]
    header.append("OVRL - lowest load")
    body = []
    for r in rows:
        diff = _cell(r, "ovrl_vs_lowest")
        if r.get("ovrl_vs_lowest") is not None:
            diff += f" (vs {r['lowest_load']}, {r['ovrl_vs_lowest_pairing']})"
        elif r["available"]:
            diff = "(lowest load)"
        streams = _streams_cell(r)
        body.append(
            [r["system"], r["model"], r["run"], r["point"], streams]
            + [_cell(r, s) for s in SCORES]
            + [diff]
        )
    text += markdown_table(header, body, label_columns=4)
    reasons = sorted({r["reason"] for r in rows if not r["available"]})
    for reason in reasons:
        text += f"\n{NOT_INSTALLED}: {reason}\n"
    text += (
        "\nMean DNSMOS P.835 (1-5; SIG speech, BAK background, OVRL overall) of the point's "
        "streams with its 95% bootstrap interval; a failed stream or one with no audible onset "
        "counts at 1.0 (the floor), and a score the model puts below the floor is kept as it "
        "is (counted as `below 1.0` beside the streams). "
        "DNSMOS estimates how listeners rate noisy or processed human speech: compare a "
        "server with itself across loads and systems with each other, never as an absolute "
        "MOS. The last column: OVRL minus that of the lowest load of the same system and "
        'run, paired by prompt where both share them (docs/quality.md "Naturalness").\n'
    )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    module, errors = "thetalker.report.naturalness", (KeyError, TypeError, ValueError)
    return point_files.point_table_main(
        argv, module, __doc__, "dnsmos", naturalness_rows, naturalness_table, errors
    )


if __name__ == "__main__":
    raise SystemExit(main())
