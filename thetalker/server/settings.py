"""Server settings from a deploy file (YAML) and the command line; flags win.

A deploy file holds `workers`, `threads_per_worker` and
`synthesis: {length_scale, noise_scale, noise_w_scale}`, every key optional. Anything else, or
a value of the wrong type or range, is a one-line `DeployConfigError` naming the file and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thetalker.server.engine import EngineSettings, SynthesisSettings

__all__ = ["DeployConfigError", "load_deploy_config", "engine_settings"]

TOP_KEYS = ("workers", "threads_per_worker", "synthesis")
SYNTHESIS_KEYS = ("length_scale", "noise_scale", "noise_w_scale")


class DeployConfigError(ValueError):
    """A deploy file the server cannot use; the message names the file and the key."""


def _number(path: Path, key: str, value: Any, positive: bool) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise DeployConfigError(f"{path}: '{key}' must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise DeployConfigError(f"{path}: '{key}' must be {bound}, got {value!r}")
    return float(value)


def _count(path: Path, key: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DeployConfigError(f"{path}: '{key}' must be an integer >= 1, got {value!r}")
    return value


def load_deploy_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a deploy file; returns {workers, threads_per_worker, synthesis}."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeployConfigError(f"{path}: cannot read deploy file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise DeployConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DeployConfigError(f"{path}: a deploy file must be a mapping of keys to values")
    for key in data:
        if key not in TOP_KEYS:
            raise DeployConfigError(
                f"{path}: unknown key '{key}' (expected one of {', '.join(TOP_KEYS)})"
            )
    synthesis = data.get("synthesis") or {}
    if not isinstance(synthesis, dict):
        raise DeployConfigError(f"{path}: 'synthesis' must be a mapping")
    for key in synthesis:
        if key not in SYNTHESIS_KEYS:
            raise DeployConfigError(
                f"{path}: unknown key 'synthesis.{key}' (expected one of "
                f"{', '.join(SYNTHESIS_KEYS)})"
            )
    return {
        "workers": _count(path, "workers", data.get("workers")),
        "threads_per_worker": _count(path, "threads_per_worker", data.get("threads_per_worker")),
        "synthesis": SynthesisSettings(
            length_scale=_number(
                path, "synthesis.length_scale", synthesis.get("length_scale"), True
            ),
            noise_scale=_number(path, "synthesis.noise_scale", synthesis.get("noise_scale"), False),
            noise_w_scale=_number(
                path, "synthesis.noise_w_scale", synthesis.get("noise_w_scale"), False
            ),
        ),
    }


def engine_settings(
    deploy_config: str | Path | None = None,
    workers: int | None = None,
    threads_per_worker: int | None = None,
    deterministic: bool = False,
) -> EngineSettings:
    """Deploy file values overridden by flags; stock defaults: 1 worker, onnxruntime threads."""
    file = load_deploy_config(deploy_config) if deploy_config is not None else {}
    return EngineSettings(
        workers=workers or file.get("workers") or 1,
        threads_per_worker=threads_per_worker or file.get("threads_per_worker"),
        synthesis=file.get("synthesis") or SynthesisSettings(),
        deterministic=deterministic,
    )
