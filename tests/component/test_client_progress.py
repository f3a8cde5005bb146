"""Progress during a point and the end-of-point line: hand-made figures, exact text."""

from __future__ import annotations

import io
from pathlib import Path

from tests.support.scripted_server import Script, ScriptedServer
from thetalker.client import (
    BenchOptions,
    LineReporter,
    Progress,
    TtyReporter,
    format_point_end,
    format_progress,
    run_benchmark,
)
from thetalker.client.progress import Tally, point_label
from thetalker.data.prompts import Prompt


def test_progress_line_has_a_unit_on_every_figure():
    p = Progress("c8", 120, 300, 2, 41.2, 61.8)
    assert format_progress(p) == "c8: 120/300 done, 2 errors, 41 s elapsed, ~62 s left"
    one = Progress("0.5 req/s", 0, 10, 1, 3.0, None)
    assert format_progress(one) == "0.5 req/s: 0/10 done, 1 error, 3 s elapsed, time left unknown"


def test_tally_estimates_time_left_from_the_pace_so_far():
    tally = Tally(point_label(8, None), total=300, t_start=100.0)
    assert tally.snapshot(now=100.0).left_s is None  # nothing done: no pace yet
    for ok in [True] * 118 + [False] * 2:
        tally.add(ok)
    p = tally.snapshot(now=140.0)
    # 120 done in 40 s: 180 left at 3 per second
    assert p == Progress("c8", 120, 300, 2, 40.0, 60.0)
    assert point_label(1, 2.5) == "2.5 req/s"


def test_line_and_tty_reporters():
    lines: list[str] = []
    LineReporter(lines.append, interval_s=1.0)(Progress("c1", 1, 2, 0, 1.0, 1.0))
    assert lines == ["c1: 1/2 done, 0 errors, 1 s elapsed, ~1 s left"]
    stream = io.StringIO()
    bar = TtyReporter(stream, prefix="x: ", width=4)
    bar(Progress("c1", 1, 2, 0, 1.0, 1.0))
    bar(Progress("c1", 2, 2, 0, 2.0, 0.0))  # the last one ends the line
    assert stream.getvalue() == (
        "\rx: [##..] c1: 1/2 done, 0 errors, 1 s elapsed, ~1 s left "
        "\rx: [####] c1: 2/2 done, 0 errors, 2 s elapsed, ~0 s left \n"
    )


def test_point_end_line_has_a_unit_on_every_figure():
    summary = {
        "concurrency": 8, "request_rate": None, "n_ok": 299, "n_scored": 300,
        "error_rate": 1 / 300, "rtfx": 20.24, "ttfa_s": {"p50": 0.1821},
        "continuity_pct": 100.0,
    }  # fmt: skip
    assert format_point_end(summary) == (
        "c8: 299/300 ok, error rate 0.3 %, RTFx 20.2, TTFA p50 0.182 s, continuity 100.0 %"
    )
    nothing = {
        "concurrency": None, "request_rate": 4.0, "n_ok": 0, "n_scored": 3, "error_rate": 1.0,
        "rtfx": None, "ttfa_s": {"p50": None}, "continuity_pct": 0.0,
    }  # fmt: skip
    assert format_point_end(nothing) == "4 req/s: 0/3 ok, error rate 100.0 %, continuity 0.0 %"


def test_the_last_progress_line_counts_the_failed_records_as_the_result_does(
    scripted_server: ScriptedServer, tmp_path: Path
):
    # Failures only the record finds (a half sample at the end, a bad SSE event...) were
    # missed: "4/4 done, 0 errors", then "2/4 ok". The last line counts failed records.
    scripted_server.add_script("odd", Script(chunks=((0, 4801),)))
    scripted_server.add_script("odder", Script(chunks=((0, 4800), (0, 4801))))
    texts = ["odd a", "odder b", "fine c", "fine d"]
    prompts = [Prompt(f"id{i}", t) for i, t in enumerate(texts)]
    seen: list[Progress] = []
    opts = BenchOptions(base_url=scripted_server.base_url, requests=4, warmup=0, sample_rate=24000)
    summary = run_benchmark(opts, prompts, tmp_path, progress=seen.append)
    assert (summary["n_ok"], summary["n_scored"]) == (2, 4)
    last = seen[-1]
    assert (last.done, last.total, last.errors) == (4, 4, 2)
    assert format_progress(last).startswith("c1: 4/4 done, 2 errors")
