"""Word error rate of synthesized speech, with honest intervals.

A faster server that mumbles is not faster: this module turns transcripts (what Whisper
heard) and references (what was sent) into the quality figures of docs/quality.md.
Normalisation is Whisper's English text normaliser, per-sentence edits come from jiwer,
the pooled WER is total edits over total reference words, and its interval is
`thetalker.metrics.rate_pct`'s: a bootstrap over sentences, seeded so the same input always
gives the same interval, or, where the sentences show no spread (no error in any of them),
the Wilson interval of edits over words, which says what the sample cannot rule out. The
paired difference of two systems is `rate_change_pct`'s. One interval engine and one set of
constants (`thetalker.metrics.intervals`) for every table. A failed or empty utterance is
all deletions: never dropped.

Pure functions over plain rows (dicts of `TRANSCRIPT_FIELDS`) and numpy arrays; the
only I/O is the CLI (`main`): `score` writes wer.json, `compare` writes the paired
difference of two systems over the same sentences.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from thetalker.metrics.intervals import (
    CONFIDENCE,
    METHOD_BOOTSTRAP,
    N_RESAMPLES,
    SEED,
    Interval,
    rate_change_pct,
    rate_pct,
)
from thetalker.quality.point_files import write_finite_json
from thetalker.util.checks import json_object

__all__ = [
    "TRANSCRIPT_FIELDS",
    "HIGH_WER_PCT",
    "TranscriptError",
    "normalize",
    "normalizer_version",
    "sentence_edits",
    "pooled_wer",
    "wer_interval",
    "paired_bootstrap_difference",
    "summarize",
    "format_wer",
    "read_transcripts",
    "transcripts_meta_path",
    "read_transcripts_meta",
    "main",
]

# Required in every line of transcripts.jsonl (written by thetalker.quality.asr).
TRANSCRIPT_FIELDS = (
    "sample_id",
    "reference",
    "hypothesis",
    "reference_norm",
    "hypothesis_norm",
    "substitutions",
    "deletions",
    "insertions",
    "reference_words",
    "audio_s",
    "ok",
)

# A sentence above this WER is listed by id: usually a broken utterance, not a slip.
HIGH_WER_PCT = 50.0


class TranscriptError(ValueError):
    """Transcripts that cannot be scored; the message names the file, line or ids."""


@lru_cache(maxsize=1)
def _normalizer() -> Any:
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


# Typographic quotes: Whisper's normaliser expands "doesn't" but not "doesn’t" (it drops
# the ’ as a symbol and leaves "doesn t"), so a prompt typed with ’ would score an error.
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


def normalize(text: str) -> str:
    """Whisper's English normalisation (spelling, numbers, contractions, punctuation),
    after mapping typographic quotes to ASCII ones."""
    return " ".join(_normalizer()((text or "").translate(_QUOTES)).split())


def normalizer_version() -> str:
    return f"whisper-normalizer {_version('whisper-normalizer')} EnglishTextNormalizer"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def sentence_edits(reference_norm: str, hypothesis_norm: str) -> dict[str, int]:
    """Word edits of one sentence (jiwer); both texts already normalised.

    An empty hypothesis is all deletions; an empty reference is all insertions.
    """
    import jiwer

    ref_words = reference_norm.split()
    hyp_words = hypothesis_norm.split()
    if not ref_words or not hyp_words:
        # jiwer handles these too; spelled out so the rule is visible.
        return {
            "substitutions": 0,
            "deletions": len(ref_words),
            "insertions": len(hyp_words),
            "reference_words": len(ref_words),
        }
    out = jiwer.process_words(" ".join(ref_words), " ".join(hyp_words))
    return {
        "substitutions": int(out.substitutions),
        "deletions": int(out.deletions),
        "insertions": int(out.insertions),
        "reference_words": len(ref_words),
    }


def _edits(row: Mapping[str, Any]) -> int:
    return int(row["substitutions"]) + int(row["deletions"]) + int(row["insertions"])


def pooled_wer(edits: Sequence[int] | np.ndarray, ref_words: Sequence[int] | np.ndarray) -> float:
    """Total edits / total reference words, in percent (nan when there are no words)."""
    total_ref = float(np.sum(ref_words))
    return 100.0 * float(np.sum(edits)) / total_ref if total_ref > 0 else float("nan")


# The pooled WER (percent) with its interval: `rate_pct` over the sentences, each one's edits
# over its reference words (a bootstrap over sentences; no spread, e.g. no error at all: the
# Wilson interval of edits over words). No sentences: no value.
wer_interval = rate_pct


def _by_id(rows: Sequence[Mapping[str, Any]], label: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    dupes = []
    for row in rows:
        sid = str(row["sample_id"])
        if sid in out:
            dupes.append(sid)
        out[sid] = row
    if dupes:
        raise TranscriptError(f"{label}: duplicate sample_id(s) {_ids(dupes)}")
    return out


def _ids(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(sorted(ids)[:limit])
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > limit else "")


def paired_bootstrap_difference(
    a: Sequence[Mapping[str, Any]],
    b: Sequence[Mapping[str, Any]],
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Interval of WER(a) - WER(b) (percentage points) over the same sentences.

    Rows are matched by `sample_id`; each resample draws the same sentences for both
    systems, so sentence difficulty cancels out. The sets of ids must be equal and each
    id unique; otherwise TranscriptError names the ids that do not match.
    """
    by_a, by_b = _by_id(a, "a"), _by_id(b, "b")
    only_a = sorted(set(by_a) - set(by_b))
    only_b = sorted(set(by_b) - set(by_a))
    if only_a or only_b:
        parts = [f"only in a: {_ids(only_a)}" if only_a else "", f"only in b: {_ids(only_b)}"]
        raise TranscriptError("sentences do not match; " + "; ".join(p for p in parts if p))
    ids = sorted(by_a)
    if not ids:
        raise TranscriptError("no sentences to compare")
    differ = [i for i in ids if by_a[i].get("reference_norm") != by_b[i].get("reference_norm")]
    if differ:
        raise TranscriptError(f"same sample_id, different reference text: {_ids(differ)}")
    ea = np.array([_edits(by_a[i]) for i in ids], dtype=np.int64)
    eb = np.array([_edits(by_b[i]) for i in ids], dtype=np.int64)
    ra = np.array([int(by_a[i]["reference_words"]) for i in ids], dtype=np.int64)
    rb = np.array([int(by_b[i]["reference_words"]) for i in ids], dtype=np.int64)
    # One draw of sentences for both systems: that is what makes the bootstrap paired.
    ci = rate_change_pct(ea, ra, eb, rb, n_resamples, seed, confidence)
    wer_a, wer_b = pooled_wer(ea, ra), pooled_wer(eb, rb)
    low, high = _bounds(ci)
    return {
        "wer_a": wer_a,
        "wer_b": wer_b,
        "difference": wer_a - wer_b,
        "ci_low": low,
        "ci_high": high,
        "ci_method": ci.method,
        "half_width": (high - low) / 2.0,
        # The interval excluding 0 is the "significant" reading of a paired bootstrap.
        "excludes_zero": ci.excludes(0.0),
        "n_sentences": len(ids),
        "n_resamples": n_resamples,
        "seed": seed,
        "confidence": confidence,
    }


def _bounds(ci: Interval) -> tuple[float, float]:
    """(low, high), nan where there is none (written as null)."""
    nan = float("nan")
    return (nan if ci.low is None else ci.low), (nan if ci.high is None else ci.high)


def format_wer(value: float, low: float, high: float, method: str) -> str:
    """The one way a WER is printed: `x.xx ± y.yy` (half the bootstrap interval), or, for an
    interval from the counts (no spread to bootstrap, e.g. no error: `rate_pct`),
    `x.xx [low, high]`, since a value at a bound has all its uncertainty on one side."""
    if method == METHOD_BOOTSTRAP:
        return f"{value:.2f} ± {(high - low) / 2.0:.2f}"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def summarize(
    transcripts: Sequence[Mapping[str, Any]],
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The content of wer.json for one (system, model).

    `meta` (the transcripts' sidecar: ASR model and versions) is copied under `asr`.
    """
    edits = np.array([_edits(r) for r in transcripts], dtype=np.int64)
    refs = np.array([int(r["reference_words"]) for r in transcripts], dtype=np.int64)
    wer = pooled_wer(edits, refs)
    ci = wer_interval(edits, refs, n_resamples, seed, confidence)
    low, high = _bounds(ci)
    half = (high - low) / 2.0
    scored = refs > 0
    per_sentence = 100.0 * edits[scored] / refs[scored]
    ids = [str(r["sample_id"]) for r in transcripts]
    above = [
        sid
        for sid, e, r in zip(ids, edits, refs, strict=True)
        if r > 0 and 100.0 * e / r > HIGH_WER_PCT
    ]
    return {
        "wer": wer,
        "ci_low": low,
        "ci_high": high,
        "half_width": half,
        "ci_method": ci.method,
        "wer_pm": format_wer(wer, low, high, ci.method),
        "confidence": confidence,
        "per_sentence_mean": float(per_sentence.mean()) if per_sentence.size else float("nan"),
        "n_sentences": len(ids),
        "n_failed": sum(1 for r in transcripts if not r.get("ok")),
        "n_above_50pct": len(above),
        "ids_above_50pct": above,
        "substitutions": int(sum(int(r["substitutions"]) for r in transcripts)),
        "deletions": int(sum(int(r["deletions"]) for r in transcripts)),
        "insertions": int(sum(int(r["insertions"]) for r in transcripts)),
        "reference_words": int(refs.sum()),
        "audio_s": float(sum(float(r.get("audio_s") or 0.0) for r in transcripts)),
        "sample_ids": ids,
        "n_resamples": n_resamples,
        "seed": seed,
        "normalizer": normalizer_version(),
        "jiwer": _version("jiwer"),
        "asr": dict(meta or {}),
    }


def read_transcripts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a transcripts.jsonl; a bad line raises TranscriptError naming file:line."""
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where, error = f"{path}:{lineno}", TranscriptError
            row = json_object(line, where, error, "a transcript must be a JSON object")
            missing = [f for f in TRANSCRIPT_FIELDS if f not in row]
            if missing:
                raise TranscriptError(f"{path}:{lineno}: lacks field(s) {', '.join(missing)}")
            rows.append(row)
    return rows


def transcripts_meta_path(transcripts_path: str | os.PathLike[str]) -> Path:
    """transcripts.jsonl -> transcripts.meta.json (the ASR model and versions)."""
    p = Path(transcripts_path)
    return p.with_name(p.name.removesuffix(".jsonl") + ".meta.json")


def read_transcripts_meta(transcripts_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The sidecar of a transcripts file, or {} when there is none."""
    meta = transcripts_meta_path(transcripts_path)
    if not meta.exists():
        return {}
    try:
        return json.loads(meta.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{meta}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m thetalker.quality.wer", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="command", required=True)

    def boot(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--n-resamples", type=int, default=N_RESAMPLES)
        sp.add_argument("--seed", type=int, default=SEED)
        sp.add_argument("--confidence", type=float, default=CONFIDENCE)
        sp.add_argument("--out", required=True, help="JSON file to write")

    score = sub.add_parser("score", help="pooled WER and its bootstrap interval -> wer.json")
    score.add_argument(
        "--transcripts", required=True, help="transcripts.jsonl (thetalker.quality.asr)"
    )
    score.add_argument("--system", help="label stored in wer.json (default: none)")
    score.add_argument("--model", help="label stored in wer.json (default: none)")
    boot(score)
    cmp_ = sub.add_parser("compare", help="paired bootstrap of WER(a) - WER(b)")
    cmp_.add_argument("--a", required=True, help="transcripts.jsonl of system a")
    cmp_.add_argument("--b", required=True, help="transcripts.jsonl of system b")
    boot(cmp_)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "score":
            rows = read_transcripts(args.transcripts)
            if not rows or not sum(int(r["reference_words"]) for r in rows):
                raise TranscriptError(
                    f"{args.transcripts}: no sentences with reference words to score "
                    f"({len(rows)} rows): a WER of nothing is no number"
                )
            meta = read_transcripts_meta(args.transcripts)
            out = summarize(rows, args.n_resamples, args.seed, args.confidence, meta)
            out = {"system": args.system, "model": args.model, **out}
            print(f"WER {out['wer_pm']} % over {out['n_sentences']} sentences", file=sys.stderr)
        else:
            out = paired_bootstrap_difference(
                read_transcripts(args.a),
                read_transcripts(args.b),
                args.n_resamples,
                args.seed,
                args.confidence,
            )
            out = {"a": str(args.a), "b": str(args.b), **out}
            print(
                f"WER(a) - WER(b) = {out['difference']:.2f} "
                f"[{out['ci_low']:.2f}, {out['ci_high']:.2f}] points",
                file=sys.stderr,
            )
    except (TranscriptError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_finite_json(args.out, out)  # NaN (no reference words) as null
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
