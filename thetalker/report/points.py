"""results/points.csv: one row per load point, every summary figure, from records alone.

Each row is `thetalker.metrics.summarize_point` over one `records.jsonl`, so the tables
rebuild with no server and no summary.json. System, model and concurrency come from the
documented layout `.../runs/{system}/{model}/c{N}/records.jsonl`. Percentile blocks are
flattened to `<figure>_p50`, `<figure>_n`, ...

    python -m thetalker.report.points --out results/points.csv RECORDS.jsonl...
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.metrics import summarize_point
from thetalker.records import RecordError, read_records

__all__ = [
    "POINT_KEYS",
    "PointPathError",
    "point_key",
    "flatten",
    "point_row",
    "points_rows",
    "write_points",
    "main",
]

POINT_KEYS = ("system", "model", "concurrency")
_POINT_DIR = re.compile(r"^c(\d+)$")


class PointPathError(ValueError):
    """A records path outside the runs/{system}/{model}/c{N}/ layout."""


def point_key(records_path: str | Path) -> tuple[str, str, int]:
    """(system, model, concurrency) of `.../{system}/{model}/c{N}/records.jsonl`."""
    path = Path(records_path)
    match = _POINT_DIR.match(path.parent.name)
    if not match or len(path.parts) < 4:
        raise PointPathError(f"{path}: expected .../{{system}}/{{model}}/c{{N}}/records.jsonl")
    return path.parent.parent.parent.name, path.parent.parent.name, int(match.group(1))


def flatten(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Nested percentile blocks become `<key>_<p>` columns."""
    row: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, Mapping):
            for sub, sub_value in value.items():
                row[f"{key}_{sub}"] = sub_value
        else:
            row[key] = value
    return row


def point_row(records_path: str | Path) -> dict[str, Any]:
    system, model, concurrency = point_key(records_path)
    summary = summarize_point(read_records(records_path), concurrency=concurrency)
    return {"system": system, "model": model, **flatten(summary)}


def points_rows(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    return [point_row(path) for path in paths]


def write_points(rows: Sequence[Mapping[str, Any]], out: str | Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.points", description=__doc__)
    parser.add_argument("records", nargs="+", type=Path, help="records.jsonl of each point")
    parser.add_argument("--out", required=True, type=Path, help="points.csv to write")
    args = parser.parse_args(argv)
    try:
        rows = points_rows(args.records)
    except (RecordError, PointPathError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_points(rows, args.out)
    print(f"{args.out}: {len(rows)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
