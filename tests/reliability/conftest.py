"""The reliability tier's shared fixture: a workflow copy that must end with nothing running."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import cmdline, kill_pids, processes_in
from tests.support.workflow_copy import copy_workflow, tiny_config


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """The workflow copy; whatever still runs in it afterwards fails the test and is killed."""
    dest = copy_workflow(tmp_path / "wf", tiny_config(requests=400))
    yield dest
    # A stopped job may still be unwinding (stopping its server takes up to its grace).
    deadline = time.monotonic() + 60
    while (leftovers := processes_in(dest)) and time.monotonic() < deadline:
        time.sleep(0.2)
    described = {pid: cmdline(pid)[:200] for pid in leftovers}
    kill_pids(leftovers)
    assert not leftovers, f"processes left running in the workflow copy: {described}"
