"""DNSMOS P.835 (SIG, BAK, OVRL) of each stream a run received: does load cost naturalness?

Microsoft's DNSMOS P.835 model is a no-reference estimate of how listeners would rate a clip
(speech signal SIG, background BAK, overall OVRL, 1-5), trained on noisy and processed human
speech. It is not a TTS naturalness model (UTMOS needs a hub download): read it to compare a
server with itself across loads, and systems with each other, never as an absolute MOS.

The ONNX file ships in the `speechmos` 0.0.1.1 wheel (`speechmos/dnsmos_models/sig_bak_ovr.onnx`,
MIT). That wheel's own code imports librosa and requests at module level without declaring
them; the P.835 model needs no features (it takes the waveform), so this module reads the
file through onnxruntime and does the rest itself, exactly as `speechmos.dnsmos` does
(checked against it on the same audio: docs/quality.md): 16 kHz mono float; a clip shorter
than 9.01 s doubled onto itself until it is that long; windows of 9.01 s every 1 s; each
window's raw scores mapped by the model's published polynomials; the clip's score the mean
over windows. Audio at another rate is resampled with scipy's polyphase filter.

What is scored: a stream with an audible onset (the record's own onset rule,
thetalker.metrics.onset), its first MAX_SCORED_S seconds at most. A failed request, a stream
with no audio and one with no audible onset (digital silence, a single sample: the model
scores 2 s of zeros OVRL 1.84, above a failure) count at the floor, FAILED_SCORE, with the
reason named. A score the polynomials map below the floor is kept as it is (`below_floor`).

`main` writes a point's dnsmos.json; without speechmos it writes `available: false` and the
reason, so the tables say "not installed", never a silent gap.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from thetalker.data.record_reads import RecordError
from thetalker.data.record_writes import write_json
from thetalker.metrics.onset import DEFAULT_ONSET, OnsetSettings, audible_onset_s
from thetalker.quality.point_files import point_parser, record_audio, scored_records

__all__ = [
    "SAMPLE_RATE",
    "WINDOW_S",
    "FAILED_SCORE",
    "MAX_SCORED_S",
    "SCORES",
    "NotInstalled",
    "model_path",
    "resample",
    "windows",
    "calibrate",
    "Dnsmos",
    "point_scores",
    "main",
]

SAMPLE_RATE = 16_000
WINDOW_S = 9.01  # the model's input: 144,160 samples
SCORES = ("sig", "bak", "ovrl")
# A failed request, or one with no audible audio, is scored at the floor of the 1-5 scale:
# a listener got nothing, which counts against the mean as a failure does everywhere.
FAILED_SCORE = 1.0
# A stream is scored on its first 30 s at most: 21 windows or fewer (about 20 s of CPU here).
# A model that never emits its stop token streams minutes (three 30 MiB streams: 843 s);
# a sentence of speech is far shorter, so this cuts only a runaway.
MAX_SCORED_S = 30.0
INSTALL_HINT = "pip install 'thetalker[quality]' (speechmos==0.0.1.1, onnxruntime)"

# The polynomials mapping the raw P.835 outputs to MOS (speechmos.dnsmos, not personalized;
# Microsoft's DNS-Challenge dnsmos_local.py): highest power first, as numpy.poly1d takes them.
_POLY = {
    "sig": (-0.08397278, 1.22083953, 0.0052439),
    "bak": (-0.13166888, 1.60915514, -0.39604546),
    "ovrl": (-0.06766283, 1.11546468, 0.04602535),
}


class NotInstalled(RuntimeError):
    """The speechmos wheel (the ONNX file) or onnxruntime is not installed."""


def model_path() -> Path:
    """The P.835 ONNX file inside the installed speechmos wheel (its code is not imported:
    speechmos.dnsmos imports librosa and requests at module level)."""
    spec = importlib.util.find_spec("speechmos")
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"speechmos not installed ({INSTALL_HINT})")
    path = Path(next(iter(spec.submodule_search_locations))) / "dnsmos_models/sig_bak_ovr.onnx"
    if not path.is_file():
        raise NotInstalled(f"{path}: the DNSMOS model is not in this speechmos ({INSTALL_HINT})")
    return path


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    """`x` at `rate` Hz -> SAMPLE_RATE, scipy's polyphase filter (22050 -> 16000: 320/441),
    clipped to [-1, 1]."""
    if rate == SAMPLE_RATE:
        return np.asarray(x, dtype=np.float64)
    from scipy.signal import resample_poly

    g = math.gcd(int(rate), SAMPLE_RATE)
    y = resample_poly(np.asarray(x, dtype=np.float64), SAMPLE_RATE // g, int(rate) // g)
    # The filter can overshoot a full-scale peak; the model takes audio in [-1, 1].
    return np.clip(y, -1.0, 1.0)


def windows(audio: np.ndarray) -> list[np.ndarray]:
    """The 9.01 s windows the model scores, as speechmos.dnsmos cuts them: a short clip
    doubled onto itself until it is long enough, then a window every second."""
    if audio.size == 0:
        return []
    n = int(WINDOW_S * SAMPLE_RATE)
    while audio.size < n:
        audio = np.append(audio, audio)
    hops = int(np.floor(audio.size / SAMPLE_RATE) - WINDOW_S) + 1
    out = []
    for k in range(hops):
        seg = audio[int(k * SAMPLE_RATE) : int((k + WINDOW_S) * SAMPLE_RATE)]
        if seg.size >= n:
            out.append(seg)
    return out


def calibrate(raw: Sequence[float]) -> dict[str, float]:
    """Raw (SIG, BAK, OVRL) of one window -> MOS by the published polynomials."""
    return {name: float(np.polyval(_POLY[name], r)) for name, r in zip(SCORES, raw, strict=True)}


class Dnsmos:
    """One onnxruntime session on the P.835 model; `score(x, rate)` -> {sig, bak, ovrl}."""

    def __init__(self, threads: int = 1) -> None:
        path = model_path()
        try:
            import onnxruntime as ort
        except ImportError:
            raise NotInstalled(f"onnxruntime not installed ({INSTALL_HINT})") from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name

    def score(self, x: np.ndarray, rate: int) -> dict[str, float] | None:
        """Mean MOS over the windows of `x` (floats in [-1, 1] at `rate`); None if empty."""
        segs = windows(resample(x, rate))
        if not segs:
            return None
        per = []
        for seg in segs:
            raw = self._session.run(None, {self._input: seg.astype(np.float32)[None, :]})[0][0]
            per.append(calibrate(raw))
        return {name: float(np.mean([p[name] for p in per])) for name in SCORES}

    @staticmethod
    def describe() -> dict[str, Any]:
        return {
            "model": "DNSMOS P.835 sig_bak_ovr.onnx (speechmos wheel)",
            "speechmos": _version("speechmos"),
            "onnxruntime": _version("onnxruntime"),
            "resampler": "scipy.signal.resample_poly",
            "failed_score": FAILED_SCORE,
            "max_scored_s": MAX_SCORED_S,
            "unscored": "failed, no audio, or no audible onset (the record's onset rule)",
        }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _scorer(threads: int) -> Dnsmos:
    return Dnsmos(threads)


def _onset_rule(rec: dict[str, Any]) -> OnsetSettings:
    """The onset rule the record was measured by (the default where it names none)."""
    try:
        return OnsetSettings.from_label(str(rec["audible_onset_rule"]))
    except (KeyError, ValueError):
        return DEFAULT_ONSET


def point_scores(records_path: str | os.PathLike[str], threads: int = 1) -> list[dict[str, Any]]:
    """One row per scored record of a point with saved audio (or failed), in file order:
    request_index, sample_id, ok, audio_path, audio_s, sig/bak/ovrl, `scored`,
    `unscored_reason` ("failed", "no audio", "no audible onset": each at FAILED_SCORE),
    `scored_s` (seconds given to the model, at most MAX_SCORED_S) and `below_floor`."""
    records_path = Path(records_path)
    rows = []
    for where, rec in scored_records(records_path):
        row: dict[str, Any] = {
            "request_index": int(rec["request_index"]),
            "sample_id": str(rec["sample_id"]),
            "ok": bool(rec.get("ok")),
            "audio_path": rec.get("audio_path"),
            "audio_s": float(rec.get("audio_s") or 0.0),
        }
        scores, scored_s, reason = None, None, None
        audio = record_audio(rec, records_path.parent, where) if rec.get("ok") else None
        if audio is None:
            reason = "no audio" if rec.get("ok") else "failed"
        else:
            pcm, rate = audio
            ints = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
            if audible_onset_s(ints, rate, _onset_rule(rec)) is None:
                reason = "no audible onset"  # silence scores above a failure: not scored
            else:
                head = ints[: int(MAX_SCORED_S * rate)]
                scores = _scorer(threads).score(head / 32768.0, rate)
                scored_s = head.size / rate
        row["scored"] = scores is not None
        row["unscored_reason"] = reason
        row["scored_s"] = scored_s
        row.update(scores or dict.fromkeys(SCORES, FAILED_SCORE))
        # Kept as it is, never clipped up: a tone can map below the scale's floor.
        row["below_floor"] = scores is not None and min(scores.values()) < FAILED_SCORE
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = point_parser("thetalker.quality.dnsmos", __doc__, "dnsmos.json")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads")
    args = p.parse_args(argv)
    try:
        _scorer(args.threads)
    except NotInstalled as exc:
        # Written, not failed: the table says "not installed" (never a silent gap).
        write_json(args.out, {"records": str(args.records), "available": False, "reason": str(exc)})
        print(f"warning: {exc}", file=sys.stderr)
        return 0
    try:
        rows = point_scores(args.records, args.threads)
    except (RecordError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(
        args.out,
        {
            "records": str(args.records),
            "available": True,
            "dnsmos": Dnsmos.describe(),
            "streams": rows,
        },
    )
    ovrl = [r["ovrl"] for r in rows]
    print(f"{len(rows)} streams, OVRL mean {np.mean(ovrl):.2f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
