"""The bench job's `--records` outputs are matched to its load points by the point each
path names, not by their order alone (issue 37): a list in another order than the job's
points (an `expand()` that changed its order) is refused before any server starts, so c1's
records can never land in c8's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench_jobs import job, records_files
from thetalker.pipeline.job import BenchJobError
from thetalker.pipeline.serve_and_sweep import run_job


def _never_launched(_spec):
    raise AssertionError("no server may start for a refused records list")


def test_records_in_the_jobs_order_are_taken(tmp_path: Path):
    spec = job(tmp_path, concurrency=(1, 2), requests={1: 1, 2: 1}, repeats=2)
    files = records_files(tmp_path / "s" / "m", spec)
    assert [f.parent.relative_to(tmp_path / "s" / "m").as_posix() for f in files] == [
        "c1/round1", "c1/round2", "c2/round1", "c2/round2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("order", "said"),
    [
        ([1, 0, 2, 3], "its folder says c1/round2, but it is given the load c1/round1"),
        ([2, 3, 0, 1], "its folder says c2/round1, but it is given the load c1/round1"),
    ],
)
def test_records_out_of_the_jobs_order_are_refused(tmp_path: Path, order: list[int], said: str):
    spec = job(tmp_path, concurrency=(1, 2), requests={1: 1, 2: 1}, repeats=2)
    files = records_files(tmp_path / "s" / "m", spec)
    with pytest.raises(BenchJobError, match=said):
        run_job(spec, [files[k] for k in order], tmp_path / "server.log", launch=_never_launched)
    assert not (tmp_path / "server.log").exists()


def test_a_single_run_refuses_a_round_folder_and_a_swapped_point(tmp_path: Path):
    spec = job(tmp_path, concurrency=(1, 8), requests={1: 1, 8: 8})
    run = tmp_path / "s" / "m"
    swapped = [run / "c8" / "records.jsonl", run / "c1" / "records.jsonl"]
    with pytest.raises(BenchJobError, match="its folder says c8, but it is given the load c1"):
        run_job(spec, swapped, tmp_path / "server.log", launch=_never_launched)
    rounds = [run / "c1" / "round1" / "records.jsonl", run / "c8" / "records.jsonl"]
    with pytest.raises(BenchJobError, match="says c1/round1, but it is given the load c1 "):
        run_job(spec, rounds, tmp_path / "server.log", launch=_never_launched)
