"""What the serving environment has installed, and whether a stock point was served clean.

Neither vllm nor vllm-omni reads ``THESTAGE_VLLM_OMNI``: outside code enters a server as an
entry-point plugin (groups ``vllm.general_plugins``, ``vllm_omni.general_plugins`` and
``vllm_omni.platform_plugins``), loaded in every server process unless ``VLLM_PLUGINS``, an
allowlist of plugin names, leaves it out (vllm_omni/plugins/__init__.py in 0.30.0). So the
facts are gathered in the server's own interpreter and environment: ``probe_serving_env``
runs ``PROBE`` there with ``python -c`` and reads back JSON (versions of vllm, vllm-omni and
thestage-vllm-omni, every plugin of those groups with the distribution that ships it, and
``VLLM_PLUGINS``).

A stock point (a system whose env sets ``THESTAGE_VLLM_OMNI=0``, the config's way of
asking for stock: a system's name says nothing) is ``stock_contaminated``
when thestage-vllm-omni is installed there and its plugin is allowed to load, or the server's
log mentions it. ``contamination`` returns that verdict with its evidence. A probe that did
not run or failed (an interpreter that cannot be found or started) makes the verdict of a
stock point unknown (``None``, with ``unknown_reason``), never ``false``: nothing was seen
because nothing was looked at.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PLUGIN_GROUPS",
    "SERVING_PACKAGES",
    "THESTAGE_DIST",
    "PROBE",
    "probe_serving_env",
    "server_python",
    "is_stock",
    "contamination",
    "probe_failure",
    "launch_warning",
]

PLUGIN_GROUPS = ("vllm.general_plugins", "vllm_omni.general_plugins", "vllm_omni.platform_plugins")
THESTAGE_DIST = "thestage-vllm-omni"
SERVING_PACKAGES = ("vllm", "vllm-omni", THESTAGE_DIST, "torch", "transformers")
_PROBE_TIMEOUT_S = 60.0
_LOG_LINES_KEPT = 5

# Self-contained: it runs in the server's interpreter, where thetalker may not be installed.
PROBE = r"""
import importlib.metadata as md, json, os, sys
packages, groups = json.loads(sys.argv[1])
versions = {}
for name in packages:
    try:
        versions[name] = md.version(name)
    except md.PackageNotFoundError:
        versions[name] = None
plugins = []
for group in groups:
    for ep in md.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        plugins.append({
            "group": group, "name": ep.name, "value": ep.value,
            "dist": dist.metadata["Name"] if dist is not None else None,
            "dist_version": dist.version if dist is not None else None,
        })
print(json.dumps({
    "python": sys.executable, "python_version": sys.version.split()[0],
    "packages": versions, "plugins": plugins,
    "VLLM_PLUGINS": os.environ.get("VLLM_PLUGINS"),
}))
"""


def _trampoline_python(line: str) -> str | None:
    """The interpreter of pip's (distlib's) `sh` trampoline, written in place of a `#!` line
    the kernel cannot take (a path with a space, or over 127 bytes): its second line is
    `'''exec' "/path with space/bin/python" "$0" "$@"` (the path quoted only when needed)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    return words[1] if len(words) >= 2 and words[0] == "exec" else None


def server_python(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The interpreter that runs ``command``: the program itself when it is Python, else the
    one its ``#!`` line names (a console script such as ``vllm-omni``), or the one pip's
    ``#!/bin/sh`` trampoline execs; None when unknown."""
    if not command:
        return None
    program = shutil.which(str(command[0]), path=env.get("PATH")) or str(command[0])
    if Path(program).name.startswith("python"):
        return program
    try:
        with open(program, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
            second = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    if Path(words[0]).name == "sh" and second.startswith("'''exec'"):
        return _trampoline_python(second)
    if Path(words[0]).name == "env":  # #!/usr/bin/env [-S] python3
        names = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(names[0], path=env.get("PATH")) if names else None
    return words[0]


def probe_serving_env(
    python: str | None, env: Mapping[str, str] | None = None, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """Run ``PROBE`` with ``python`` in ``env`` (the server's); never raises: a failure is an
    ``error`` string in the result. ``extra``: distributions reported beside SERVING_PACKAGES
    (a server kind's own, e.g. sglang-omni)."""
    if python is None:
        return {"error": "the server's interpreter is unknown"}
    packages = list(SERVING_PACKAGES) + [p for p in extra if p not in SERVING_PACKAGES]
    args = [python, "-c", PROBE, json.dumps([packages, list(PLUGIN_GROUPS)])]
    try:
        done = subprocess.run(
            args,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"python": python, "error": f"{type(exc).__name__}: {exc}"}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return {"python": python, "error": f"exit {done.returncode}: {tail[0][:300]}"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"python": python, "error": "the probe printed no JSON"}


def is_stock(env: Mapping[str, str] | None) -> bool:
    """Whether a point is meant to be stock vllm-omni: its system's env asks for it
    (see the module docstring)."""
    return (env or {}).get("THESTAGE_VLLM_OMNI") == "0"


def _allowed(name: str, allowlist: str | None) -> bool:
    if allowlist is None:
        return True
    return name in [n.strip() for n in allowlist.split(",") if n.strip()]


def _log_mentions(log_path: str | Path | None, words: Sequence[str]) -> list[str]:
    if log_path is None or not words:
        return []
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    found: list[str] = []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("# thetalker.lifecycle.launch:"):  # our own command line
                    continue
                if pattern.search(line):
                    found.append(line.rstrip()[:300])
                    if len(found) >= _LOG_LINES_KEPT:
                        break
    except OSError:
        return []
    return found


def contamination(
    serving_env: Mapping[str, Any] | None,
    log_path: str | Path | None,
    env: Mapping[str, str] | None,
) -> dict[str, Any]:
    """``{"stock", "stock_contaminated", "thestage_version", "thestage_plugins",
    "log_lines"}`` for one served point (see the module docstring)."""
    facts = dict(serving_env or {})
    version = (facts.get("packages") or {}).get(THESTAGE_DIST)
    allowlist = facts.get("VLLM_PLUGINS")
    own = [
        p
        for p in facts.get("plugins") or []
        if str(p.get("dist") or "").lower().replace("_", "-") == THESTAGE_DIST
    ]
    active = [p for p in own if _allowed(str(p.get("name")), allowlist)]
    words = ["thestage", *{str(p.get("name")) for p in own}]
    lines = _log_mentions(log_path, words)
    stock = is_stock(env)
    unknown = probe_failure(serving_env)
    # Not probed, the server's own log is the only evidence of what is installed.
    installed = version is not None or bool(own) or bool(unknown and lines)
    verdict: bool | None = bool(stock and installed and (active or lines))
    if stock and not verdict and unknown:
        verdict = None  # nothing seen, but nothing was looked at: unknown, never "clean"
    return {
        "stock": stock,
        "stock_contaminated": verdict,
        "unknown_reason": unknown if verdict is None else None,
        "thestage_version": version,
        "thestage_plugins": active,
        "log_lines": lines,
    }


def probe_failure(serving_env: Mapping[str, Any] | None) -> str | None:
    """Why the probe's facts cannot judge a stock point (it did not run, failed, or printed
    no packages); None when they can."""
    if not serving_env:
        return "the server's environment was not probed"
    if serving_env.get("error"):
        return f"the serving-environment probe failed: {serving_env['error']}"
    if not isinstance(serving_env.get("packages"), Mapping):
        return "the serving-environment probe reported no packages"
    return None


def launch_warning(verdict: Mapping[str, Any]) -> str | None:
    """What the launcher says of a stock server before it starts (``contamination``'s
    verdict): its thestage plugins will load, or its environment cannot be judged."""
    if verdict["stock_contaminated"] is None:
        return (
            "a stock vllm-omni server whose environment cannot be judged "
            f"({verdict['unknown_reason']}): stock_contaminated unknown"
        )
    if not verdict["stock_contaminated"]:
        return None
    names = ", ".join(str(p.get("name")) for p in verdict["thestage_plugins"]) or "?"
    return (
        "a stock vllm-omni server, but "
        f"thestage-vllm-omni {verdict['thestage_version']} is installed and its plugin(s) "
        f"{names} will load "
        "(THESTAGE_VLLM_OMNI is read by neither vllm nor vllm-omni; VLLM_PLUGINS filters)"
    )
