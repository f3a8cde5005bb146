"""RecordAppender: every record reaches the OS at once, fsync runs in groups (by a clock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from thetalker.data import appender as appender_mod
from thetalker.data.appender import RecordAppender
from thetalker.data.record_writes import RecordWriteError


def indices(path: Path) -> list[int]:
    """The request indices in the file, read as any other process would."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["request_index"] for line in lines]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(appender_mod.os, "fsync", calls.append)
    return calls


def test_records_are_readable_at_once_and_synced_at_most_every_half_second(
    tmp_path: Path, fsyncs: list[int]
):
    clock = Clock()
    path = tmp_path / "records.jsonl"
    out = RecordAppender(path.open("w", encoding="utf-8"), sync_every_s=0.5, clock=clock)
    assert out.sync_due_in() is None  # nothing to sync
    for i, t in enumerate((100.0, 100.1, 100.3)):
        clock.now = t
        out.append({"request_index": i})
        # In the file for any other reader (and any later process) before any fsync.
        assert indices(path) == list(range(i + 1))
    assert fsyncs == []
    assert out.sync_due_in() == pytest.approx(0.2)  # due 0.5 s after the oldest unsynced
    clock.now = 100.6
    assert out.sync_due_in() == 0.0
    out.append({"request_index": 3})  # overdue: synced with this one
    assert len(fsyncs) == 1 and out.sync_due_in() is None
    clock.now = 101.0
    out.append({"request_index": 4})
    assert out.sync_due_in() == pytest.approx(0.5)
    out.sync_if_due()
    assert len(fsyncs) == 1  # not due yet
    out.close()  # syncs what is left
    assert len(fsyncs) == 2


def test_a_failed_sync_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def failing(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(appender_mod.os, "fsync", failing)
    path = tmp_path / "records.jsonl"
    out = RecordAppender(path.open("w", encoding="utf-8"))
    out.append({"request_index": 0})
    with pytest.raises(RecordWriteError) as info:
        out.close()
    assert str(info.value) == f"{path}: cannot sync records: No space left on device"


def test_a_sigkilled_writer_keeps_every_record_it_appended(tmp_path: Path):
    # No fsync happens before the kill (the sync interval is an hour): what was appended is
    # with the OS already, so a killed process loses none of it.
    path = tmp_path / "records.jsonl"
    script = (
        "import os, signal, sys\n"
        "from thetalker.data.appender import RecordAppender\n"
        "out = RecordAppender(open(sys.argv[1], 'w'), sync_every_s=3600)\n"
        "for i in range(5):\n"
        "    out.append({'request_index': i})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=False)
    assert done.returncode == -signal.SIGKILL
    assert indices(path) == [0, 1, 2, 3, 4]
