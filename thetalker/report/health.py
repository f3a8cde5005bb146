"""results/tables/health.md (+ .csv): the share of streams with each audio defect, per
(system, model, load), from the health.json of each point whose audio was saved
(thetalker.quality.health; definitions: docs/quality.md "Audio health").

Each share is a Wilson interval over the point's scored streams, and a failed request
counts against every one of them (a stream with the defect, or failed), as a failed request
counts against continuity; `clean` is the share with no defect that did not fail.

    python -m thetalker.report.health --health results/*/*/*/c*/health.json \
        --table results/tables/health.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.metrics.intervals import Interval, wilson_pct
from thetalker.quality.health import DEFECTS
from thetalker.report.common import MISSING, fmt_range, markdown_table, write_table

__all__ = [
    "PointFileError",
    "PointSource",
    "point_source",
    "point_order",
    "load_point_file",
    "health_rows",
    "health_table",
    "main",
]

DEFECT_TITLES = {
    "clicks": "clicking join",
    "clipping": "clipping",
    "dc_offset": "DC offset",
    "mid_silence": "mid-stream silence",
    "truncated": "cut ending",
    "empty": "empty success",
}


class PointFileError(ValueError):
    """A per-point file that cannot be reported; the message names the file and field."""


class PointSource(dict):
    """Where a per-point file lies: system, model, run ("speed" or "quality"), point."""


def point_source(path: Path) -> PointSource:
    """results/{runs|quality}/{system}/{model}/{point}[/round{k}]/FILE -> its labels."""
    folder = path.parent
    point = folder.name
    if layout.parse_round(folder.name) is not None:  # repeats: each round its own row
        folder = folder.parent
        point = f"{folder.name}/{point}"
    model_dir = folder.parent
    system_dir = model_dir.parent
    run = "quality" if system_dir.parent.name == "quality" else "speed"
    return PointSource(system=system_dir.name, model=model_dir.name, run=run, point=point)


def load_point_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PointFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def point_order(source: Mapping[str, str]) -> tuple[str, str, bool, bool, float, str]:
    """Table order: models, systems, the speed run then the quality run, closed-loop points
    then open-loop ones, load ascending, rounds in order."""
    label, _, round_ = source["point"].partition("/")
    concurrency, rate = layout.parse_point_label(label) or (None, None)
    load = float(concurrency if concurrency is not None else rate or 0)
    open_loop = rate is not None  # closed-loop points (streams) first, then request rates
    return source["model"], source["system"], source["run"] != "speed", open_loop, load, round_


def _put(row: dict[str, Any], name: str, k: int, n: int) -> None:
    """`{name}_pct` with `_low` and `_high`: k of n in percent, its Wilson interval."""
    iv: Interval = wilson_pct(k, n)
    row[f"{name}_pct"], row[f"{name}_pct_low"], row[f"{name}_pct_high"] = iv.value, iv.low, iv.high


def health_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """One row per point: each defect's share (failed counted in) and `clean`, with Wilson
    intervals, plus the pooled clicking joins over joins."""
    rows = []
    for path in paths:
        data = load_point_file(path)
        streams = data.get("streams")
        if not isinstance(streams, list):
            raise PointFileError(f"{path}: missing field 'streams'")
        n = len(streams)
        failed = sum(1 for s in streams if not s.get("ok"))
        row: dict[str, Any] = {**point_source(path), "streams": n, "failed": failed}

        _put(row, "failed", failed, n)
        _put(row, "clean", sum(1 for s in streams if s.get("ok") and not s.get("defects")), n)
        for defect in DEFECTS:
            k = failed + sum(1 for s in streams if defect in (s.get("defects") or []))
            _put(row, defect, k, n)
        row["joins"] = sum(int(s.get("joins") or 0) for s in streams)
        row["clicking_joins"] = sum(int(s.get("clicking_joins") or 0) for s in streams)
        rows.append(row)
    return sorted(rows, key=point_order)


def _cell(row: Mapping[str, Any], name: str) -> str:
    return fmt_range(row[f"{name}_pct"], row[f"{name}_pct_low"], row[f"{name}_pct_high"], 0)


def health_table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ["system", "model", "run", "load", "streams", "clean %"]
    header += [f"{DEFECT_TITLES[d]} %" for d in DEFECTS] + ["failed %", "clicking joins"]
    body = []
    for r in rows:
        body.append(
            [r["system"], r["model"], r["run"], r["point"], str(r["streams"]), _cell(r, "clean")]
            + [_cell(r, d) for d in DEFECTS]
            + [_cell(r, "failed"), f"{r['clicking_joins']} of {r['joins']}"]
        )
    text = "# Audio health: the share of streams with each defect\n\n"
    if not body:
        return text + f"{MISSING}: no point saved its audio.\n"
    text += markdown_table(header, body, label_columns=4)
    text += (
        "\nEach share is streams with the defect **or failed** over the point's scored streams "
        "(a failed request counts against every column), with its 95% Wilson interval; "
        "`clean` is the share that succeeded with no defect. Definitions and thresholds: "
        'docs/quality.md "Audio health" (each point\'s health.json states them). '
        "Runs: `speed`, a point of the grid with saved audio; `quality`, the quality run.\n"
    )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m thetalker.report.health", description=__doc__)
    p.add_argument("--health", nargs="*", default=[], type=Path, help="health.json per point")
    p.add_argument("--table", required=True, type=Path, help="health.md (the CSV beside it)")
    args = p.parse_args(argv)
    try:
        rows = health_rows(args.health)
    except (PointFileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_table(args.table, health_table(rows), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
