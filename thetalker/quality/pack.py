"""The listening pack of a point: its worst streams by each figure, to hear before trusting
a number.

For one point whose audio was saved, the streams that did worst on each figure (the slowest
audible first audio, the largest stall, the highest sentence WER, the lowest DNSMOS OVRL, the
most clicking joins, the longest mid-stream silence, and any clipping, DC offset, cut ending
or empty success), `per_figure` of each, each with the value that made it the worst:

- `OUT_DIR/` one WAV per picked stream, however many figures pick it (its original name,
  its first KEEP_S seconds), for a stream the pausing player stalled on a second one with
  the stalls as silence (`{stem}_stalls.wav`), and pack.json (the picks: figure, value,
  request_index, sample_id, text, file, kept_s, audio_s, stalled_file, stalls_rendered_s);
- `OUT_HTML`, one page with an audio player per pick (two for a stalled stream) and why it
  was picked, each WAV embedded as a data URI up to EMBED_MAX_BYTES, so it plays in a
  browser on its own and inside the Snakemake report (an HTML result is shown in an
  iframe; a WAV result would only download); past that budget a player links its file.
  The bounds: thetalker.quality.pack_audio.

A figure no stream is bad on (no stall, no clicking join) has no pick, and says so. Inputs:
the point's records.jsonl, health.json and dnsmos.json (thetalker.quality.health, .dnsmos)
and, where the point was transcribed, its transcripts.jsonl.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thetalker.data.record_reads import RecordError, read_records
from thetalker.data.record_writes import write_json
from thetalker.data.wavio import WavError
from thetalker.metrics.players import pausing_stall_points
from thetalker.quality.pack_audio import EMBED_MAX_BYTES, KEEP_S, EmbedBudget, Kept, keep_stream

__all__ = ["Pick", "FIGURES", "KEEP_S", "EMBED_MAX_BYTES", "pick_worst", "write_pack", "main"]

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
    kept_s: float = 0.0
    audio_s: float = 0.0
    stalled_file: str = ""
    stalls_rendered_s: float = 0.0


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


STALLED_LABEL = "as a real-time player heard it: stalls as silence"


def write_pack(
    picks: Sequence[Pick],
    none: Sequence[str],
    base: Path,
    out_dir: Path,
    out_html: Path,
    label: str,
    stall_points: Mapping[int, Sequence[tuple[int, float]]] | None = None,
    embed_max_bytes: int = EMBED_MAX_BYTES,
) -> list[Pick]:
    """Keep each picked stream once in `out_dir` (cut to KEEP_S; with its stalls, from
    `stall_points` by request index, rendered as silence), write pack.json and the page."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    kept: dict[int, Kept] = {}
    written = []
    for p in picks:
        if p.request_index not in kept:
            src = Path(p.audio_path) if Path(p.audio_path).is_absolute() else base / p.audio_path
            points = (stall_points or {}).get(p.request_index) or []
            kept[p.request_index] = keep_stream(src, out_dir, points)
        k = kept[p.request_index]
        written.append(Pick(**{**asdict(p), **asdict(k)}))
    write_json(
        out_dir / "pack.json",
        {"point": label, "picks": [asdict(p) for p in written], "none": list(none)},
    )
    out_html.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_html.with_name(out_html.name + ".tmp")
    budget = EmbedBudget(out_html, out_dir, embed_max_bytes)
    tmp.write_text(_page(written, none, budget, label), encoding="utf-8")
    os.replace(tmp, out_html)
    return written


def _player(src: str, title: str) -> str:
    return (
        f'<audio controls preload="metadata" title="{html.escape(title)}" '
        f'src="{html.escape(src)}"></audio>'
    )


def _listen_cell(p: Pick, budget: EmbedBudget) -> str:
    cell = _player(budget.src(p.file), p.file)
    if p.kept_s < p.audio_s:
        cell += f"<br>first {p.kept_s:g} s of {p.audio_s:.1f} s"
    if p.stalled_file:
        heard = _player(budget.src(p.stalled_file), p.stalled_file)
        cell += f"<br>{STALLED_LABEL} ({p.stalls_rendered_s:.3f} s of silence):<br>{heard}"
    return cell


def _page(picks: Sequence[Pick], none: Sequence[str], budget: EmbedBudget, label: str) -> str:
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
        "(thetalker.quality.pack; definitions in docs/quality.md). A stream the pausing "
        "player stalled on plays twice: as received, and " + STALLED_LABEL + ".</p>",
        "<table><tr><th>worst by</th><th>value</th><th>request</th><th>text</th>"
        "<th>listen</th></tr>",
    ]
    for p in picks:
        parts.append(
            f"<tr><td>{esc(p.figure)}</td><td>{esc(p.value)}</td>"
            f"<td>{p.request_index} ({esc(p.sample_id)})</td><td>{esc(p.text)}</td>"
            f"<td>{_listen_cell(p, budget)}</td></tr>"
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
    p.add_argument(
        "--embed-max-bytes",
        type=int,
        default=EMBED_MAX_BYTES,
        help="WAV bytes the page embeds; later players link their file",
    )
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
        stalls = {int(r["request_index"]): pausing_stall_points(r) for r in records}
        written = write_pack(
            picks,
            none,
            args.records.parent,
            args.out_dir,
            args.html,
            label,
            stalls,
            args.embed_max_bytes,
        )
    except (RecordError, WavError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(written)} streams picked, nothing to hear for {len(none)} figures", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
