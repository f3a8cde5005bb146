"""The listening pack (thetalker.quality.pack): the worst streams of a point by each figure,
with the value that made each the worst, as WAVs and a page of players that Chromium plays."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from tests.support.records import make_record
from tests.support.tiers import unavailable
from thetalker.data.records import append_record
from thetalker.data.wavio import write_wav
from thetalker.quality import pack

RATE = 16_000


def _point(tmp_path):
    """Four streams: 2 the slowest, 3 the longest stall, 4 the lowest OVRL and a clicking
    join, 1 the worst WER; each a distinct tone so a copied file can be told apart."""
    folder = tmp_path / "c4"
    records = [make_record(0, warmup=True)]
    health, dnsmos, transcripts = [], [], []
    for i, (ttfa, stall, ovrl, clicks, edits) in enumerate(
        [
            (0.1, 0.0, 3.2, 0, 3),
            (0.9, 0.0, 3.1, 0, 0),
            (0.2, 0.4, 3.3, 0, 0),
            (0.3, 0.0, 2.1, 2, 1),
        ],
        start=1,
    ):
        x = (0.3 * np.sin(2 * np.pi * 100 * i * np.arange(RATE) / RATE) * 32767).astype("<i2")
        rel = f"audio/{i:05d}_s{i}.wav"
        write_wav(folder / rel, x.tobytes(), RATE)
        rec = make_record(i)
        rec.update(audio_path=rel, ttfa_audible_s=ttfa, stall_s=stall, text=f"sentence {i}")
        records.append(rec)
        health.append(
            {
                "request_index": i,
                "clicking_joins": clicks,
                "longest_mid_silence_s": 0.0,
                "clip_runs": 0,
                "dc_offset": 0.0,
                "end_dbfs": -90.0,
                "defects": [],
            }
        )
        dnsmos.append({"request_index": i, "scored": True, "ovrl": ovrl})
        transcripts.append(
            {
                "request_index": i,
                "reference_words": 4,
                "substitutions": edits,
                "deletions": 0,
                "insertions": 0,
            }
        )
    records.append(make_record(5, ok=False))  # a failure is no stream to hear
    with (folder / "records.jsonl").open("w", encoding="utf-8") as fh:
        for rec in records:
            append_record(fh, rec)
    (folder / "health.json").write_text(json.dumps({"streams": health}))
    (folder / "dnsmos.json").write_text(json.dumps({"available": True, "streams": dnsmos}))
    with (folder / "transcripts.jsonl").open("w") as fh:
        fh.writelines(json.dumps(t) + "\n" for t in transcripts)
    return folder


def _run(folder, *extra: str) -> int:
    return pack.main(
        [
            "--records",
            str(folder / "records.jsonl"),
            "--health",
            str(folder / "health.json"),
            "--dnsmos",
            str(folder / "dnsmos.json"),
            "--out-dir",
            str(folder / "listen"),
            "--html",
            str(folder / "listen.html"),
            "--label",
            "sys model c4",
            *extra,
        ]
    )


def test_the_worst_stream_of_each_figure_and_why(tmp_path):
    folder = _point(tmp_path)
    assert (
        _run(folder, "--transcripts", str(folder / "transcripts.jsonl"), "--per-figure", "1") == 0
    )
    data = json.loads((folder / "listen" / "pack.json").read_text())
    got = {p["figure"]: (p["request_index"], p["value"]) for p in data["picks"]}
    assert got == {
        "slowest audible first audio": (2, "0.900 s"),
        "largest stall": (3, "0.400 s of stalls"),
        "highest WER": (1, "sentence WER 75 %"),
        "lowest DNSMOS OVRL": (4, "OVRL 2.10"),
        "most clicking joins": (4, "2 clicking joins"),
    }
    assert "clipping" in data["none"] and "longest mid-stream silence" in data["none"]
    # Each pick's WAV copied whole, and embedded whole in the page.
    page = (folder / "listen.html").read_text()
    for p in data["picks"]:
        copied = (folder / "listen" / p["file"]).read_bytes()
        assert (
            copied
            == (folder / f"audio/{p['request_index']:05d}_s{p['request_index']}.wav").read_bytes()
        )
        assert base64.b64encode(copied).decode() in page
    assert page.count("<audio controls") == 5


def test_without_transcripts_wer_is_said_not_measured(tmp_path):
    folder = _point(tmp_path)
    assert _run(folder) == 0
    data = json.loads((folder / "listen" / "pack.json").read_text())
    assert "highest WER (not measured)" in data["none"]
    assert len([p for p in data["picks"] if p["figure"] == "largest stall"]) == 1  # one stalled


HARNESS = """<pre id="out">pending</pre><script>
window.addEventListener("load", async () => {
  const lines = [];
  for (const a of document.querySelectorAll("audio")) {
    a.muted = true;
    let playing = false;
    a.addEventListener("playing", () => { playing = true; });
    try {
      await a.play();
      await new Promise(r => setTimeout(r, 300));
      lines.push(`${a.title} ${a.duration.toFixed(3)} ${playing} ${a.error ? a.error.code : 0}`);
    } catch (e) { lines.push(`${a.title} FAILED ${e}`); }
  }
  document.getElementById("out").textContent = lines.join("\\n");
});
</script></body>"""


def test_chromium_plays_every_player_of_the_page(tmp_path):
    if shutil.which("chromium") is None:
        unavailable("chromium not installed (.ci/run installs it where root and apt-get are)")
    folder = _point(tmp_path)
    assert _run(folder, "--per-figure", "1") == 0
    probe = tmp_path / "probe.html"
    probe.write_text((folder / "listen.html").read_text().replace("</body>", HARNESS))
    out = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--autoplay-policy=no-user-gesture-required",
            "--virtual-time-budget=20000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    lines = re.search(r'<pre id="out">(.*?)</pre>', out, re.S).group(1).strip().splitlines()
    data = json.loads((folder / "listen" / "pack.json").read_text())
    assert len(lines) == len(data["picks"]) == 4
    for line in lines:
        title, duration, playing, error = line.split()
        assert float(duration) == pytest.approx(1.0, abs=0.01)  # each WAV is 1 s
        assert playing == "true" and error == "0", line
