"""What the listener hears, in the workflow: the tiny real run of the embedded default (the
`quality_run` fixture, once per session) writes health.md and naturalness.md for both
whole-text systems and a listening pack per quality point, bundled in the report as a page
of players; capacity.slo's listening figures need each load's audio."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.workflow_copy import smk_offline

pytestmark = pytest.mark.slow

SYSTEMS = ("local", "local-stock")


def test_health_and_naturalness_tables_have_a_row_per_quality_point(quality_run):
    workdir, _ = quality_run
    health = (workdir / "results" / "tables" / "health.md").read_text()
    naturalness = (workdir / "results" / "tables" / "naturalness.md").read_text()
    try:
        import speechmos  # noqa: F401

        installed = True
    except ImportError:
        installed = False
    for system in SYSTEMS:
        # 4 quality sentences, each judged; the Wilson interval of 4 of 4 is [51, 100].
        assert f"| {system} | piper-joe | quality | c2 | 4 | 100 [51, 100] |" in health
        row = re.search(rf"\| {system} \| piper-joe \| quality \| c2 \| 4 \| (.*) \|", naturalness)
        assert row, naturalness
        if installed:
            # SIG, BAK, OVRL: each a mean with its interval, on the 1-5 scale.
            means = [float(m) for m in re.findall(r"(\d\.\d\d) \[", row.group(1))]
            assert len(means) == 3 and all(1.0 <= m <= 5.0 for m in means), row.group(1)
        else:
            assert "not installed" in row.group(1)
    assert (workdir / "results" / "tables" / "health.csv").exists()


def test_a_listening_pack_per_quality_point_in_the_report(quality_run):
    workdir, config = quality_run
    for system in SYSTEMS:
        point = workdir / "results" / "quality" / system / "piper-joe" / "c2"
        pack = json.loads((point / "listen" / "pack.json").read_text())
        page = (point / "listen.html").read_text()
        # A player per pick, and a second for a stream the pausing player stalled on.
        stalled = [p for p in pack["picks"] if p["stalled_file"]]
        assert page.count("<audio controls") == len(pack["picks"]) + len(stalled) > 0
        for pick in pack["picks"]:
            assert (point / "listen" / pick["file"]).stat().st_size > 44
        for pick in stalled:
            assert (point / "listen" / pick["stalled_file"]).stat().st_size > 44
    out = workdir / "results" / "report-listen.html"
    result = smk_offline(workdir, "--report", str(out), "--configfile", config)
    assert result.returncode == 0, result.stderr[-3000:]
    html = out.read_text(encoding="utf-8")
    # The page is bundled as an HTML result (shown in an iframe), the table beside it.
    assert re.search(r'"data_uri": "data:text/html;[^"]*filename=listen.html;', html)
    assert "health.md" in html and "naturalness.md" in html
