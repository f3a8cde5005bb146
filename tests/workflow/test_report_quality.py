"""The WER table and figure (thetalker.report.quality) from real wer.summarize output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thetalker.quality import wer
from thetalker.report import quality


def _rows(errors_per_sentence: list[int], words: int = 10) -> list[dict]:
    return [
        {
            "sample_id": f"s{i}",
            "reference": "",
            "hypothesis": "",
            "reference_norm": "",
            "hypothesis_norm": "",
            "substitutions": e,
            "deletions": 0,
            "insertions": 0,
            "reference_words": words,
            "audio_s": 1.0,
            "ok": True,
        }
        for i, e in enumerate(errors_per_sentence)
    ]


ASR = {"backend": "faster-whisper", "model": "tiny.en", "versions": {"faster-whisper": "1.2.1"}}


def _write(root: Path, system: str, model: str, errors: list[int], label: bool) -> Path:
    data = wer.summarize(_rows(errors), n_resamples=500, meta=ASR)
    if label:
        data = {"system": system, "model": model, **data}
    path = root / "results" / "quality" / system / model / "wer.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def wer_files(tmp_path: Path) -> list[Path]:
    return [
        _write(tmp_path, "local", "piper-joe", [0, 1, 0, 1], label=True),
        # No labels inside: system and model come from the path.
        _write(tmp_path, "local-stock", "piper-joe", [2, 2, 2, 2], label=False),
        _write(tmp_path, "local", "other", [0, 0, 0, 0], label=True),
    ]


def test_table_is_model_by_system_with_pm_cells(wer_files: list[Path]) -> None:
    md = quality.wer_table(wer_files)
    lines = md.splitlines()
    assert "| model | local | local-stock |" in lines
    # 2 errors in 40 words = 5 %; the interval half-width comes from the file, verbatim.
    local = json.loads(wer_files[0].read_text())
    assert local["wer_pm"].startswith("5.00 ± ")
    # The same 2 errors in each sentence, and no error at all: no spread to bootstrap, so the
    # Wilson interval of edits over words (never "± 0.00": the sample rules out no small rate).
    assert f"| piper-joe | {local['wer_pm']} | 20.00 [10.50, 34.76] |" in lines
    # A (model, system) that was not run is n/a, never 0.
    assert "| other | 0.00 [0.00, 8.76] | n/a |" in lines
    assert any("tiny.en" in line and "whisper-normalizer" in line for line in lines)


def test_table_respects_given_order(wer_files: list[Path]) -> None:
    md = quality.wer_table(wer_files, models=["other", "piper-joe"], systems=["local-stock"])
    body = [line for line in md.splitlines() if line.startswith("| ")]
    assert body == [
        "| model | local-stock |",
        "| other | n/a |",
        "| piper-joe | 20.00 [10.50, 34.76] |",
    ]


def test_figure_is_a_png(wer_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "figures" / "wer.png"
    quality.wer_figure(wer_files, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 5000


def test_cli_writes_both_and_names_a_bad_file(wer_files: list[Path], tmp_path: Path, capsys):
    table, figure = tmp_path / "t" / "wer.md", tmp_path / "f" / "wer.png"
    args = ["--wer", *map(str, wer_files), "--table", str(table), "--figure", str(figure)]
    assert quality.main(args) == 0
    assert "| piper-joe |" in table.read_text()
    assert figure.exists()
    bad = tmp_path / "bad" / "x" / "wer.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"wer": 1.0}))
    assert quality.main(["--wer", str(bad), "--table", str(table)]) == 2
    assert f"{bad}: missing field 'ci_low'" in capsys.readouterr().err
