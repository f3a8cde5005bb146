"""results/tables/provenance.md: where each load point's numbers came from.

One row per point, read from its ``provenance.json`` (written by ``thetalker.pipeline.provenance``):
system, model, concurrency, workflow commit, deploy file sha256, server version, GPU (or
CPU), the UTC date and time the point started, and the share of the machine's CPU that
other processes took meanwhile (`(busy)` at or above `BUSY_OTHER_CPU_PCT`). Rows follow
the order of the paths given (the workflow passes them in config order). System, model and
concurrency come from the file, or from its path ``.../{system}/{model}/c{N}/provenance.json``
when the file lacks them.

    python -m thetalker.report.provenance_table --out results/tables/provenance.md \
        results/runs/*/*/c*/provenance.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.data.records import RecordError, read_json
from thetalker.pipeline.machine_load import BUSY_OTHER_CPU_PCT, busy_mark
from thetalker.pipeline.provenance import PROVENANCE_SCHEMA
from thetalker.report.markdown import md_cell

__all__ = ["HEADER", "MISSING", "ProvenanceError", "provenance_row", "provenance_table", "main"]

HEADER = ("system", "model", "concurrency", "commit", "deploy sha256", "server version")
HEADER += ("GPU", "date (UTC)", "others' CPU")
MISSING = "n/a"
_SHORT_SHA = 12


class ProvenanceError(ValueError):
    """A provenance.json that cannot make a row; the message names the file."""


def _cell(value: Any) -> str:
    """One cell of a value the server or the config gave: `md_cell`'s text, or n/a."""
    if value is None or value == "":
        return MISSING
    return md_cell(value)


def _from_path(path: Path) -> dict[str, Any]:
    """system, model and concurrency out of a point's path (thetalker.data.layout)."""
    try:
        where = layout.point_location(path)
    except layout.PointPathError:
        return {}
    return {"system": where.system, "model": where.model, "concurrency": where.concurrency}


def _hardware(hardware: Mapping[str, Any] | None) -> str | None:
    if not hardware:
        return None
    gpus = hardware.get("gpus")
    if gpus:
        names = [g.get("name") or "GPU" for g in gpus]
        counted = {n: names.count(n) for n in dict.fromkeys(names)}
        return ", ".join(n if k == 1 else f"{k}x {n}" for n, k in counted.items())
    cpu = hardware.get("cpu_model")
    return f"none (CPU: {cpu})" if cpu else None


def _others_cpu(pct: Any) -> str | None:
    """The share of the machine's CPU other processes took during the point, `(busy)` at or
    above thetalker.pipeline.machine_load.BUSY_OTHER_CPU_PCT."""
    if not isinstance(pct, int | float) or isinstance(pct, bool):
        return None
    return f"{pct:.1f}%" + (" (busy)" if busy_mark(pct) else "")


def _date(started_at: str | None) -> str | None:
    """``2025-01-02T03:04:05.000+00:00`` -> ``2025-01-02 03:04``."""
    if not started_at:
        return None
    return started_at[:16].replace("T", " ")


def provenance_row(data: Mapping[str, Any], path: Path | None = None) -> list[str]:
    """One table row from a provenance document (``path`` fills system/model/concurrency)."""
    fallback = _from_path(path) if path is not None else {}
    workflow = data.get("workflow") or {}
    commit = workflow.get("commit")
    if commit:
        commit = commit[:_SHORT_SHA] + ("-dirty" if workflow.get("dirty") else "")
    deploy = data.get("deploy") or {}
    sha = deploy.get("sha256")
    server = data.get("server") or {}
    values = [
        data.get("system") or fallback.get("system"),
        data.get("model") or fallback.get("model"),
        data.get("concurrency") or fallback.get("concurrency"),
        commit,
        sha[:_SHORT_SHA] if sha else ("none" if not deploy else None),
        server.get("server_version"),
        _hardware(data.get("hardware")),
        _date(data.get("started_at")),
        _others_cpu((data.get("resources") or {}).get("other_cpu_pct")),
    ]
    return [_cell(v) for v in values]


def _load(path: Path) -> dict[str, Any]:
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise ProvenanceError(f"{path}: no such file") from None
    except RecordError as exc:
        raise ProvenanceError(str(exc)) from None
    if not isinstance(data, dict):
        raise ProvenanceError(f"{path}: a provenance file must hold a JSON object")
    if data.get("schema_version") != PROVENANCE_SCHEMA:
        raise ProvenanceError(
            f"{path}: field schema_version is {data.get('schema_version')!r}, "
            f"expected {PROVENANCE_SCHEMA!r}"
        )
    return data


def provenance_table(paths: Sequence[str | Path]) -> str:
    """The Markdown table over the given provenance.json files, in their order."""
    rows = [provenance_row(_load(Path(p)), Path(p)) for p in paths]
    lines = ["| " + " | ".join(HEADER) + " |"]
    lines.append("|" + "|".join(" --- " for _ in HEADER) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    intro = (
        "Where each load point's numbers came from: the workflow commit, the deploy file, "
        "the server and the hardware it ran on, and how much of the machine's CPU other "
        "processes than the server and the client took during the point (busy: at least "
        f"{BUSY_OTHER_CPU_PCT:g}%; full record: each point's provenance.json).\n\n"
    )
    return intro + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m thetalker.report.provenance_table", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="Markdown file to write")
    parser.add_argument("paths", nargs="+", type=Path, help="provenance.json files, in order")
    args = parser.parse_args(argv)
    try:
        table = provenance_table(args.paths)
    except ProvenanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(table, encoding="utf-8")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
