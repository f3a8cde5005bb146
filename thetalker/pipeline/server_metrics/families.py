"""A server's `/metrics` text, parsed into the families TheTalker reads, and their deltas.

The parser is `prometheus_client`'s own (`text_string_to_metric_families`). Three prefixes
name the same families: `vllm_omni:` (vllm-omni 0.30.0, `metrics/definitions.py`),
`vllm:omni_` (how parts of vllm-omni's docs spell it) and `thetalker:` (the embedded server,
which exports the same stems with the same meanings). A family is keyed by its stem (the
name without the prefix; a counter without `_total`), so one reader serves all three.

A snapshot is what one scrape saw. Over a point, counters and histogram buckets are taken
as deltas (after minus before: the server's lifetime totals cancel), gauges as a series.
Quantiles of a histogram follow Prometheus's `histogram_quantile` (linear within the
bucket the rank falls in) and come with that bucket's bounds: the resolution the server's
buckets allow, which is all a histogram knows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "PREFIXES",
    "Sample",
    "Snapshot",
    "parse_metrics",
    "counter_deltas",
    "histogram_deltas",
    "merge_histograms",
    "histogram_quantile",
    "Quantile",
]

PREFIXES = ("vllm_omni:", "vllm:omni_", "thetalker:")
_COUNTED = ("counter", "histogram")


@dataclass(frozen=True)
class Sample:
    """One exposed number: its suffix after the stem (`_bucket`, `_sum`, `_count`, `_total`,
    or ""), its labels, and its value."""

    suffix: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class Snapshot:
    """The families one scrape saw, by stem: (type, samples)."""

    prefix: str | None
    families: dict[str, tuple[str, list[Sample]]]

    def of(self, stem: str) -> tuple[str, list[Sample]] | None:
        return self.families.get(stem)


def _stem(name: str) -> tuple[str, str] | None:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return prefix, name[len(prefix) :]
    return None


def parse_metrics(text: str) -> Snapshot:
    """The families of `text` (Prometheus exposition) that carry one of `PREFIXES`.

    Other families (vLLM's own `vllm:*`, process and Python metrics) are left out, and so
    are `_created` timestamps. Raises ValueError on text the parser refuses."""
    families: dict[str, tuple[str, list[Sample]]] = {}
    prefix_seen: str | None = None
    # Only the lines naming our families reach the parser: vLLM's /metrics is mostly other
    # families, and a scrape thread parsing them all would hold the GIL from the client.
    ours = "\n".join(line for line in text.splitlines() if any(p in line for p in PREFIXES))
    for family in text_string_to_metric_families(ours + "\n" if ours else ""):
        found = _stem(family.name)
        if found is None or family.name.endswith("_created"):
            continue
        prefix, stem = found
        prefix_seen = prefix_seen or prefix
        samples: list[Sample] = []
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            suffix = s.name[len(family.name) :]
            labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
            samples.append(Sample(suffix, labels, float(s.value)))
        kind = family.type if family.type in ("counter", "gauge", "histogram") else "untyped"
        old = families.get(stem)
        families[stem] = (kind, (old[1] if old else []) + samples)
    return Snapshot(prefix_seen, families)


def _by_key(samples: Iterable[Sample]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.suffix, s.labels): s.value for s in samples}


def _delta(after: float, before: float | None) -> tuple[float, bool]:
    """after - before; a total that went down means the server restarted: `after` then
    counts from that restart, and the flag says so."""
    if before is None:
        return after, False
    if after < before:
        return after, True
    return after - before, False


def _deltas_of_kind(
    before: Snapshot, after: Snapshot, kind: str
) -> tuple[dict[str, list[tuple[Sample, float]]], list[str]]:
    """Each `kind` family's samples with their increase over the point (by stem), and the
    stems that reset."""
    out: dict[str, list[tuple[Sample, float]]] = {}
    resets: list[str] = []
    for stem, (family_kind, samples) in sorted(after.families.items()):
        if family_kind != kind:
            continue
        old = _by_key((before.of(stem) or ("", []))[1])
        pairs = []
        for s in samples:
            value, reset = _delta(s.value, old.get((s.suffix, s.labels)))
            if reset and stem not in resets:
                resets.append(stem)
            pairs.append((s, value))
        out[stem] = pairs
    return out, resets


def counter_deltas(
    before: Snapshot, after: Snapshot
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Each counter's increase per label set over the point, and the stems that reset."""
    deltas, resets = _deltas_of_kind(before, after, "counter")
    out = {
        stem: [{"labels": dict(s.labels), "value": value} for s, value in pairs]
        for stem, pairs in deltas.items()
    }
    return out, resets


def _le_key(le: str) -> float:
    return math.inf if le in ("+Inf", "Inf", "inf") else float(le)


def histogram_deltas(
    before: Snapshot, after: Snapshot
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Each histogram's observations over the point, per label set (without `le`):
    cumulative bucket counts `[[le, count], ...]` as exposed (`le` a string, "+Inf" last),
    `sum` and `count`; and the stems that reset."""
    deltas, resets = _deltas_of_kind(before, after, "histogram")
    out: dict[str, list[dict[str, Any]]] = {}
    for stem, pairs in deltas.items():
        series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for s, value in pairs:
            labels = tuple(kv for kv in s.labels if kv[0] != "le")
            row = series.setdefault(labels, {"labels": dict(labels), "buckets": []})
            if s.suffix == "_bucket":
                row["buckets"].append([dict(s.labels)["le"], value])
            elif s.suffix in ("_sum", "_count"):
                row[s.suffix[1:]] = value
        for row in series.values():
            row["buckets"].sort(key=lambda b: _le_key(b[0]))
            row.setdefault("sum", 0.0)
            row.setdefault("count", row["buckets"][-1][1] if row["buckets"] else 0.0)
        out[stem] = list(series.values())
    return out, resets


def merge_histograms(
    rows: Sequence[Mapping[str, Any]], where: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The label sets of one histogram added up (those matching `where`): every request
    is observed once, at the stage that emitted its audio, so summing stages and replicas
    counts each once. None when nothing matches."""
    picked = [r for r in rows if all(r["labels"].get(k) == v for k, v in (where or {}).items())]
    if not picked:
        return None
    buckets: dict[str, float] = {}
    for row in picked:
        for le, count in row["buckets"]:
            buckets[le] = buckets.get(le, 0.0) + float(count)
    ordered = sorted(buckets.items(), key=lambda b: _le_key(b[0]))
    return {
        "buckets": [[le, c] for le, c in ordered],
        "sum": sum(float(r.get("sum") or 0.0) for r in picked),
        "count": sum(float(r.get("count") or 0.0) for r in picked),
    }


@dataclass(frozen=True)
class Quantile:
    """A quantile from buckets: the interpolated value and the bucket it lies in."""

    value: float
    lower: float
    upper: float  # math.inf when the rank is past the last finite bound


def histogram_quantile(q: float, buckets: Sequence[Sequence[Any]]) -> Quantile | None:
    """Prometheus's `histogram_quantile`: the rank q x count located in the cumulative
    buckets, interpolated linearly inside its bucket (the first bucket starts at 0). A rank
    in the +Inf bucket gives the last finite bound (the histogram knows no more). None with
    no observations."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    bounds = [(_le_key(str(le)), float(c)) for le, c in buckets]
    if not bounds or bounds[-1][1] <= 0:
        return None
    total = bounds[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, cumulative in bounds:
        if cumulative >= rank and cumulative > below:
            if math.isinf(upper):
                return Quantile(lower, lower, math.inf)
            value = lower + (upper - lower) * (rank - below) / (cumulative - below)
            return Quantile(value, lower, upper)
        lower, below = (upper if not math.isinf(upper) else lower), cumulative
    return Quantile(lower, lower, math.inf)
