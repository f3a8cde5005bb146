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
from dataclasses import dataclass, field
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
    """The families one scrape saw, by stem: (type, samples). `void`: the families left
    out, each with the reason (a page taken on trust would count wrong in silence)."""

    prefix: str | None
    families: dict[str, tuple[str, list[Sample]]]
    void: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def of(self, stem: str) -> tuple[str, list[Sample]] | None:
        return self.families.get(stem)


def _stem(name: str) -> tuple[str, str] | None:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return prefix, name[len(prefix) :]
    return None


def _family_problem(kind: str, samples: Sequence[Sample]) -> str | None:
    """Why a family cannot be read as exported (None: it can): a series twice, a counted
    value that is no finite number, histogram buckets that are not cumulative."""
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in samples:
        key = (s.suffix, s.labels)
        if key in seen:
            shown = ",".join(f"{k}={v!r}" for k, v in s.labels)
            return f"the series {s.suffix or '(value)'}{{{shown}}} appears twice"
        seen.add(key)
        if kind in _COUNTED and not math.isfinite(s.value):
            return f"a {kind} value {s.value} is no finite number"
    if kind == "histogram":
        series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for s in samples:
            if s.suffix == "_bucket":
                le = dict(s.labels).get("le")
                try:
                    bound = _le_key(str(le))
                except ValueError:
                    return f"a bucket bound le={le!r} is no number"
                rest = tuple(kv for kv in s.labels if kv[0] != "le")
                series.setdefault(rest, []).append((bound, s.value))
        for buckets in series.values():
            counts = [c for _, c in sorted(buckets)]
            if any(b < a for a, b in zip(counts, counts[1:], strict=False)):
                return "its buckets are not cumulative (a count falls as le grows)"
    return None


def parse_metrics(text: str) -> Snapshot:
    """The families of `text` (Prometheus exposition) that carry one of `PREFIXES`.

    Other families (vLLM's own `vllm:*`, process and Python metrics) are left out, and so
    are `_created` timestamps. What a server exports is never trusted to add up: one prefix
    is read (the first of `PREFIXES` the page has; the same stem under two would count
    twice), and a family with a series twice, a non-finite counted value or non-cumulative
    buckets is left out (`void`, with the reason); a gauge's non-finite sample is dropped
    with a note. Raises ValueError on text the parser refuses."""
    found_families: dict[str, dict[str, list[tuple[str, list[Sample]]]]] = {}
    # Only the lines naming our families reach the parser: vLLM's /metrics is mostly other
    # families, and a scrape thread parsing them all would hold the GIL from the client.
    ours = "\n".join(line for line in text.splitlines() if any(p in line for p in PREFIXES))
    for family in text_string_to_metric_families(ours + "\n" if ours else ""):
        found = _stem(family.name)
        if found is None or family.name.endswith("_created"):
            continue
        prefix, stem = found
        samples: list[Sample] = []
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            suffix = s.name[len(family.name) :]
            labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
            samples.append(Sample(suffix, labels, float(s.value)))
        kind = family.type if family.type in ("counter", "gauge", "histogram") else "untyped"
        found_families.setdefault(prefix, {}).setdefault(stem, []).append((kind, samples))
    present = [p for p in PREFIXES if p in found_families]
    if not present:
        return Snapshot(None, {})
    prefix = present[0]
    notes = [
        f"families under {other!r} left out: the page also has {prefix!r} (one prefix is read, "
        "so no family counts twice)"
        for other in present[1:]
    ]
    families: dict[str, tuple[str, list[Sample]]] = {}
    void: dict[str, str] = {}
    for stem, parts in found_families[prefix].items():
        kinds = {kind for kind, _ in parts}
        if len(kinds) > 1:
            void[stem] = f"exported as {' and '.join(sorted(kinds))}"
            continue
        kind = kinds.pop()
        samples = [s for _, part in parts for s in part]
        problem = _family_problem(kind, samples)
        if problem is not None:
            void[stem] = problem
            continue
        if kind not in _COUNTED:
            finite = [s for s in samples if math.isfinite(s.value)]
            if len(finite) < len(samples):
                notes.append(f"{stem}: {len(samples) - len(finite)} non-finite sample(s) dropped")
            samples = finite
        families[stem] = (kind, samples)
    return Snapshot(prefix, families, void, notes)


def _by_key(samples: Iterable[Sample]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.suffix, s.labels): s.value for s in samples}


def _deltas_of_kind(
    before: Snapshot, after: Snapshot, kind: str
) -> tuple[dict[str, list[tuple[Sample, float]]], list[str]]:
    """Each `kind` family's samples with their increase over the point (by stem), and the
    stems that reset. A reset anywhere in a family (a total that went down, or a series
    that was there before and is gone after: the server restarted) voids that family's
    deltas for the point: what is left of it would count part of the point as all of it.
    A family left out of either scrape (`Snapshot.void`) has no deltas either."""
    out: dict[str, list[tuple[Sample, float]]] = {}
    resets: list[str] = []
    for stem, (family_kind, samples) in sorted(after.families.items()):
        if family_kind != kind or stem in before.void:
            continue
        old = _by_key((before.of(stem) or ("", []))[1])
        new = _by_key(samples)
        went_down = any(value < old.get(key, 0.0) for key, value in new.items())
        if went_down or any(key not in new for key in old):
            resets.append(stem)
            continue
        out[stem] = [(s, s.value - old.get((s.suffix, s.labels), 0.0)) for s in samples]
    for stem, (family_kind, samples) in sorted(before.families.items()):
        gone = stem not in after.families and stem not in after.void
        if family_kind == kind and samples and gone:
            resets.append(stem)  # exported before the point, not after: a restart
    return out, sorted(resets)


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
