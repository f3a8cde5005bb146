"""scripts/engine-venv.sh's choice of build: a version it does not know is refused in one line,
before anything is made (the versions it builds are built by the engine tiers)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_vllm_omni_version_is_refused_in_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {**os.environ, "THETALKER_ENGINE_VENV": str(venv)}
    for argv, version in ((["0.29.0"], "0.29.0"), ([], "0.27.1")):
        if not argv:
            env["THETALKER_OMNI_VERSION"] = version
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "engine-venv.sh"), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"engine-venv: vllm-omni {version} is not supported (supported: 0.30.0, 0.28.0)"
        ]
    assert not venv.exists() and list(tmp_path.iterdir()) == []
