"""A system's `serving_env` checked while the workflow is parsed, as prompts and deploy files are.

A missing venv or prefix would otherwise fail only when its bench job starts (a dry run
accepted it), and an environment holding another vllm-omni than the one the server kind
speaks was served without a word. The check is cheap: a path, a file, and the version line
of the environment's installed `METADATA` (nothing is imported or run).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import ConfigError

__all__ = ["check_serving_envs", "installed_version"]

KEY = "serving_env"


def installed_version(prefix: Path, dist: str) -> str | None:
    """The version of distribution `dist` installed under `prefix` (a venv or prefix), from
    its `lib*/python*/site-packages/<dist>-*.dist-info/METADATA`; None when none is found."""
    stem = dist.replace("-", "_").lower()
    for meta in sorted(prefix.glob("lib*/python*/site-packages/*.dist-info/METADATA")):
        name = meta.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        name = name.lower().replace("-", "_").replace(".", "_")
        if name != stem:
            continue
        try:
            with open(meta, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # the headers end at the first blank line
        except OSError:
            continue
    return None


def _warn(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


def check_serving_envs(
    config: Mapping[str, Any], warn: Callable[[str], None] | None = None
) -> None:
    """Refuse (ConfigError, one line naming the key) a system's `serving_env` that is no
    folder or has no `bin/<program>`; warn (`warn`, default stderr) where the environment's
    installed version is not the one the server kind speaks (`Launcher.speaks`)."""
    say = warn or _warn
    for system, spec in config["systems"].items():
        value = spec.get(KEY)
        if not value:
            continue
        field = f"config field systems.{system}.{KEY}"
        launcher = backends.launcher(spec["launcher"])
        prefix = Path(str(value)).expanduser()
        if not prefix.is_dir():
            raise ConfigError(f"{field}: {value} does not exist (a venv or prefix is needed)")
        if launcher.speaks is None:
            continue
        dist, version = launcher.speaks
        program = prefix / "bin" / dist
        if not program.is_file():
            raise ConfigError(f"{field}: {value} has no bin/{dist} (not a {dist} environment)")
        found = installed_version(prefix, dist)
        if found != version:
            held = f"holds {dist} {found}" if found else f"has no {dist} distribution installed"
            say(
                f"{field}: {value} {held}; the {launcher.name} server kind speaks {dist} "
                f"{version} (its requests and figures are those of {version})"
            )
