"""capacity.slo on what the listener hears (off by default): mean DNSMOS OVRL and the share
of streams with an audio defect, read by the capacity report beside each point's records,
moving the capacity where the figure moves; the bench job's live search never sees them."""

from __future__ import annotations

import copy
import json

import pandas as pd
import yaml

from tests.support.config_checks import parse_time_error
from tests.support.paths import REPO
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.capacity import AT_LEAST, FOUND, ServiceLevel, find_capacity, passes
from thetalker.report.capacity import capacity_of, point_listened


def _summary(**kw) -> dict:
    row = {"n_scored": 20, "n_failed": 0, "n_inaudible": 0, "continuity_pct": 100.0}
    return {**row, "ttfa_audible_s_p95": 0.4, **kw}


def test_ovrl_and_unhealthy_share_are_judged_where_they_were_measured():
    level = ServiceLevel(min_dnsmos_ovrl=3.0, max_unhealthy_pct=10.0)
    assert level.broken(_summary(dnsmos_ovrl=2.9, unhealthy_pct=5.0)) == ["DNSMOS OVRL"]
    assert level.broken(_summary(dnsmos_ovrl=3.0, unhealthy_pct=15.0)) == ["unhealthy streams %"]
    assert level.holds(_summary(dnsmos_ovrl=3.0, unhealthy_pct=10.0))  # both inclusive
    # not measured (a search point) or the live search: judged on the other figures
    assert level.holds(_summary()) and level.holds(_summary(dnsmos_ovrl=1.5), live=True)
    assert "DNSMOS OVRL >= 3" in level.describe()
    assert "audio defect <= 10%" in level.describe()


def _point(root, c: int, ovrl: float, defects: int) -> dict:
    folder = root / f"c{c}"
    folder.mkdir()
    (folder / "dnsmos.json").write_text(
        json.dumps({"available": True, "streams": [{"ovrl": ovrl}, {"ovrl": ovrl}]})
    )
    streams = [{"ok": True, "defects": ["clicks"] if k < defects else []} for k in range(4)]
    (folder / "health.json").write_text(json.dumps({"streams": streams}))
    return _summary(
        model="m", system="s", point=f"c{c}", concurrency=c, records=str(folder / "records.jsonl")
    )


def test_an_ovrl_slo_moves_the_capacity_where_ovrl_falls(tmp_path):
    # By hand: OVRL 3.3, 3.2, 2.8, 2.5 at 1, 2, 4, 8 streams; every other figure holds.
    rows = [_point(tmp_path, c, o, 0) for c, o in [(1, 3.3), (2, 3.2), (4, 2.8), (8, 2.5)]]
    points = pd.DataFrame(rows)
    plain, _ = capacity_of(points, "m", "s", ServiceLevel())
    assert (plain.load, plain.verdict) == (8, AT_LEAST)
    gated, loads = capacity_of(points, "m", "s", ServiceLevel(min_dnsmos_ovrl=3.0))
    assert (gated.load, gated.verdict, gated.first_failing) == (2, FOUND, 4)
    assert loads[4]["dnsmos_ovrl"] == 2.8


def test_the_unhealthy_share_is_read_from_health_json(tmp_path):
    summary = _point(tmp_path, 2, 3.1, defects=1)
    assert point_listened(summary) == {"dnsmos_ovrl": 3.1, "unhealthy_pct": 25.0}
    level = ServiceLevel(max_unhealthy_pct=20.0)
    cap = find_capacity(passes({2: {**summary, **point_listened(summary)}}, level))
    assert cap.load is None  # the only load fails
    (tmp_path / "c2" / "dnsmos.json").write_text(json.dumps({"available": False}))
    assert point_listened(summary)["dnsmos_ovrl"] is None  # not installed: not measured


def _default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def test_the_slo_needs_each_loads_audio_and_never_reaches_the_bench_job(tmp_path):
    config = _default_config()
    config["capacity"]["slo"] = {"min_dnsmos_ovrl": 3.0}
    config["save_audio"] = False
    error = parse_time_error(config, REPO)
    assert error and "capacity.slo.min_dnsmos_ovrl: needs each load's audio" in error
    config["save_audio"] = True
    assert parse_time_error(copy.deepcopy(config), REPO) is None
    # The live search cannot hear the audio: the job's level leaves it out, so setting it
    # changes no bench job's params (nor does leaving it off).
    from snakemake.utils import validate

    validate(config, str(REPO / "config" / "schema.yaml"))
    assert "min_dnsmos_ovrl" not in wfc.capacity_search(config)["slo"]
    assert wfc.service_level_spec(config)["min_dnsmos_ovrl"] == 3.0
    assert "max_unhealthy_pct" not in wfc.service_level_spec(config)


def test_an_ovrl_limit_that_no_load_measured_is_named_not_judged(tmp_path):
    """DNSMOS not installed: every point's OVRL is None and passes, so capacity.md says the
    limit judged nothing instead of holding it in silence."""
    from thetalker.report.capacity import capacity_rows, capacity_table, not_judged

    def capacity_table_of(points: pd.DataFrame) -> str:
        rows = capacity_rows(points, ["m"], ["s"], level, 1, 2.0)
        return capacity_table(rows, points, level, 1, 2.0)

    rows = [_point(tmp_path, c, 3.3, 0) for c in (1, 2)]
    for c in (1, 2):
        (tmp_path / f"c{c}" / "dnsmos.json").write_text(json.dumps({"available": False}))
    points = pd.DataFrame(rows)
    level = ServiceLevel(min_dnsmos_ovrl=3.0, max_unhealthy_pct=10.0)
    cap, loads = capacity_of(points, "m", "s", level)
    assert not_judged(level, cap, loads) == ["DNSMOS OVRL"]  # health.json was read: judged
    table = capacity_table_of(points)
    assert "not judged (measured at no load)" in table and "| DNSMOS OVRL |" in table
    measured = [_point(tmp_path, 4, 3.3, 0)]
    cap, loads = capacity_of(pd.DataFrame([*rows, *measured]), "m", "s", level)
    assert cap.load == 4 and not_judged(level, cap, loads) == []
    assert "not judged" not in capacity_table_of(pd.DataFrame(measured))


def test_a_capacity_decided_at_a_point_without_the_figure_names_it(tmp_path):
    """A search point (6 streams, between the grid's 4 and 8) has no saved audio: where it
    decides the capacity, the OVRL limit did not judge it there, and the table says so."""
    from thetalker.report.capacity import not_judged

    rows = [_point(tmp_path, c, o, 0) for c, o in [(1, 3.3), (4, 3.2), (8, 2.5)]]
    search = _summary(model="m", system="s", point="c6", concurrency=6)  # no files beside it
    level = ServiceLevel(min_dnsmos_ovrl=3.0)
    cap, loads = capacity_of(pd.DataFrame([*rows, search]), "m", "s", level)
    assert (cap.load, cap.first_failing) == (6, 8)  # held at 6 for want of OVRL
    assert not_judged(level, cap, loads) == ["DNSMOS OVRL at 6"]
