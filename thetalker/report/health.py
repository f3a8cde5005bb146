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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.metrics.intervals import Interval, wilson_pct
from thetalker.quality.health import DEFECTS
from thetalker.report import point_files
from thetalker.report.common import MISSING, fmt_range, markdown_table

__all__ = ["health_rows", "health_table", "main"]

DEFECT_TITLES = {
    "clicks": "clicking join",
    "clipping": "clipping",
    "dc_offset": "DC offset",
    "mid_silence": "mid-stream silence",
    "truncated": "cut ending",
    "empty": "empty success",
}


def _put(row: dict[str, Any], name: str, k: int, n: int) -> None:
    """`{name}_pct` with `_low` and `_high`: k of n in percent, its Wilson interval."""
    iv: Interval = wilson_pct(k, n)
    row[f"{name}_pct"], row[f"{name}_pct_low"], row[f"{name}_pct_high"] = iv.value, iv.low, iv.high


def health_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """One row per point: each defect's share (failed counted in) and `clean`, with Wilson
    intervals, plus the pooled clicking joins over joins."""
    rows = []
    for path in paths:
        data = point_files.load_point_file(path)
        streams = point_files.point_streams(path, data)
        n = len(streams)
        failed = sum(1 for s in streams if not s.get("ok"))
        row: dict[str, Any] = {**point_files.point_source(path), "streams": n, "failed": failed}

        _put(row, "failed", failed, n)
        _put(row, "clean", sum(1 for s in streams if s.get("ok") and not s.get("defects")), n)
        for defect in DEFECTS:
            k = failed + sum(1 for s in streams if defect in (s.get("defects") or []))
            _put(row, defect, k, n)
        row["joins"] = sum(int(s.get("joins") or 0) for s in streams)
        row["clicking_joins"] = sum(int(s.get("clicking_joins") or 0) for s in streams)
        rows.append(row)
    return sorted(rows, key=point_files.point_order)


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
    return point_files.point_table_main(
        argv, "thetalker.report.health", __doc__, "health", health_rows, health_table
    )


if __name__ == "__main__":
    raise SystemExit(main())
