"""points.csv, tables and figures from hand-built records: every number traced to metrics.py."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from tests.support.records import make_record, with_audio, write_point
from thetalker import metrics
from thetalker.data.record_writes import append_record
from thetalker.metrics import point_cost, summarize_point
from thetalker.report import capacity as report_capacity
from thetalker.report import common, figures, points, tables
from thetalker.report.settings import ReportSettings

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def runs(tmp_path: Path) -> dict[tuple[str, str, int], list[dict]]:
    """Two systems x one model x concurrency 1 and 2; system b drops continuity at c2."""
    data = {
        ("a", "m", 1): [make_record(0, warmup=True)] + [make_record(i) for i in range(1, 5)],
        ("a", "m", 2): [make_record(i) for i in range(6)],
        ("b", "m", 1): [make_record(i) for i in range(4)],
        ("b", "m", 2): [make_record(i, continuous=i % 2 == 0) for i in range(5)]
        + [make_record(5, ok=False)],
    }
    for (system, model, c), records in data.items():
        write_point(tmp_path, system, model, c, records)
    return data


def _points_csv(tmp_path: Path) -> Path:
    out = tmp_path / "points.csv"
    paths = sorted((tmp_path / "runs").rglob("records.jsonl"))
    assert points.main(["--out", str(out), *map(str, paths)]) == 0
    return out


def test_points_csv_has_one_row_per_point_with_every_summary_figure(tmp_path, runs):
    out = _points_csv(tmp_path)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    by_key = {(r["system"], r["model"], int(r["concurrency"])): r for r in rows}
    for key, records in runs.items():
        expected = summarize_point(records, concurrency=key[2])
        row = by_key[key]
        assert float(row["rtfx"]) == pytest.approx(expected["rtfx"])
        assert float(row["ttfa_s_p50"]) == pytest.approx(expected["ttfa_s"]["p50"])
        assert int(row["n_failed"]) == expected["n_failed"]
        assert float(row["continuity_pct"]) == pytest.approx(expected["continuity_pct"])
    # The warmup record is not scored.
    assert int(by_key[("a", "m", 1)]["n_scored"]) == 4


def test_point_key_rejects_a_path_outside_the_layout(tmp_path):
    with pytest.raises(points.PointPathError, match="records.jsonl"):
        points.point_key(tmp_path / "records.jsonl")


def _settings(**changes: object) -> str:
    """The report settings of these tests (as rules/report.smk passes them: JSON)."""
    settings = ReportSettings(
        models=("m",),
        systems=("a", "b"),
        headline=2,
        ratio=("a", "b"),
        gpu_hour_usd=2.99,
        min_continuity_pct=95.0,
        ttfa_slo_s=None,
        grid=(1, 2),
        slo={"min_continuity_pct": 95.0, "ttfa_slo_s": None},  # the other figures' defaults
    )
    return dataclasses.replace(settings, **changes).to_json()  # type: ignore[arg-type]


def _tables(tmp_path: Path, out: Path, **settings: object) -> dict[str, Path]:
    md = {name: tmp_path / f"{name}.md" for name in ("throughput", "continuity", "ttfa", "cost")}
    argv = ["--points", str(out), "--settings", _settings(**settings)]
    for name, path in md.items():
        argv += [f"--{name}", str(path)]
    assert tables.main(argv) == 0
    return md


def test_tables_hold_the_recomputed_numbers(tmp_path, runs):
    md = _tables(tmp_path, _points_csv(tmp_path))
    a2, b2 = runs[("a", "m", 2)], runs[("b", "m", 2)]
    # Every figure and interval recomputed here from the records alone.
    ra, rb = metrics.rtfx_bootstrap(a2), metrics.rtfx_bootstrap(b2)
    ratio = metrics.rtfx_ratio_interval([a2], [b2])
    assert ra.value == pytest.approx(summarize_point(a2)["rtfx"])
    throughput = md["throughput"].read_text()
    ratio_cell = f"{ratio.value:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]"
    ratio_cell += "" if ratio.excludes(1.0) else " †"
    row = (
        f"| m | {ra.value:.1f} ± {ra.half_width:.1f} | {rb.value:.1f} ± {rb.half_width:.1f} "
        f"(1/6 failed) | {ratio_cell} |"
    )
    assert row in throughput
    continuity = md["continuity"].read_text()
    # b at c2: 3 of 6 scored requests continuous (one failed): 50.0%, Wilson [18.8, 81.2].
    w = metrics.wilson_pct(3, 6)
    assert f"| m | b | 100.0 [{metrics.wilson_pct(4, 4).low:.1f}, 100.0] | " in continuity
    assert f"50.0 [{w.low:.1f}, {w.high:.1f}] (1/6 failed) |" in continuity
    assert round(w.low, 1) == 18.8
    # the thresholds table: b at c2, the two underruns (0.15 s and 0.4 s) against 50/100/200 ms
    at = [metrics.continuity_interval(b2, t) for t in (0.05, 0.1, 0.2)]
    assert [c.value for c in at] == pytest.approx([50.0, 50.0, 100 * 4 / 6])
    cells = " | ".join(f"{c.value:.1f} [{c.low:.1f}, {c.high:.1f}]" for c in at)
    assert f"| m | b | c2 | {cells} | 1/6 |" in continuity
    ttfa = md["ttfa"].read_text()
    ok = [r for r in a2 if r["ok"] and not r["warmup"]]
    p50 = metrics.percentile_interval([r["ttfa_s"] for r in ok], 50)
    perceived = metrics.percentile_interval([metrics.perceived_first_audio_s(r) for r in ok], 90)
    assert f"| m | a | c2 | {p50.value:.3f} [{p50.low:.3f}, {p50.high:.3f}] |" in ttfa
    # ... then audible % (every stream here audible) and the failures
    cell = f"{perceived.value:.3f} [{perceived.low:.3f}, {perceived.high:.3f}]"
    assert f"{cell} | 100.0 | 0/6 |" in ttfa
    cost = md["cost"].read_text()
    # a is priced; b at 50% continuity is not.
    assert f"| m | {point_cost(summarize_point(a2), 2.99):.2f} | n/a (1/6 failed) |" in cost


def test_a_config_that_names_no_ratio_gets_no_ratio_column(tmp_path, runs):
    # report.ratio is optional: a config measuring one endpoint need not invent a second.
    assert ReportSettings.parse(_settings(ratio=None)).ratio is None
    md = _tables(tmp_path, _points_csv(tmp_path), ratio=None)
    throughput = md["throughput"].read_text()
    header = next(line for line in throughput.splitlines() if line.startswith("| model"))
    assert header == "| model | a | b |" and "ratio" not in throughput
    columns = (tmp_path / "throughput.csv").read_text().splitlines()[0].split(",")
    assert not [c for c in columns if c.startswith("ratio")]


def test_every_table_has_a_csv_with_the_same_numbers(tmp_path, runs):
    md = _tables(tmp_path, _points_csv(tmp_path))
    for path in md.values():
        assert path.with_suffix(".csv").is_file(), path
    throughput = list(csv.DictReader(md["throughput"].with_suffix(".csv").open()))
    ra = metrics.rtfx_bootstrap(runs[("a", "m", 2)])
    assert float(throughput[0]["a_rtfx"]) == pytest.approx(ra.value)
    assert float(throughput[0]["a_rtfx_low"]) == pytest.approx(ra.low)
    assert throughput[0]["a_rtfx_method"] == "bootstrap"
    assert int(float(throughput[0]["b_n_failed"])) == 1
    thresholds = list(csv.DictReader((tmp_path / "continuity_thresholds.csv").open()))
    b2 = next(r for r in thresholds if r["system"] == "b" and r["point"] == "c2")
    assert float(b2["continuity_pct_0.2s"]) == pytest.approx(100 * 4 / 6)


def test_a_ratio_within_noise_is_marked(tmp_path):
    # a and b identical: the ratio is 1.00x and its interval holds 1.0
    for system in ("a", "b"):
        recs = [with_audio(make_record(i, continuous=True), 1.5 + 0.2 * i) for i in range(6)]
        write_point(tmp_path, system, "m", 2, recs)
    md = _tables(tmp_path, _points_csv(tmp_path))
    line = next(x for x in md["throughput"].read_text().splitlines() if x.startswith("| m |"))
    assert "1.00x [" in line and line.endswith("† |")


def test_repeats_give_the_rounds_interval_and_a_paired_ratio(tmp_path):
    rounds = {"a": [2.0, 2.2, 2.1], "b": [1.0, 1.05, 1.0]}
    for system, audio in rounds.items():
        for k, seconds in enumerate(audio, start=1):
            path = tmp_path / "runs" / system / "m" / "c2" / f"round{k}" / "records.jsonl"
            path.parent.mkdir(parents=True)
            with path.open("w", encoding="utf-8") as fh:
                for i in range(4):
                    append_record(fh, with_audio(make_record(i), seconds))
    out = _points_csv(tmp_path)
    rows = {r["system"]: r for r in csv.DictReader(out.open())}
    assert rows["a"]["rtfx_method"] == "repeats-t" and rows["a"]["rounds"] == "3"
    # each round: 4 x seconds of audio in the window 0.0 .. 0.3 + 0.5 = 0.8 s
    expected = metrics.repeats_interval([4 * s / 0.8 for s in rounds["a"]])
    assert float(rows["a"]["rtfx"]) == pytest.approx(expected.value)
    assert float(rows["a"]["rtfx_low"]) == pytest.approx(expected.low)
    md = _tables(tmp_path, out)
    paired = metrics.paired_interval(
        [4 * s / 0.8 for s in rounds["a"]], [4 * s / 0.8 for s in rounds["b"]], ratio=True
    )
    assert (
        f"{paired.value:.2f}x [{paired.low:.2f}, {paired.high:.2f}]" in md["throughput"].read_text()
    )


def test_open_loop_points_get_their_own_columns(tmp_path):
    write_point(tmp_path, "a", "m", 1, [make_record(i) for i in range(3)])
    path = tmp_path / "runs" / "a" / "m" / "r0.5" / "records.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(3):
            append_record(fh, make_record(i))
    rows = list(csv.DictReader(_points_csv(tmp_path).open()))
    assert {r["point"] for r in rows} == {"c1", "r0.5"}
    assert next(r for r in rows if r["point"] == "r0.5")["request_rate"] == "0.5"
    points_df = common.load_points(tmp_path / "points.csv")
    assert common.point_labels(points_df) == ["c1", "r0.5"]
    assert "| m | a | 100.0 [" in tables.continuity_table(points_df, ["m"], ["a"])


def test_capacity_table_and_figure(tmp_path, runs):
    out = _points_csv(tmp_path)
    table, figure = tmp_path / "capacity.md", tmp_path / "capacity.png"
    argv = ["--points", str(out), "--table", str(table), "--figure", str(figure)]
    assert report_capacity.main([*argv, "--settings", _settings()]) == 0
    text = table.read_text()
    # a holds 95% at both points: at least 2; b falls to 50% at c2: 1 stream.
    a2, b1 = summarize_point(runs[("a", "m", 2)]), summarize_point(runs[("b", "m", 1)])
    cost_a2 = f"{point_cost(a2, 2.99):.2f}"
    assert "| m | a | at least 2 |" in text and f"| {cost_a2} | {cost_a2} |" in text
    assert "| m | b | 1 |" in text and f"| {point_cost(b1, 2.99):.2f} | n/a |" in text
    rows = list(csv.DictReader(table.with_suffix(".csv").open()))
    assert [r["verdict"] for r in rows] == ["at_least", "found"]
    assert figure.read_bytes()[:8] == PNG_MAGIC
    # a TTFA limit below every point's p90: never
    assert report_capacity.main([*argv, "--settings", _settings(slo={"ttfa_slo_s": 0.001})]) == 0
    assert "| m | a | never (fails at 1) |" in table.read_text()


def test_tables_name_a_missing_column(tmp_path):
    bad = tmp_path / "points.csv"
    bad.write_text("system,model,concurrency\na,m,1\n")
    with pytest.raises(common.PointsError, match="rtfx"):
        common.load_points(bad)


def test_figures_are_png_files(tmp_path, runs):
    out = _points_csv(tmp_path)
    names = ("throughput", "continuity", "ttfa", "cost", "continuity-thresholds", "perceived")
    png = {name: tmp_path / f"{name}.png" for name in names}
    argv = ["--points", str(out), "--settings", _settings()]
    for name, path in png.items():
        argv += [f"--{name}", str(path)]
    assert figures.main(argv) == 0
    for path in png.values():
        assert path.read_bytes()[:8] == PNG_MAGIC, path


def test_a_report_file_that_cannot_be_written_is_one_line_naming_it(tmp_path, runs, capsys):
    # The rule: every report file goes through report.output (whole or not at all, named).
    out = _points_csv(tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    argv = ["--points", str(out), "--settings", _settings()]
    for name in ("throughput", "continuity", "ttfa", "cost"):
        argv += [f"--{name}", str(blocked / f"{name}.md")]
    assert tables.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {blocked / 'throughput.md'}: cannot write: Not a directory"]
    assert figures.main([a.replace(".md", ".png") for a in argv]) == 1
    assert capsys.readouterr().err.startswith(f"error: {blocked / 'throughput.png'}: cannot write")


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path):
    from thetalker.report.output import write_output

    path = tmp_path / "t.md"
    path.write_text("old and whole")

    def cut_short(tmp):
        tmp.write_text("half a ta")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_output(path, cut_short)
    assert path.read_text() == "old and whole" and [p.name for p in tmp_path.iterdir()] == ["t.md"]


def test_report_settings_parse_json_or_a_file_and_name_a_bad_field(tmp_path):
    from thetalker.report.settings import ReportSettingsError

    text = _settings()
    assert ReportSettings.parse(text).to_json() == text
    path = tmp_path / "settings.json"
    path.write_text(text)
    assert ReportSettings.parse(str(path)) == ReportSettings.parse(text)
    path.write_text(text.replace('"grid"', '"grids"'))
    with pytest.raises(ReportSettingsError, match=r"settings\.json: .*missing grid"):
        ReportSettings.parse(str(path))


def test_captions_name_the_onset_rule_the_points_used(tmp_path, capsys):
    import pandas as pd

    default = metrics.DEFAULT_ONSET.label()
    assert common.onset_words(pd.DataFrame({"audible_onset_rule": [default]})) == (
        "the -45 dBFS onset"
    )
    assert common.onset_words(pd.DataFrame({"x": [1]})) == "the -45 dBFS onset"
    at_30 = pd.DataFrame({"audible_onset_rule": ["abs-30dBFS/20ms/10ms/2", None]})
    words = common.onset_words(at_30, detail=True)
    assert words.startswith("the onset by abs-30dBFS/20ms/10ms/2 (threshold dBFS RMS after")
    assert "-45 dBFS" not in words
    # A point whose records used two rules: its row says so, and points warns naming them.
    records = [make_record(i) for i in range(3)]
    for i, rec in enumerate(records):
        rec.update(audible=True, audible_onset_rule=default if i else "abs-30dBFS/20ms/10ms/2")
    path = write_point(tmp_path, "a", "m", 1, records)
    row = points.point_row(path)
    assert row["audible_onset_rule"] == f"mixed: abs-30dBFS/20ms/10ms/2; {default}"
    err = capsys.readouterr().err
    assert err == (
        f"warning: {path}: records measured with 2 audible onset rules: "
        f"abs-30dBFS/20ms/10ms/2 (1 record), {default} (2 records); its audible figures "
        "pool them\n"
    )


def test_a_table_cell_is_text_never_markup_or_a_new_row():
    # Issue 45: what a server or a config wrote lands in a table as that text.
    from thetalker.report.common import markdown_table
    from thetalker.report.markdown import md_cell

    hostile = "<img src=x onerror=alert(1)> & a|b\nc"
    assert md_cell(hostile) == "&lt;img src=x onerror=alert(1)&gt; &amp; a\\|b c"
    assert md_cell("a\\|b") == "a\\|b"  # already escaped: left alone
    table = markdown_table(["system", "RTFx"], [[hostile, "1.0"]])
    assert table.splitlines()[2] == f"| {md_cell(hostile)} | 1.0 |" and "<" not in table


def test_a_point_measured_on_a_busy_machine_is_named_in_the_tables(tmp_path, runs):
    # Issue 45: two engines on one CPU. The share of the machine's CPU other processes took
    # (provenance.json's resources.other_cpu_pct) reaches points.csv, and every table marks
    # a point at or above BUSY_OTHER_CPU_PCT; below it, or with no figure, nothing is said.
    from thetalker.data.record_writes import write_json
    from thetalker.pipeline.machine_load import BUSY_OTHER_CPU_PCT

    busy, calm = BUSY_OTHER_CPU_PCT + 40.0, BUSY_OTHER_CPU_PCT - 15.0
    for system, pct in (("a", busy), ("b", calm)):
        path = tmp_path / "runs" / system / "m" / "c2" / "provenance.json"
        write_json(path, {"resources": {"source": "proc", "other_cpu_pct": pct}})
    out = _points_csv(tmp_path)
    frame = common.load_points(out).set_index(["system", "point"])["other_cpu_pct"]
    assert frame[("a", "c2")] == busy and frame[("b", "c2")] == calm
    assert frame.isna().sum() == 2  # c1 of each: no provenance.json
    md = _tables(tmp_path, out)
    mark = f"(busy machine: {busy:.0f}% CPU by others)"
    for name in ("throughput", "continuity", "cost"):
        text = md[name].read_text()
        assert text.count(mark) == 1 and "busy machine" not in text.replace(mark, ""), name


def test_a_runs_note_opens_every_table_before_its_caption(tmp_path, runs):
    """report.note (the engine configs: random weights on a CPU) is the first line of each
    table the run writes; without one, a table opens with its own caption as before."""
    note = "Random weights on 2 CPU cores: serving behaviour, not speed on a GPU."
    out = _points_csv(tmp_path)
    (tmp_path / "plain").mkdir()
    (tmp_path / "noted").mkdir()
    plain = _tables(tmp_path / "plain", out)
    noted = _tables(tmp_path / "noted", out, note=note)
    for name, path in noted.items():
        text = path.read_text()
        assert text.startswith(f"{note}\n\n"), name
        assert text[len(note) + 2 :] == plain[name].read_text()
        assert not plain[name].read_text().startswith(note)
