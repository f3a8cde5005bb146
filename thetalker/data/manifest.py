"""search.json, the capacity search's manifest: one writer, one reader, one version.

Every bench job writes one (thetalker.pipeline.serve_and_sweep), even with the search off:
the points it added under `search/{point}/` (no rule can name them before the job runs)
and the capacity it found. The report (points.csv), the end-of-run verdicts and the
provenance script read the points' files from it. A manifest of another version is
refused with one line naming the file: its fields may not mean what this code reads.

The capacity found per loop kind (`capacity.streams`, `capacity.requests_per_s`) says the
load, its verdict and label, the first failing load, the figures that broke there
(`broke_first`), the loads above it that held anyway (`cliff`) and, with
capacity.repeat_boundary, the capacity's load run again (`boundary_repeats`: search points,
each `SearchPoint.to_dict()`). Manifests written before the several-figure service level
have no `broken`/`figures` in their points (read as none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thetalker.data.record_reads import RecordError, read_json
from thetalker.data.record_writes import write_json

__all__ = [
    "SEARCH_MANIFEST_VERSION",
    "ManifestError",
    "SearchPoint",
    "SearchManifest",
    "write_search_manifest",
    "read_search_manifest",
]

SEARCH_MANIFEST_VERSION = 1


class ManifestError(ValueError):
    """A search.json this code cannot read; the message names the file."""


@dataclass(frozen=True)
class SearchPoint:
    """One point the search ran (all its rounds), as the manifest lists it."""

    point: str  # its folder under search/ (thetalker.data.layout)
    concurrency: int | None
    request_rate: float | None
    holds: bool  # met the service level (and did not fail)
    continuity_pct: float | None
    ttfa_s_p90: float | None
    failure: str | None
    records: tuple[str, ...]  # one per round
    summaries: tuple[str, ...]
    provenance: tuple[str, ...]
    # The service level's figures that broke here ("acceptance": the point failed), and
    # each figure's value (thetalker.pipeline.capacity.ServiceLevel.figures, live).
    broken: tuple[str, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("records", "summaries", "provenance", "broken"):
            object.__setattr__(self, name, tuple(str(p) for p in getattr(self, name)))
        object.__setattr__(self, "figures", dict(self.figures))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, its keys in the file's order."""
        return {
            "point": self.point,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "holds": self.holds,
            "broken": list(self.broken),
            "figures": dict(self.figures),
            "continuity_pct": self.continuity_pct,
            "ttfa_s_p90": self.ttfa_s_p90,
            "failure": self.failure,
            "records": list(self.records),
            "summaries": list(self.summaries),
            "provenance": list(self.provenance),
        }


@dataclass(frozen=True)
class SearchManifest:
    """A bench job's search: its points (none when off or nothing to refine), the capacity
    found per loop kind (`streams`, `requests_per_s`), and the search's settings."""

    system: str
    model: str
    refine: bool  # the job had a capacity search
    capacity_search: Mapping[str, Any] | None  # the job's capacity settings
    points: tuple[SearchPoint, ...] = ()
    capacity: Mapping[str, Any] = field(default_factory=dict)
    version: int = SEARCH_MANIFEST_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, in the order the file has always had."""
        return {
            "version": self.version,
            "system": self.system,
            "model": self.model,
            "refine": self.refine,
            "capacity_search": dict(self.capacity_search) if self.capacity_search else None,
            "points": [p.to_dict() for p in self.points],
            "capacity": dict(self.capacity),
        }

    def records(self) -> list[str]:
        return [path for point in self.points for path in point.records]

    def provenance(self) -> list[str]:
        return [path for point in self.points for path in point.provenance]


def write_search_manifest(path: str | Path, manifest: SearchManifest) -> None:
    write_json(path, manifest.to_dict())


def read_search_manifest(path: str | Path) -> SearchManifest:
    """The manifest at `path`; ManifestError (one line naming it) when it is not one of
    this version. OSError when it cannot be read."""
    try:
        data = read_json(path)
    except RecordError as exc:
        raise ManifestError(str(exc)) from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: not a search manifest (a JSON object)")
    version = data.get("version")
    if version != SEARCH_MANIFEST_VERSION:
        raise ManifestError(
            f"{path}: search manifest version {version!r}; this TheTalker reads version "
            f"{SEARCH_MANIFEST_VERSION} (rerun the bench job to rewrite it)"
        )
    try:
        points = tuple(SearchPoint(**p) for p in data.get("points") or [])
        return SearchManifest(
            system=data["system"],
            model=data["model"],
            refine=bool(data["refine"]),
            capacity_search=data.get("capacity_search"),
            points=points,
            capacity=data.get("capacity") or {},
        )
    except (KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: search manifest field missing or unknown: {exc}") from None
