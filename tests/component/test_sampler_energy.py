"""Energy and CPU-seconds of a scored window (issue 50): the resource sampler against the
nvidia-smi stand-in (tests/standins/nvidia-smi) with a scripted power.draw, and points.csv's
machine-cost columns (thetalker.report.machine_cost) from the provenance it writes.

The draw is held constant within each phase (idle, then the point), so the trapezoid integral
is the draw times the window's seconds whatever the sampling times: the hand computation."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from thetalker.pipeline.gpu_power import parse_power_csv
from thetalker.pipeline.idle_power import measure_idle_power
from thetalker.pipeline.sampler import ResourceSampler
from thetalker.report.machine_cost import machine_cost_columns

STANDIN = Path(__file__).resolve().parents[1] / "standins" / "nvidia-smi"


@pytest.fixture
def gpus(tmp_path, monkeypatch) -> Path:
    """Two stand-in GPUs whose draw (W, each) the test writes to the returned file."""
    power = tmp_path / "power.txt"
    monkeypatch.setenv("STANDIN_GPUS", "2")
    monkeypatch.setenv("STANDIN_GPU_POWER_FILE", str(power))
    for name in ("STANDIN_GPU_PIDS", "STANDIN_GPU_STATE", "STANDIN_GPU_MIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return power


def _sampler() -> ResourceSampler:
    return ResourceSampler(
        pid=os.getpid(), interval_s=0.05, source="nvidia-smi", nvidia_smi=str(STANDIN)
    )


def _scored_point(samples: int = 3) -> dict:
    """A point's resources: the sampler marks a window of a few samples."""
    with _sampler() as sampler:
        sampler.mark("begin")
        n = sampler.result()["samples"]
        deadline = time.monotonic() + 60
        while sampler.result()["samples"] < n + samples:  # a wait, not a limit
            assert time.monotonic() < deadline
            time.sleep(0.02)
        sampler.mark("end")
    return sampler.result()


def _provenance(dir_: Path, resources: dict, idle: dict | None) -> Path:
    dir_.mkdir(parents=True)
    (dir_ / "provenance.json").write_text(json.dumps({"resources": resources, "idle_power": idle}))
    return dir_ / "records.jsonl"


def test_joules_and_watt_hours_against_a_hand_integral_idle_apart(gpus, tmp_path) -> None:
    gpus.write_text("50,30")  # idle: 50 + 30 = 80 W summed over the job's two GPUs
    idle = measure_idle_power(_sampler(), 0.3)
    # to the milliwatt: the draw is joules over seconds, each stated to the millionth, so
    # over a 0.3 s window the quotient carries a few millionths of rounding (80.000084 seen)
    assert idle["idle_w"] == pytest.approx(80.0, abs=1e-3)
    assert idle["power_note"] is None
    gpus.write_text("150,80")  # loaded: 230 W
    resources = _scored_point()
    assert resources["power_note"] is None
    scored = resources["scored"]
    seconds = scored["seconds"]
    assert seconds > 0
    assert scored["energy_j"] == pytest.approx(230.0 * seconds, abs=1e-3)
    # 12 s of audio and 3,000 characters delivered continuously in the window:
    # (230 - 80) W x T s above idle; / 12 s per audio-second; / 3600 / 3000 * 1e6 in Wh/Mchar.
    row = machine_cost_columns([_provenance(tmp_path / "c1", resources, idle)], 12.0, 3000.0)
    above = 150.0 * seconds
    assert row["gpu_idle_w"] == pytest.approx(80.0, abs=1e-3)
    assert row["gpu_energy_j"] == pytest.approx(above, abs=1e-3)
    assert row["j_per_audio_s"] == pytest.approx(above / 12.0, abs=1e-3)
    assert row["wh_per_million_chars"] == pytest.approx(above / 3600 / 3000 * 1e6, abs=1e-3)
    assert row["energy_note"] is None
    assert row["cpu_s_per_audio_s"] is None  # a GPU point: its cost is the energy


@pytest.mark.parametrize(
    ("setup", "note"),
    [
        ("n/a", "power.draw [N/A]"),
        ("mig", "MIG slice"),
        ("shared", "shared GPU: 1 other process"),
    ],
)
def test_no_power_says_why_and_makes_up_no_number(gpus, tmp_path, monkeypatch, setup, note):
    gpus.write_text("100")
    if setup == "n/a":
        gpus.unlink()  # the stand-in answers [N/A], as a GPU that does not report its draw
    elif setup == "mig":
        monkeypatch.setenv("STANDIN_GPU_MIG", "1")
    else:  # another process (this test's parent) computes on the job's GPU
        monkeypatch.setenv("STANDIN_GPU_PIDS", str(os.getppid()))
    idle = measure_idle_power(_sampler(), 0.2)
    assert idle["idle_w"] is None and note in idle["power_note"]
    resources = _scored_point(samples=1)
    assert note in resources["power_note"]
    assert resources["scored"]["energy_j"] is None
    assert resources["mean_power_w"] is None
    row = machine_cost_columns([_provenance(tmp_path / "c1", resources, idle)], 12.0, 3000.0)
    assert note in row["energy_note"]
    assert (row["gpu_energy_j"], row["j_per_audio_s"], row["wh_per_million_chars"]) == (None,) * 3


def test_cpu_seconds_per_audio_second_over_the_rounds(tmp_path) -> None:
    # Two rounds of a CPU point: 3 and 1 CPU-seconds in their scored windows, 8 s of audio.
    paths = [
        _provenance(tmp_path / f"round{k}", {"source": "proc", "scored": {"cpu_seconds": c}}, None)
        for k, c in ((1, 3.0), (2, 1.0))
    ]
    row = machine_cost_columns(paths, 8.0, 100.0)
    assert row["cpu_s_per_audio_s"] == 0.5
    assert row["energy_note"] is None and row["j_per_audio_s"] is None
    # A round written before the scored window was kept: no figure, nothing estimated.
    old = _provenance(tmp_path / "round3", {"source": "proc", "cpu_seconds": 9.0}, None)
    assert machine_cost_columns([*paths, old], 8.0, 100.0)["cpu_s_per_audio_s"] is None
    assert (
        machine_cost_columns([tmp_path / "none" / "records.jsonl"], 8.0, 1.0)["cpu_s_per_audio_s"]
        is None
    )


def test_the_proc_source_keeps_the_windows_cpu_seconds() -> None:
    with ResourceSampler(pid=os.getpid(), interval_s=0.05, source="proc") as sampler:
        sampler.mark("begin")
        sum(i * i for i in range(200_000))  # some CPU in the window
        sampler.mark("end")
    scored = sampler.result()["scored"]
    assert scored["cpu_seconds"] is not None and scored["cpu_seconds"] >= 0
    assert scored["energy_j"] is None
    assert sampler.result()["power_note"] is None  # no GPU sampled: nothing to explain


def test_parse_power_lines() -> None:
    # Verbatim shapes of `--query-gpu=power.draw,mig.mode.current --format=csv,noheader,nounits`.
    assert parse_power_csv("312.45, Disabled\n287.10, [N/A]\n") == (pytest.approx(599.55), None)
    assert parse_power_csv("[N/A], [N/A]\n")[0] is None
    assert "MIG" in parse_power_csv("70.00, Enabled\n")[1]
    assert parse_power_csv("")[0] is None
