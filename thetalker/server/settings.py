"""Server settings from a deploy file (YAML) and the command line; flags win.

A deploy file holds `workers`, `threads_per_worker`,
`synthesis: {length_scale, noise_scale, noise_w_scale}`, the streaming keys (mirroring
vllm-omni's `initial_codec_chunk_frames` / `codec_chunk_frames`) `initial_chunk_words`,
`chunk_words`, `min_chunk_words`, and the scheduler's `scheduling_policy` and
`max_active_streams`; every key optional (`STOCK` has the server's own defaults). Anything else,
or a value of the wrong type or range, is a one-line `DeployConfigError` naming the file and key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thetalker.server.engine import EngineSettings, SynthesisSettings
from thetalker.server.pieces import ChunkPlan
from thetalker.server.scheduler import POLICIES

__all__ = ["DeployConfigError", "STOCK", "load_deploy_config", "engine_settings"]

STREAMING_KEYS = (
    "initial_chunk_words",
    "chunk_words",
    "min_chunk_words",
    "scheduling_policy",
    "max_active_streams",
)
TOP_KEYS = ("workers", "threads_per_worker", "synthesis", *STREAMING_KEYS)
# The server's own defaults (what the "local-stock" system runs): whole sentences, one stream
# per worker until it ends, no admission limit.
STOCK: dict[str, Any] = {
    "workers": 1,
    "threads_per_worker": None,
    "initial_chunk_words": 0,
    "chunk_words": 0,
    "min_chunk_words": 1,
    "scheduling_policy": "fifo",
    "max_active_streams": 0,
}
SYNTHESIS_KEYS = ("length_scale", "noise_scale", "noise_w_scale")


class DeployConfigError(ValueError):
    """A deploy file the server cannot use; the message names the file and the key."""


def _number(path: Path, key: str, value: Any, positive: bool) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise DeployConfigError(f"{path}: '{key}' must be a number, got {value!r}")
    if not math.isfinite(value):  # nan passes every comparison below
        raise DeployConfigError(f"{path}: '{key}' must be a finite number, got {value!r}")
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


def _words(path: Path, key: str, value: Any, low: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise DeployConfigError(f"{path}: '{key}' must be an integer >= {low}, got {value!r}")
    return value


def _refuse_unknown_keys(path: Path, mapping: dict, known: Sequence[str], prefix: str) -> None:
    """A misspelled key would silently run the default: name it and what is known."""
    for key in mapping:
        if key not in known:
            raise DeployConfigError(
                f"{path}: unknown key '{prefix}{key}' (expected one of {', '.join(known)})"
            )


def load_deploy_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a deploy file; returns every key of `STOCK` plus `synthesis`
    (None where the file leaves a key out)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DeployConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise DeployConfigError(f"{path}: cannot read deploy file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise DeployConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DeployConfigError(f"{path}: a deploy file must be a mapping of keys to values")
    _refuse_unknown_keys(path, data, TOP_KEYS, "")
    synthesis = data.get("synthesis") or {}
    if not isinstance(synthesis, dict):
        raise DeployConfigError(f"{path}: 'synthesis' must be a mapping")
    _refuse_unknown_keys(path, synthesis, SYNTHESIS_KEYS, "synthesis.")
    policy = data.get("scheduling_policy")
    if policy is not None and policy not in POLICIES:
        raise DeployConfigError(
            f"{path}: 'scheduling_policy' must be one of {', '.join(POLICIES)}, got {policy!r}"
        )
    return {
        "initial_chunk_words": _words(
            path, "initial_chunk_words", data.get("initial_chunk_words"), 0
        ),
        "chunk_words": _words(path, "chunk_words", data.get("chunk_words"), 0),
        "min_chunk_words": _words(path, "min_chunk_words", data.get("min_chunk_words"), 1),
        "scheduling_policy": policy,
        "max_active_streams": _words(path, "max_active_streams", data.get("max_active_streams"), 0),
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
    """Deploy file values overridden by flags; what the file leaves out is `STOCK`."""
    file = load_deploy_config(deploy_config) if deploy_config is not None else {}

    def value(key: str) -> Any:
        got = file.get(key)
        return STOCK[key] if got is None else got

    return EngineSettings(
        workers=workers or value("workers"),
        threads_per_worker=threads_per_worker or value("threads_per_worker"),
        synthesis=file.get("synthesis") or SynthesisSettings(),
        deterministic=deterministic,
        chunks=ChunkPlan(
            value("initial_chunk_words"), value("chunk_words"), value("min_chunk_words")
        ),
        scheduling_policy=value("scheduling_policy"),
        max_active_streams=value("max_active_streams"),
    )
