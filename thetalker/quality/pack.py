"""The listening pack of a point: its worst streams by each figure, to hear before trusting
a number.

For one point whose audio was saved, the streams that did worst on each figure (the slowest
audible first audio, the largest stall, the highest sentence WER, the lowest DNSMOS OVRL, the
most clicking joins, the longest mid-stream silence, and any clipping, DC offset, cut ending
or empty success), `per_figure` of each, each with the value that made it the worst:

- `OUT_DIR/` the picked WAVs (copied, named `{figure}_{rank}_{original name}`) and pack.json
  (the picks: figure, value, request_index, sample_id, text, file);
- `OUT_HTML`, one self-contained page (each WAV embedded as a data URI) with an audio player
  per pick and why it was picked, which plays in a browser on its own and inside the
  Snakemake report (an HTML result is shown in an iframe; a WAV result would only download).

A figure no stream is bad on (no stall, no clicking join) has no pick, and says so. Inputs:
the point's records.jsonl, health.json and dnsmos.json (thetalker.quality.health, .dnsmos)
and, where the point was transcribed, its transcripts.jsonl.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thetalker.data.records import RecordError, read_records, write_json

__all__ = ["Pick", "FIGURES", "pick_worst", "write_pack", "main"]

PER_FIGURE = 2


@dataclass(frozen=True)
class Pick:
    """One stream of the pack and why: `figure` (a FIGURES title), `value` in words."""

    figure: str
    value: str
    request_index: int
    sample_id: str
    text: str
    audio_path: str
    file: str = ""


Row = Mapping[str, Any]
# (title, key of the merged per-stream row, larger is worse, how the value is printed,
#  the least value that is a problem at all: a stream below it is never "the worst").
FIGURES: list[tuple[str, str, bool, Callable[[float], str], float]] = [
    ("slowest audible first audio", "ttfa_audible_s", True, lambda v: f"{v:.3f} s", 0.0),
    ("largest stall", "stall_s", True, lambda v: f"{v:.3f} s of stalls", 1e-9),
    ("highest WER", "wer_pct", True, lambda v: f"sentence WER {v:.0f} %", 1e-9),
    ("lowest DNSMOS OVRL", "ovrl", False, lambda v: f"OVRL {v:.2f}", 0.0),
    ("most clicking joins", "clicking_joins", True, lambda v: f"{v:.0f} clicking joins", 1),
    ("longest mid-stream silence", "longest_mid_silence_s", True, lambda v: f"{v:.2f} s", 0.0),
    ("clipping", "clip_runs", True, lambda v: f"{v:.0f} clipped runs", 1),
    ("DC offset", "abs_dc_offset", True, lambda v: f"|mean| {v:.4f} of full scale", 0.01),
    ("cut ending", "end_dbfs", True, lambda v: f"last frame at {v:.1f} dBFS", -30.0),
    ("empty success", "empty", True, lambda v: "succeeded with no audible audio", 1),
]


def _by_index(rows: Sequence[Row] | None) -> dict[int, Row]:
    return {int(r["request_index"]): r for r in rows or [] if r.get("request_index") is not None}


def merged_rows(
    records: Sequence[Row],
    health: Sequence[Row] | None,
    dnsmos: Sequence[Row] | None,
    transcripts: Sequence[Row] | None,
) -> list[dict[str, Any]]:
    """One row per scored, successful stream with saved audio: every figure of the pack."""
    h, d, t = _by_index(health), _by_index(dnsmos), _by_index(transcripts)
    out = []
    for rec in records:
        if rec.get("warmup") or not rec.get("ok") or not rec.get("audio_path"):
            continue
        i = int(rec["request_index"])
        row: dict[str, Any] = {
            "request_index": i,
            "sample_id": str(rec["sample_id"]),
            "text": str(rec.get("text") or ""),
            "audio_path": str(rec["audio_path"]),
            "ttfa_audible_s": rec.get("ttfa_audible_s"),
            "stall_s": rec.get("stall_s"),
        }
        if i in h:
            hr = h[i]
            row["clicking_joins"] = hr.get("clicking_joins")
            row["longest_mid_silence_s"] = hr.get("longest_mid_silence_s")
            row["clip_runs"] = hr.get("clip_runs")
            dc = hr.get("dc_offset")
            row["abs_dc_offset"] = None if dc is None else abs(float(dc))
            row["end_dbfs"] = hr.get("end_dbfs")
            row["empty"] = 1 if "empty" in (hr.get("defects") or []) else 0
        if i in d and d[i].get("scored"):
            row["ovrl"] = d[i].get("ovrl")
        if i in t and int(t[i].get("reference_words") or 0) > 0:
            tr = t[i]
            edits = sum(int(tr[k]) for k in ("substitutions", "deletions", "insertions"))
            row["wer_pct"] = 100.0 * edits / int(tr["reference_words"])
        out.append(row)
    return out


def pick_worst(rows: Sequence[Row], per_figure: int = PER_FIGURE) -> tuple[list[Pick], list[str]]:
    """The worst `per_figure` streams by each figure (ties: the earlier request first), and
    the titles of the figures with nothing to pick (not measured, or no stream bad on it)."""
    picks, none = [], []
    for title, key, larger_worse, show, least in FIGURES:
        measured = [r for r in rows if r.get(key) is not None]
        bad = [r for r in measured if not larger_worse or float(r[key]) >= least]
        if title == "longest mid-stream silence":
            bad = [r for r in bad if float(r[key]) > 0]
        bad.sort(
            key=lambda r: (-float(r[key]) if larger_worse else float(r[key]), r["request_index"])
        )
        if not bad:
            none.append(title + (" (not measured)" if not measured else ""))
            continue
        for r in bad[:per_figure]:
            picks.append(
                Pick(
                    title,
                    show(float(r[key])),
                    r["request_index"],
                    r["sample_id"],
                    r["text"],
                    r["audio_path"],
                )
            )
    return picks, none


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_")


def write_pack(
    picks: Sequence[Pick],
    none: Sequence[str],
    base: Path,
    out_dir: Path,
    out_html: Path,
    label: str,
) -> list[Pick]:
    """Copy each pick's WAV into `out_dir` (with pack.json) and write the page `out_html`."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    written = []
    rank: dict[str, int] = {}
    for p in picks:
        rank[p.figure] = rank.get(p.figure, 0) + 1
        src = Path(p.audio_path) if Path(p.audio_path).is_absolute() else base / p.audio_path
        name = f"{_slug(p.figure)}_{rank[p.figure]}_{Path(p.audio_path).name}"
        shutil.copyfile(src, out_dir / name)
        written.append(Pick(**{**asdict(p), "file": name}))
    write_json(
        out_dir / "pack.json",
        {"point": label, "picks": [asdict(p) for p in written], "none": list(none)},
    )
    out_html.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_html.with_name(out_html.name + ".tmp")
    tmp.write_text(_page(written, none, out_dir, label), encoding="utf-8")
    os.replace(tmp, out_html)
    return written


def _page(picks: Sequence[Pick], none: Sequence[str], out_dir: Path, label: str) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Listening pack: {esc(label)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}"
        "td,th{padding:.3em .6em;text-align:left;vertical-align:top}</style>",
        "</head><body>",
        f"<h1>Listening pack: {esc(label)}</h1>",
        "<p>The worst streams of this point by each figure, with what made each the worst "
        "(thetalker.quality.pack; definitions in docs/quality.md).</p>",
        "<table><tr><th>worst by</th><th>value</th><th>request</th><th>text</th>"
        "<th>listen</th></tr>",
    ]
    for p in picks:
        data = base64.b64encode((out_dir / p.file).read_bytes()).decode("ascii")
        parts.append(
            f"<tr><td>{esc(p.figure)}</td><td>{esc(p.value)}</td>"
            f"<td>{p.request_index} ({esc(p.sample_id)})</td><td>{esc(p.text)}</td>"
            f'<td><audio controls preload="metadata" title="{esc(p.file)}" '
            f'src="data:audio/wav;base64,{data}"></audio></td></tr>'
        )
    parts.append("</table>")
    if none:
        parts.append("<p>Nothing to hear for: " + esc("; ".join(none)) + ".</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _read_json_rows(path: Path | None, key: str = "streams") -> list[Row] | None:
    """A point file's rows; None when it is absent or says its model is not installed."""
    if path is None or not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("available") is False:
        return None
    return data.get(key)


def _read_jsonl(path: Path | None) -> list[Row] | None:
    if path is None or not path.exists():
        return None
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m thetalker.quality.pack", description=__doc__.split("\n")[0]
    )
    p.add_argument("--records", required=True, type=Path)
    p.add_argument("--health", type=Path, help="the point's health.json")
    p.add_argument("--dnsmos", type=Path, help="the point's dnsmos.json")
    p.add_argument("--transcripts", type=Path, help="the point's transcripts.jsonl, if any")
    p.add_argument("--out-dir", required=True, type=Path, help="folder of the picked WAVs")
    p.add_argument("--html", required=True, type=Path, help="the page of players")
    p.add_argument("--label", default="", help="the point, in words (title of the page)")
    p.add_argument("--per-figure", type=int, default=PER_FIGURE)
    args = p.parse_args(argv)
    try:
        records = list(read_records(args.records))
        rows = merged_rows(
            records,
            _read_json_rows(args.health),
            _read_json_rows(args.dnsmos),
            _read_jsonl(args.transcripts),
        )
        picks, none = pick_worst(rows, args.per_figure)
        label = args.label or str(args.records.parent)
        written = write_pack(picks, none, args.records.parent, args.out_dir, args.html, label)
    except (RecordError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(written)} streams picked, nothing to hear for {len(none)} figures", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
