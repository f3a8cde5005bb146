"""WER arithmetic and its intervals against hand-computed cases (thetalker.quality.wer)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from thetalker.quality import wer
from thetalker.quality.point_files import write_finite_json


def row(sid: str, s: int, d: int, i: int, n: int, ok: bool = True, ref: str = "") -> dict:
    return {
        "sample_id": sid,
        "reference": ref,
        "hypothesis": "",
        "reference_norm": ref,
        "hypothesis_norm": "",
        "substitutions": s,
        "deletions": d,
        "insertions": i,
        "reference_words": n,
        "audio_s": 1.0,
        "ok": ok,
    }


# --- normalisation and per-sentence edits -------------------------------------------


def test_normalize_uses_whisper_english_rules() -> None:
    # Numbers to digits, spelling standardised, punctuation and case dropped.
    assert wer.normalize("Twenty-one apples, Mr. Smith!") == "21 apples mister smith"
    assert wer.normalize("The colour grey.") == wer.normalize("the color gray")


def test_normalize_expands_typographic_apostrophe_like_ascii() -> None:
    # Without the quote mapping "doesn’t" became "doesn t" and scored 2 edits.
    assert wer.normalize("who doesn\u2019t") == wer.normalize("who doesn't") == "who does not"


def test_sentence_edits_known_counts() -> None:
    # ref: a b c d ; hyp: a x c d e -> b->x substituted, e inserted.
    assert wer.sentence_edits("a b c d", "a x c d e") == {
        "substitutions": 1,
        "deletions": 0,
        "insertions": 1,
        "reference_words": 4,
    }
    # "the cat sat" -> "cat sat down": the deleted, down inserted.
    e = wer.sentence_edits("the cat sat", "cat sat down")
    assert (e["substitutions"], e["deletions"], e["insertions"]) == (0, 1, 1)


def test_empty_hypothesis_is_all_deletions() -> None:
    assert wer.sentence_edits("one two three", "") == {
        "substitutions": 0,
        "deletions": 3,
        "insertions": 0,
        "reference_words": 3,
    }


def test_empty_reference_is_all_insertions() -> None:
    e = wer.sentence_edits("", "hello there")
    assert (e["insertions"], e["reference_words"]) == (2, 0)


# --- pooled WER -----------------------------------------------------------------------


def test_pooled_wer_is_total_edits_over_total_words_not_mean_of_ratios() -> None:
    # 1/2 and 0/8: pooled 1/10 = 10 %, while the mean of ratios would be 25 %.
    assert wer.pooled_wer([1, 0], [2, 8]) == pytest.approx(10.0)


def test_pooled_wer_without_reference_words_is_nan() -> None:
    assert math.isnan(wer.pooled_wer([0], [0]))


def test_failed_request_counts_as_all_deletions_in_summary() -> None:
    rows = [row("a", 0, 0, 0, 10), row("b", 0, 5, 0, 5, ok=False)]
    out = wer.summarize(rows, n_resamples=200)
    assert out["wer"] == pytest.approx(100.0 * 5 / 15)
    assert out["n_failed"] == 1
    assert out["n_sentences"] == 2
    assert out["ids_above_50pct"] == ["b"]


# --- intervals (thetalker.metrics.intervals, the one engine) ---------------------------


def test_no_error_is_not_certainty() -> None:
    # Six right sentences of 10 words: a bootstrap over them resamples 0 % every time and
    # printed "0.00 ± 0.00". 60 words with no error rule out a WER above about 6 %, no less.
    ci = wer.wer_interval([0] * 6, [10] * 6)
    assert (ci.value, ci.low, ci.method) == (0.0, 0.0, "wilson")
    # The Wilson bound of 0 of k is z^2 / (k + z^2): about 3.8 / k.
    z2 = 1.959963984540054**2
    assert ci.high == pytest.approx(100.0 * z2 / (60 + z2))
    out = wer.summarize([row(f"s{i}", 0, 0, 0, 10) for i in range(6)], n_resamples=200)
    assert out["wer_pm"] == f"0.00 [0.00, {ci.high:.2f}]" and out["ci_high"] > 0


def test_single_sentence_gets_the_interval_of_its_words() -> None:
    ci = wer.wer_interval([3], [12], n_resamples=500)
    assert ci.value == pytest.approx(25.0) and ci.method == "wilson"
    assert ci.low < 25.0 < ci.high


def test_identical_sentences_are_no_certainty_either() -> None:
    # Seven sentences with one error in ten words each: every resample is 10 %.
    ci = wer.wer_interval([1] * 7, [10] * 7, n_resamples=500)
    assert ci.value == pytest.approx(10.0) and ci.low < 10.0 < ci.high


def test_seeded_interval_is_reproducible_and_seed_matters() -> None:
    rng = np.random.default_rng(123)
    refs = rng.integers(5, 20, size=60)
    edits = rng.binomial(refs, 0.1)
    a = wer.wer_interval(edits, refs, n_resamples=2000, seed=7)
    b = wer.wer_interval(edits, refs, n_resamples=2000, seed=7)
    c = wer.wer_interval(edits, refs, n_resamples=2000, seed=8)
    assert a == b and a.method == "bootstrap"
    assert (a.low, a.high) != (c.low, c.high)
    assert a.low < wer.pooled_wer(edits, refs) < a.high


def test_interval_is_the_percentile_bootstrap_over_sentences() -> None:
    # Each resample draws whole sentences (edits and words together), as a plain loop does.
    edits = np.array([0, 2, 1, 5, 0, 3])
    refs = np.array([8, 9, 7, 10, 6, 12])
    ci = wer.wer_interval(edits, refs, n_resamples=4000, seed=3)
    idx = np.random.default_rng(11).integers(0, 6, size=(20000, 6))
    loop = [100.0 * edits[i].sum() / refs[i].sum() for i in idx]
    expected = np.percentile(loop, [2.5, 97.5])
    assert (ci.low, ci.high) == pytest.approx(tuple(expected), abs=1.5)


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="one length"):
        wer.wer_interval([1, 2], [3], n_resamples=10)
    with pytest.raises(ValueError, match="confidence"):
        wer.wer_interval([1, 2], [3, 4], confidence=1.5)


def test_summarize_fields_and_pm_string() -> None:
    rows = [row(f"s{i}", i % 2, 0, 0, 10) for i in range(10)]
    out = wer.summarize(rows, n_resamples=1000, seed=1, meta={"model": "tiny.en"})
    assert out["wer"] == pytest.approx(5.0)
    assert out["ci_method"] == "bootstrap"
    assert out["wer_pm"] == wer.format_wer(out["wer"], out["ci_low"], out["ci_high"], "bootstrap")
    assert out["half_width"] == pytest.approx((out["ci_high"] - out["ci_low"]) / 2)
    assert out["per_sentence_mean"] == pytest.approx(5.0)
    assert out["n_above_50pct"] == 0
    assert out["sample_ids"] == [f"s{i}" for i in range(10)]
    assert (out["n_resamples"], out["seed"]) == (1000, 1)
    assert out["asr"] == {"model": "tiny.en"}
    assert out["normalizer"].startswith("whisper-normalizer ")


def test_format_wer() -> None:
    assert wer.format_wer(1.114, 0.6, 1.624, "bootstrap") == "1.11 ± 0.51"
    assert wer.format_wer(12.0, 9.0, 15.912, "bootstrap") == "12.00 ± 3.46"
    assert wer.format_wer(0.0, 0.0, 6.02, "wilson") == "0.00 [0.00, 6.02]"


# --- paired bootstrap -----------------------------------------------------------------


def test_paired_difference_of_identical_systems_is_zero_but_not_certain() -> None:
    a = [row(f"s{i}", i % 3, 0, 0, 10) for i in range(20)]
    out = wer.paired_bootstrap_difference(a, list(reversed(a)), n_resamples=500)
    assert out["difference"] == 0.0
    # Every resample gives 0: the same sentences cannot show the systems equal to the point.
    assert out["ci_low"] < 0.0 < out["ci_high"] and out["ci_method"] == "newcombe"
    assert not out["excludes_zero"]


def test_paired_difference_of_two_error_free_systems_is_not_zero_wide() -> None:
    a = [row(f"s{i}", 0, 0, 0, 10) for i in range(6)]
    out = wer.paired_bootstrap_difference(a, a, n_resamples=500)
    bound = wer.wer_interval([0] * 6, [10] * 6).high
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((-bound, bound))


def test_paired_difference_sees_a_consistent_gap() -> None:
    # b makes one more error than a on every sentence: the difference is -10 points, and
    # every paired resample says so; the counts still bound what the sample can rule out.
    a = [row(f"s{i}", i % 4, 0, 0, 10) for i in range(30)]
    b = [row(f"s{i}", i % 4 + 1, 0, 0, 10) for i in range(30)]
    out = wer.paired_bootstrap_difference(a, b, n_resamples=1000, seed=5)
    assert out["difference"] == pytest.approx(-10.0)
    assert out["ci_low"] < -10.0 < out["ci_high"] < 0.0
    assert out["excludes_zero"]


def test_paired_difference_with_spread_is_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(4)
    a = [row(f"s{i}", int(rng.integers(0, 3)), 0, 0, 10) for i in range(40)]
    b = [row(f"s{i}", int(rng.integers(0, 4)), 0, 0, 10) for i in range(40)]
    out = wer.paired_bootstrap_difference(a, b, n_resamples=1000, seed=5)
    assert out["ci_method"] == "bootstrap"
    assert out["ci_low"] < out["difference"] < out["ci_high"]


def test_paired_difference_names_ids_that_do_not_match() -> None:
    a = [row("s1", 0, 0, 0, 5), row("s2", 0, 0, 0, 5)]
    b = [row("s1", 0, 0, 0, 5), row("s3", 0, 0, 0, 5)]
    with pytest.raises(wer.TranscriptError, match="only in a: s2; only in b: s3"):
        wer.paired_bootstrap_difference(a, b, n_resamples=10)


def test_paired_difference_rejects_duplicate_ids() -> None:
    a = [row("s1", 0, 0, 0, 5), row("s1", 0, 0, 0, 5)]
    with pytest.raises(wer.TranscriptError, match="duplicate sample_id.*s1"):
        wer.paired_bootstrap_difference(a, a, n_resamples=10)


# --- files and CLI --------------------------------------------------------------------


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_cli_score_writes_wer_json_with_sidecar_meta(tmp_path) -> None:
    t = tmp_path / "transcripts.jsonl"
    write_jsonl(t, [row("a", 1, 0, 0, 4), row("b", 0, 0, 0, 6)])
    (tmp_path / "transcripts.meta.json").write_text(json.dumps({"model": "tiny.en"}))
    out = tmp_path / "wer.json"
    rc = wer.main(["score", "--transcripts", str(t), "--out", str(out), "--n-resamples", "100"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["wer"] == pytest.approx(10.0)
    assert data["asr"] == {"model": "tiny.en"}
    assert data["sample_ids"] == ["a", "b"]


def test_cli_score_empty_transcripts_is_an_error_naming_the_file(tmp_path, capsys) -> None:
    # Once "WER nan ± nan % over 0 sentences" with exit 0: a WER of nothing is no number.
    t = tmp_path / "transcripts.jsonl"
    t.write_text("")
    out = tmp_path / "wer.json"
    assert wer.main(["score", "--transcripts", str(t), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {t}: no sentences" in err and "nan" not in err and not out.exists()
    write_jsonl(t, [row("s1", 0, 0, 0, 0)])  # rows, but no reference word to score
    assert wer.main(["score", "--transcripts", str(t), "--out", str(out)]) == 2


def test_nan_is_written_as_null_not_nan(tmp_path) -> None:
    out = tmp_path / "wer.json"
    write_finite_json(out, {"wer": float("nan"), "by": [{"x": float("inf")}, 1.5]})
    assert "NaN" not in out.read_text() and "Infinity" not in out.read_text()
    assert json.loads(out.read_text()) == {"wer": None, "by": [{"x": None}, 1.5]}


def test_cli_compare_and_bad_line_message(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(a, [row("s1", 0, 0, 0, 5), row("s2", 1, 0, 0, 5)])
    write_jsonl(b, [row("s1", 1, 0, 0, 5), row("s2", 1, 0, 0, 5)])
    out = tmp_path / "diff.json"
    rc = wer.main(["compare", "--a", str(a), "--b", str(b), "--out", str(out)])
    assert rc == 0
    assert json.loads(out.read_text())["difference"] == pytest.approx(-10.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sample_id": "x"}) + "\n")
    rc = wer.main(["score", "--transcripts", str(bad), "--out", str(tmp_path / "w.json")])
    assert rc == 2
    assert f"{bad}:1: lacks field(s) reference" in capsys.readouterr().err
