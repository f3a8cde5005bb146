"""What thetalker-compare reads, checked: the runs under a folder (their manifests), each
point's rounds, what a point measured (`point_facts`), its schema version, and what the
listener heard. Any file of the wrong shape, a schema version this package does not know, a
records file with no scored request, or a manifest path that leaves its run is refused in
one line naming the file (`CompareError`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data.record_reads import RecordError, read_json
from thetalker.data.records import SCHEMA_VERSION

__all__ = [
    "CompareError",
    "PointKey",
    "KNOWN_SCHEMAS",
    "find_runs",
    "run_rounds",
    "find_points",
    "point_facts",
    "point_schema",
    "differs",
    "listened",
]

PointKey = tuple[str, str, str, str]
_MANIFEST = "search.json"
_POINT_DIR = re.compile(r"^(?:c\d+|r\d+(?:\.\d+)?)$")
_ROUND_DIR = re.compile(r"^round(\d+)$")
# The record schemas this package reads (docs/records.md): /1 still loads.
KNOWN_SCHEMAS = ("thetalker.data.records/1", SCHEMA_VERSION)


class CompareError(ValueError):
    """A folder that cannot be compared; the message names it."""


def _object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object (a summary, a manifest, a listener's file)."""
    try:
        data = read_json(path)
    except RecordError as exc:
        raise CompareError(str(exc)) from None
    except UnicodeDecodeError:
        raise CompareError(f"{path}: not UTF-8 text") from None
    except RecursionError:  # the standard library's decoder recurses per level
        raise CompareError(f"{path}: not valid JSON (nested too deep)") from None
    if not isinstance(data, dict):
        raise CompareError(f"{path}: not a JSON object ({type(data).__name__})")
    return data


def find_runs(folder: str | Path) -> list[Path]:
    """The runs under a folder (the folder itself may be one): folders holding the bench
    job's manifest `search.json` (written by every job, a quality run's too)."""
    root = Path(folder)
    if not root.is_dir():
        raise CompareError(f"{root}: not a folder")
    return sorted(m.parent for m in root.rglob(_MANIFEST))


def _manifest(run: Path) -> dict[str, Any]:
    path = run / _MANIFEST
    manifest = _object(path)
    points = manifest.get("points")
    if not isinstance(points, list) or not all(
        isinstance(p, dict) and isinstance(p.get("records") or [], list) for p in points
    ):
        raise CompareError(f"{path}: not a search manifest (no `points` list of objects)")
    return manifest


def run_rounds(run: Path) -> dict[str, list[Path]]:
    """point label -> the records file of each round, in round order: the grid points the
    job finished (a `summary.json` beside the records, in `{point}/` or `{point}/round<k>/`)
    and the search points its manifest lists. Nothing else in the folder counts: a stale
    `records.jsonl` beside rounds, or one with no summary, is refused, never pooled."""
    manifest = _manifest(run)
    found: dict[str, list[Path]] = {}
    for point in sorted(p for p in run.iterdir() if p.is_dir() and _POINT_DIR.match(p.name)):
        rounds = sorted(
            (int(m.group(1)), d)
            for d in point.iterdir()
            if (m := _ROUND_DIR.match(d.name)) and d.is_dir()
        )
        if rounds and (point / "records.jsonl").exists():
            raise CompareError(
                f"{point}: both records.jsonl and round folders; which is the run is unclear"
            )
        dirs = [d for _, d in rounds] if rounds else [point]
        if [k for k, _ in rounds] != list(range(1, len(rounds) + 1)):
            raise CompareError(f"{point}: rounds {[k for k, _ in rounds]}, not 1..{len(rounds)}")
        for d in dirs:
            if (d / "records.jsonl").exists() and not (d / "summary.json").exists():
                raise CompareError(f"{d}: records.jsonl without summary.json (a job cut short)")
        if all((d / "records.jsonl").exists() for d in dirs) and dirs:
            found[point.name] = [d / "records.jsonl" for d in dirs]
    for entry in manifest["points"]:
        files = [_under(run, str(r)) for r in entry.get("records") or []]
        if files:
            found[f"search/{entry.get('point')}"] = files
    return found


def _under(run: Path, recorded: str) -> Path:
    """A manifest's records path, taken below the run's own `search/` (the folder may have
    moved since the job wrote it); one that would leave the run (`..`, a link out) is
    refused: compare reads nothing outside the runs it was given."""
    parts = Path(recorded).parts
    if "search" not in parts:
        raise CompareError(f"{run / _MANIFEST}: {recorded} is not under search/")
    tail = parts[len(parts) - 1 - parts[::-1].index("search") :]
    path = run.joinpath(*tail)
    if ".." in tail or not path.resolve().is_relative_to(run.resolve()):
        raise CompareError(f"{run / _MANIFEST}: {recorded} is outside the run ({run})")
    return path


def find_points(folder: str | Path) -> dict[PointKey, list[Path]]:
    """(run, system, model, point) -> its records files (one per round, in round order),
    for every run under the folder. `run` is where the run sits (`runs`, `quality`)."""
    root = Path(folder)
    found: dict[PointKey, list[Path]] = {}
    for run in find_runs(root):
        manifest = _manifest(run)
        where = run.relative_to(root).parts  # e.g. (runs, S, M): the run sits in `runs`
        kind = "/".join(where[:-2]) or "."
        system = str(manifest.get("system") or run.parent.name)
        model = str(manifest.get("model") or run.name)
        for point, files in run_rounds(run).items():
            found[(kind, system, model, point)] = files
    return found


def _summary(path: Path) -> dict[str, Any]:
    """A round's summary.json: an object, `options` an object, a schema version known."""
    summary = _object(path)
    if not isinstance(summary.get("options", {}), dict | None):
        raise CompareError(f"{path}: field options is not an object")
    version = summary.get("schema_version")
    if version not in KNOWN_SCHEMAS:
        known = ", ".join(KNOWN_SCHEMAS)
        raise CompareError(
            f"{path}: field schema_version {version!r} is not one this thetalker reads ({known})"
        )
    return summary


def point_schema(files: Sequence[Path]) -> str:
    """The record schema of a point's rounds (their summaries'); rounds that mix are refused."""
    versions = {_summary(p.with_name("summary.json"))["schema_version"] for p in files}
    if len(versions) > 1:
        raise CompareError(f"{files[0].parent.parent}: its rounds mix schema versions")
    return versions.pop()


def point_facts(files: Sequence[Path], rounds: Sequence[Sequence[Mapping[str, Any]]]) -> dict:
    """What must agree for two points to be compared: the load, the sample rate, the model
    sent, the protocol, and the prompt set (the texts of the scored requests). A round with
    no scored record measured nothing: refused, naming its file."""
    facts: dict[str, Any] = {}
    for path, records in zip(files, rounds, strict=True):
        summary_path = path.with_name("summary.json")
        summary = _summary(summary_path)
        options = summary.get("options") or {}
        scored = [r for r in records if not r["warmup"]]
        if not scored:
            what = "the file is empty" if not records else "only warm-up requests"
            raise CompareError(f"{path}: no scored records ({what}): nothing was measured")
        one = {
            "load": (summary.get("concurrency"), summary.get("request_rate")),
            "sample rate": _records_say(scored, "sample_rate", summary.get("sample_rate"), path),
            "model": options.get("model"),
            "protocol": _records_say(scored, "protocol", options.get("protocol", "http"), path),
            "prompt set": frozenset(r["text"] for r in scored),
        }
        if one["sample rate"] != summary.get("sample_rate"):
            raise CompareError(
                f"{summary_path}: sample_rate {summary.get('sample_rate')}, but its records "
                f"{path.name} were measured at {one['sample rate']} Hz"
            )
        if one["protocol"] != options.get("protocol", "http"):
            raise CompareError(
                f"{summary_path}: protocol {options.get('protocol', 'http')}, but its records "
                f"{path.name} are {one['protocol']}"
            )
        if facts and one != facts:
            raise CompareError(f"{path}: its rounds differ in {differs(facts, one)[0]}")
        facts = one
    return facts


def _records_say(records: Sequence[Mapping[str, Any]], field: str, default: Any, path: Path) -> Any:
    """The one value the scored records hold for `field` (`default` with none scored);
    records that hold several are refused."""
    values = {r.get(field, "http" if field == "protocol" else None) for r in records}
    if len(values) > 1:
        shown = ", ".join(sorted(map(str, values)))
        raise CompareError(f"{path}: its records mix {field} values ({shown})")
    return values.pop() if values else default


def differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two points' facts, one phrase each."""
    out = []
    for name in a:
        if a[name] == b.get(name):
            continue
        if name == "prompt set":
            common = len(a[name] & b[name])
            out.append(f"prompt set ({len(a[name])} vs {len(b[name])} texts, {common} in common)")
        elif name == "load":
            out.append(f"load ({_load(a[name])} vs {_load(b[name])})")
        else:
            out.append(f"{name} ({a[name]} vs {b[name]})")
    return out


def _load(load: tuple[Any, Any]) -> str:
    concurrency, rate = load
    return f"{rate} req/s" if rate is not None else f"{concurrency} streams"


def listened(folder: Path | None) -> tuple[list[dict[str, Any]] | None, list[Any] | None]:
    """(DNSMOS streams, health streams) saved beside a point's records; None where absent
    (or DNSMOS not installed). A file there of the wrong shape is refused."""
    if folder is None:
        return None, None
    out: list[list[Any] | None] = []
    for name in ("dnsmos.json", "health.json"):
        path = folder / name
        data = _object(path) if path.exists() else {}
        streams = data.get("streams") if data.get("available", True) else None
        if streams is not None and not (
            isinstance(streams, list) and all(isinstance(s, dict) for s in streams)
        ):
            raise CompareError(f"{path}: field streams is not a list of objects")
        out.append(streams or None)
    return out[0], out[1]
