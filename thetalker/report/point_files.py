"""The per-point quality files a table is made of (health.json, dnsmos.json): where each
lies (its system, model, run and point, from its path), reading one, the tables' order, and
the command line of a table made of them (thetalker.report.health, .naturalness).

    python -m thetalker.report.MODULE --FILE results/*/*/*/c*/FILE.json --table TABLE.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.report.common import write_table

__all__ = [
    "PointFileError",
    "PointSource",
    "point_source",
    "point_order",
    "load_point_file",
    "point_streams",
    "point_table_main",
]

Rows = list[dict[str, Any]]


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


def point_streams(path: Path, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The file's `streams`, one per scored stream; PointFileError where there is no list."""
    streams = data.get("streams")
    if not isinstance(streams, list):
        raise PointFileError(f"{path}: missing field 'streams'")
    return streams


def point_table_main(
    argv: Sequence[str] | None,
    module: str,
    doc: str | None,
    name: str,
    rows: Callable[[Sequence[Path]], Rows],
    table: Callable[[Rows], str],
    errors: tuple[type[Exception], ...] = (),
) -> int:
    """`python -m MODULE --NAME FILE... --table NAME-TABLE.md`: the rows of the per-point
    `NAME.json` files, written as the table and its CSV; a file that cannot be reported
    (PointFileError, OSError or one of `errors`) is one line and exit status 2."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    p.add_argument(f"--{name}", nargs="*", default=[], type=Path, help=f"{name}.json per point")
    p.add_argument("--table", required=True, type=Path, help="the table (its CSV beside it)")
    args = p.parse_args(argv)
    try:
        found = rows(getattr(args, name))
    except (PointFileError, OSError, *errors) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_table(args.table, table(found), found)
    return 0
