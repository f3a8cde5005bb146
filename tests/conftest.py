"""Shared fixtures. Keep each one generic: other parts of the project add theirs here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.scripted_server import Script, ScriptedServer, start_scripted_server


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """A scripted speech server on 127.0.0.1 (free port, own thread), stopped after the test.

    Default script: one 4800-byte chunk (0.1 s at 24 kHz). Configure it in the test:
    `scripted_server.default = Script(...)`, `scripted_server.add_script("name", Script(...))`
    (a request whose input starts with "name" follows it), `scripted_server.sample_rate = N`.
    """
    with start_scripted_server(Script()) as server:
        yield server


@pytest.fixture(scope="session")
def default_workflow_run(tmp_path_factory: pytest.TempPathFactory):
    """One run of the default configuration on a copy of the workflow (the speed tables and
    capacity.md, by_rate.md, start_buffer.png: about two minutes on 2 idle cores, five or six
    at load average 13), shared by the tests that read its
    shape (the knee, the capacity) instead of each running it again. Returns the copy."""
    from tests.support.processes import processes_in
    from tests.support.workflow_copy import copy_workflow, smk

    workdir = copy_workflow(tmp_path_factory.mktemp("default-run") / "wf")
    targets = ("results/tables/continuity.md", "results/tables/ttfa.md")
    # ...and the public report's shapes (issue 22): by rate, the start buffer figure.
    targets += ("results/tables/by_rate.md", "results/figures/start_buffer.png")
    try:
        result = smk(workdir, "--cores", "2", *targets, "results/tables/capacity.md")
        assert result.returncode == 0, result.stderr[-3000:]
    finally:
        assert not processes_in(workdir), "a server outlived the run"
    return workdir
