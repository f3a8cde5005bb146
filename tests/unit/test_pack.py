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
from thetalker.data.record_writes import append_record
from thetalker.data.wavio import read_wav, write_wav
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


# --- bounds (issue 45: three 30 MiB streams made 513 MB of pack for one point) ------------------


def _long_point(tmp_path, seconds: float):
    """Three streams of `seconds` each at 16 kHz, each the worst by several figures."""
    folder = tmp_path / "c3"
    records, health, dnsmos = [], [], []
    n = int(seconds * RATE)
    for i in range(3):
        x = (0.3 * np.sin(2 * np.pi * 150 * (i + 1) * np.arange(n) / RATE) * 32767).astype("<i2")
        rel = f"audio/{i:05d}_s{i}.wav"
        write_wav(folder / rel, x.tobytes(), RATE)
        rec = make_record(i)
        rec.update(audio_path=rel, ttfa_audible_s=0.5 + i, sample_rate=RATE, audio_s=seconds,
                   chunk_arrival_s=[0.05], chunk_bytes=[2 * n])  # fmt: skip
        records.append(rec)
        health.append({"request_index": i, "clicking_joins": 1 + i, "clip_runs": 2 + i,
                       "defects": []})  # fmt: skip
        dnsmos.append({"request_index": i, "scored": True, "ovrl": 1.5 + i})
    with (folder / "records.jsonl").open("w", encoding="utf-8") as fh:
        for rec in records:
            append_record(fh, rec)
    (folder / "health.json").write_text(json.dumps({"streams": health}))
    (folder / "dnsmos.json").write_text(json.dumps({"available": True, "streams": dnsmos}))
    return folder


def test_the_pack_keeps_one_cut_copy_of_each_stream_and_links_past_its_embed_budget(tmp_path):
    """Each picked stream is copied once (not once per figure that picks it), cut to its
    first KEEP_S seconds; the page embeds WAVs up to EMBED_MAX_BYTES and links the rest."""
    folder = _long_point(tmp_path, pack.KEEP_S + 10)
    budget = 1_000_000  # one cut WAV (960,044 bytes) fits, two do not
    assert _run(folder, "--embed-max-bytes", str(budget)) == 0
    data = json.loads((folder / "listen" / "pack.json").read_text())
    # 4 figures x 2 picks = 8 players, over the 3 streams (every stream is picked).
    assert len(data["picks"]) == 8
    assert {p["request_index"] for p in data["picks"]} == {0, 1, 2}
    wavs = sorted((folder / "listen").glob("*.wav"))
    assert [w.name for w in wavs] == ["00000_s0.wav", "00001_s1.wav", "00002_s2.wav"]
    cut = 44 + int(pack.KEEP_S * RATE) * 2
    assert [w.stat().st_size for w in wavs] == [cut] * 3
    assert all(
        p["kept_s"] == pack.KEEP_S and p["audio_s"] == pack.KEEP_S + 10 for p in data["picks"]
    )
    page = (folder / "listen.html").read_text()
    # The first player's WAV embedded (within the budget), every later one linked.
    assert page.count("data:audio/wav;base64,") == 1
    assert page.count('src="listen/') == 7
    assert len(page.encode()) < budget * 4 / 3 + 20_000
    assert "first 30 s of" in page  # the cut is said where it is heard


def test_a_default_pack_stays_within_its_stated_bounds(tmp_path):
    """The default budget: the page never holds more than EMBED_MAX_BYTES of WAV (in base64,
    4/3 of it) however long the streams, and listen/ one cut WAV per stream."""
    folder = _long_point(tmp_path, 3 * pack.KEEP_S)
    assert _run(folder) == 0
    listen = sum(f.stat().st_size for f in (folder / "listen").glob("*.wav"))
    assert listen == 3 * (44 + int(pack.KEEP_S * RATE) * 2)
    assert (folder / "listen.html").stat().st_size < pack.EMBED_MAX_BYTES * 4 / 3 + 20_000


# --- a stalled stream as the player heard it ---------------------------------------------------


def _stalled_point(tmp_path):
    """One stream of 1 s at 16 kHz (32,000 bytes) in chunks of 8,000, 8,000 and 16,000 bytes
    arriving at 0, 0.5 and 1.0 s. A pausing zero-buffer player plays 0-0.25 s, waits 0.25 s,
    plays the second chunk 0.5-0.75 s, waits 0.25 s, plays the rest from 1.0 s: stalls of
    0.25 s before sample 4,000 and before sample 8,000."""
    folder = tmp_path / "c1"
    x = (0.3 * np.sin(2 * np.pi * 200 * np.arange(RATE) / RATE) * 32767).astype("<i2")
    write_wav(folder / "audio/00000_s0.wav", x.tobytes(), RATE)
    rec = make_record(0, continuous=False)
    rec.update(audio_path="audio/00000_s0.wav", sample_rate=RATE, audio_s=1.0, stall_s=0.5,
               stalls=2, chunk_arrival_s=[0.0, 0.5, 1.0],
               chunk_bytes=[8000, 8000, 16000])  # fmt: skip
    with (folder / "records.jsonl").open("w", encoding="utf-8") as fh:
        append_record(fh, rec)
    (folder / "health.json").write_text(json.dumps({"streams": []}))
    (folder / "dnsmos.json").write_text(json.dumps({"available": True, "streams": []}))
    return folder, x


def test_a_stalled_pick_gets_a_second_player_with_its_stalls_as_silence(tmp_path):
    folder, x = _stalled_point(tmp_path)
    assert _run(folder) == 0
    data = json.loads((folder / "listen" / "pack.json").read_text())
    stalled = [p for p in data["picks"] if p["figure"] == "largest stall"]
    assert len(stalled) == 1 and stalled[0]["stalled_file"] == "00000_s0_stalls.wav"
    assert stalled[0]["stalls_rendered_s"] == 0.5
    pcm, info = read_wav(folder / "listen" / stalled[0]["stalled_file"])
    y = np.frombuffer(pcm, "<i2")
    # Its length: the audio plus every stall; the silence where the player waited.
    assert info.sample_rate == RATE and y.size == RATE + 8000
    assert np.array_equal(y[:4000], x[:4000]) and not y[4000:8000].any()
    assert np.array_equal(y[8000:12000], x[4000:8000]) and not y[12000:16000].any()
    assert np.array_equal(y[16000:], x[8000:])
    page = (folder / "listen.html").read_text()
    assert "as a real-time player heard it: stalls as silence" in page
    # Every pick of that stream (it is the slowest audible first audio too) has both players.
    assert page.count("<audio controls") == 2 * len(data["picks"])


def test_a_stall_longer_than_the_silence_bound_is_cut_to_it():
    """A stall can last up to a timeout: the render holds STALL_SILENCE_MAX_S of silence in
    all, and a stall after the kept audio is not heard."""
    from thetalker.quality.pack_audio import STALL_SILENCE_MAX_S, stalls_as_silence

    pcm = b"\x01\x00" * RATE  # 1 s
    audio, silence = stalls_as_silence(pcm, RATE, 2, [(8000, 100.0), (16000, 5.0), (64000, 1.0)])
    assert silence == int(STALL_SILENCE_MAX_S * RATE) * 2
    assert len(audio) == len(pcm) + silence
    assert audio[:8000] == pcm[:8000] and not any(audio[8000 : 8000 + silence])
