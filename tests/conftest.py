"""Shared fixtures and the suite's time limits. Keep each one generic: other parts of the
project add theirs here.

Time limits (pytest-timeout, whose signal method raises inside the test, so its `finally`
blocks and fixtures' teardown run): 300 s by default (pyproject.toml), 60 s in tests/unit,
900 s for a test marked `slow` or one that may start a session's workflow run; every limit
inside a test (a subprocess timeout, a wait) is below its test's. Whatever a test started in
its tmp_path and left running is killed at teardown, and Snakemake and the README commands run
in sessions of their own whose whole tree is stopped on a timeout
(tests/support/processes.py: run_in_group).
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.paths import TESTS
from tests.support.processes import kill_pids, processes_in
from tests.support.scripted_server import Script, ScriptedServer, start_scripted_server

# Hypothesis' default per-example deadline (200 ms) is a speed assertion: off for the whole
# suite (project rule: no test asserts a time); pytest-timeout still bounds a test.
settings.register_profile("thetalker", deadline=None)
settings.load_profile("thetalker")

UNIT_TIMEOUT_S = 60
LONG_TIMEOUT_S = 900  # a slow test, or one that may be the first to start a session's run
SESSION_RUNS = {"default_workflow_run", "quality_run", "report_html", "after_first_command"}


# The suite runs on 2 pytest-xdist workers (pyproject.toml: `-n 2 --dist loadgroup`). Tests
# sharing an expensive fixture go to one worker, so it is made once: the session runs by name
# (the first of these in a test's fixtures), any other session or module fixture of the suite
# by name and module; the Slurm tests share one cluster and queue, so they run on one worker.
SHARED_FIRST = ("default_workflow_run", "quality_run", "published_dry_run")

# A suite started in the background of a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and so would every process a test starts: the Ctrl-C tests would see their bench,
# Snakemake or launcher deaf to it. Python's own handler is put back (exec makes it SIG_DFL).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# GPU slots are node-wide files (thetalker/lifecycle/gpu_slots.py): a test run never touches
# the node's real ones, nor do its two workers share theirs.
os.environ["THETALKER_GPU_SLOTS_DIR"] = tempfile.mkdtemp(prefix="thetalker-test-gpu-slots-")


def _shared_group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("slurm") is not None:
        return "slurm"
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    names = info.names_closure
    for name in SHARED_FIRST:
        if name in names:
            return name
    for name in names:
        defs = info.name2fixturedefs.get(name)
        if not defs or not defs[-1].baseid:  # pytest's and plugins' own (tmp_path_factory)
            continue
        if defs[-1].scope == "session":
            return name
        if defs[-1].scope == "module":
            return f"{item.nodeid.split('::')[0]}::{name}"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Per-tier time limits, unless a test sets its own with `pytest.mark.timeout`; the
    xdist group of each test that shares an expensive fixture (`_shared_group`)."""
    groups = {item.nodeid: _shared_group(item) for item in items}
    for item in items:
        if groups[item.nodeid] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # The longest groups first (a worker each), so that neither is the run's tail; the
    # order of tests never matters otherwise.
    items.sort(key=lambda item: groups[item.nodeid] not in SHARED_FIRST[:2])
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        path = Path(str(item.fspath))
        if item.get_closest_marker("slow") or SESSION_RUNS & set(item.fixturenames):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
        elif TESTS / "unit" in path.parents:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _nothing_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test (passed, failed or timed out): SIGKILL whatever still runs in its
    tmp_path (servers and jobs inherit the folder they were started in). The tests that must
    prove nothing is left assert it themselves; this keeps a failure from loading the
    machine for every later test."""
    yield
    tmp = request.node.funcargs.get("tmp_path")
    if isinstance(tmp, Path):
        kill_pids(processes_in(tmp))


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
def default_workflow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one run of the default configuration per test session: the README's first command
    as written (`snakemake --cores 2 results/tables/throughput.md`, with bash, no stand-ins on
    PATH) on a fresh copy of the workflow, then the speed tables it made the points of
    (continuity, TTFA, capacity, by rate, the start-buffer figure: tables only, no bench job
    runs again). Shared by the README
    test (tests/workflow/test_report_opens.py), the knee and the capacity tests. Returns the
    copy."""
    from tests.support.processes import processes_in, run_in_group
    from tests.support.readme import readme_commands
    from tests.support.workflow_copy import copy_workflow, smk, smk_env

    workdir = copy_workflow(tmp_path_factory.mktemp("default-run") / "wf")
    first, _ = readme_commands()
    env = smk_env(standins=False)
    try:
        done = run_in_group(["bash", "-c", first], cwd=workdir, env=env, timeout=840)
        assert done.returncode == 0, f"{first}:\n{done.stderr[-3000:]}"
        tables = [f"results/tables/{t}.md" for t in ("continuity", "ttfa", "capacity", "by_rate")]
        # ...and the public report's shapes (issue 22): by rate, the start buffer figure.
        tables.append("results/figures/start_buffer.png")
        result = smk(workdir, "--cores", "2", *tables, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "rule bench:" not in result.stdout + result.stderr, "a bench job ran again"
    finally:
        assert not processes_in(workdir), "a server outlived the run"
    return workdir
