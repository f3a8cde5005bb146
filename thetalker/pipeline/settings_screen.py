"""The screen of the settings search (successive halving's first rung): every setting ran
one short point (settings_search.screen); the best `keep` go on to the full capacity
search, and the stock setting always does (every table says how far tuning moved the
answer from the default).

The screen ranks by figures, in a fixed order, that do not depend on `capacity.slo`:
fewer failed or inaudible streams first, then more continuous streams (the headline
player, vllm-omni's 0.1 s max deficit), then lower audible first audio p95. So a change of
the service level never changes which settings were searched, and reruns no bench job.

    python -m thetalker.pipeline.settings_screen --out screen.json --keep 2 \\
        --settings '[{"label": "stock", ...}, ...]' [--load 4 --summaries S1 S2 ...]

`--summaries`: each setting's screen summary.json, in the order of `--settings`.

No `--summaries` (no screen configured): every setting is kept.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["screen_key", "select", "main"]


def _figure(summary: Mapping[str, Any], flat: str, block: str, key: str) -> float | None:
    value = summary.get(flat)
    if value is None and isinstance(summary.get(block), Mapping):
        value = summary[block].get(key)
    return None if value is None else float(value)


def screen_key(summary: Mapping[str, Any] | None) -> tuple[float, float, float]:
    """Sort key of a screened setting (smaller is better); no summary sorts last."""
    if not summary or not summary.get("n_scored"):
        return (math.inf, math.inf, math.inf)
    lost = (summary.get("n_failed") or 0) + (summary.get("n_inaudible") or 0)
    failed_pct = 100.0 * lost / summary["n_scored"]
    continuity = _figure(summary, "continuity_pct", "", "")
    p95 = _figure(summary, "ttfa_audible_s_p95", "ttfa_audible_s", "p95")
    return (
        failed_pct,
        -(continuity if continuity is not None else -math.inf),
        p95 if p95 is not None else math.inf,
    )


def select(
    settings: Sequence[Mapping[str, Any]],
    summaries: Mapping[str, Mapping[str, Any] | None] | None,
    keep: int,
    load: int | None = None,
) -> dict[str, Any]:
    """screen.json: each setting (label, sha256, stock) with its screen figures, rank and
    whether it goes on (`kept`) or was screened out (at which load)."""
    rows = []
    for s in settings:
        summary = (summaries or {}).get(s["label"])
        rows.append({**s, "screen": _screen_figures(summary) if summaries is not None else None})
    if summaries is not None:
        order = sorted(rows, key=lambda r: screen_key((summaries or {}).get(r["label"])))
        for rank, row in enumerate(order, start=1):
            row["rank"] = rank
        best = [r["label"] for r in order if not r.get("stock")][:keep]
        for row in rows:
            row["kept"] = bool(row.get("stock")) or row["label"] in best
    else:
        for row in rows:
            row["rank"], row["kept"] = None, True
    return {
        "screen_concurrency": load,
        "keep": keep,
        "ranked_by": "failed or inaudible %, then continuity % (max_deficit_0.1s), then "
        "audible first audio p95",
        "settings": rows,
    }


def _screen_figures(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not summary:
        return None
    return {
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "n_inaudible": summary.get("n_inaudible"),
        "continuity_pct": summary.get("continuity_pct"),
        "ttfa_audible_s_p95": _figure(summary, "ttfa_audible_s_p95", "ttfa_audible_s", "p95"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.pipeline.settings_screen")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--keep", required=True, type=int)
    parser.add_argument("--settings", required=True, help="JSON list of the settings")
    parser.add_argument("--load", type=int, help="the screen's concurrency")
    parser.add_argument("--summaries", nargs="*", default=None, help="summary.json per setting")
    args = parser.parse_args(argv)
    settings = json.loads(args.settings)
    summaries = None
    if args.summaries is not None and args.load is not None:
        if len(args.summaries) != len(settings):
            parser.error(f"--summaries: {len(args.summaries)} files for {len(settings)} settings")
        summaries = {
            s["label"]: json.loads(Path(path).read_text(encoding="utf-8"))
            for s, path in zip(settings, args.summaries, strict=True)
        }
    result = select(settings, summaries, args.keep, args.load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
