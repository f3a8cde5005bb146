"""Provenance of every number: what ran, where, with what, written beside each load point.

``results/runs/{system}/{model}/c{N}/provenance.json`` records the workflow's git commit and
dirty flag, the config slice the run used, the deploy file (path, sha256, content), the server
command line and the variables set for it, the server's ``/version`` and ``/v1/models``, the
installed versions of the packages that matter, the GPU (or CPU), the host, the Slurm job it
ran in (if any), start and end times (ISO 8601 UTC), the seed, the sha256 of the prompt set
and of the reference clip, the resource sampler's peaks, and what the serving environment has
installed (``serving_env``: vllm, vllm-omni, thestage-vllm-omni and the entry-point plugins the
server loads; ``stock_contaminated`` true when a stock vllm-omni point was served with the
thestage library active, see ``thetalker.lifecycle.serving_env``, with a warning on stderr, the job
log). No secret is written: env values of secret-looking names, ``--api-key``-style values
in command lines and passwords in URLs are redacted (``thetalker.util.redact``), in the config
slice too. Nothing here raises because a
fact is unavailable: a server that does not answer, a file that is gone or a missing ``git``
becomes ``None`` or an ``error`` string, so measuring never fails for want of its provenance.

The call in ``bench.py``, per concurrency point (``job`` is the decoded ``--job`` JSON,
``server`` the handle ``launch_server`` yields)::

    from thetalker.pipeline.provenance import utc_now, write_provenance
    from thetalker.pipeline.sampler import ResourceSampler

    started = utc_now()
    with ResourceSampler(pid=server.pid) as sampler:
        run_benchmark(opts, prompts, point_dir)
    write_provenance(
        point_dir / "provenance.json",
        server=server, config_slice=job, concurrency=n,
        started_at=started, ended_at=utc_now(), resources=sampler.result(),
    )

With ``config_slice=job`` the system, model, deploy file, prompts, reference clip and seed
are taken from the job's own keys (``system``, ``model``, ``deploy_file``, ``prompts``,
``ref_audio``, ``seed``); explicit arguments win over them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thetalker.api.auth import auth_headers
from thetalker.data.record_writes import write_json
from thetalker.lifecycle.gpu import visible_gpus
from thetalker.lifecycle.serving_env import contamination
from thetalker.util.http_get import GetError, http_get, redirect_note, redirect_origin
from thetalker.util.redact import redact_command, redact_config, redact_url
from thetalker.util.redact import redact_env as _redact_env

__all__ = [
    "PROVENANCE_SCHEMA",
    "PACKAGES",
    "collect_provenance",
    "write_provenance",
    "utc_now",
    "git_state",
    "file_facts",
    "package_versions",
    "hardware",
    "scheduler",
    "fetch_json",
    "redact_env",
]

PROVENANCE_SCHEMA = "thetalker.pipeline.provenance/1"
# Distribution names whose versions change what a number means.
PACKAGES = (
    "thetalker",
    "vllm",
    "vllm-omni",
    "thestage-vllm-omni",
    "torch",
    "piper-tts",
    "faster-whisper",
    "onnxruntime",
)
HTTP_TIMEOUT_S = 3.0  # each GET's whole answer, not each read
MAX_ANSWER_BYTES = 1 << 20  # /version and /v1/models are a few KiB
_PathLike = str | os.PathLike[str]
_SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_PARTITION",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_GPUS",
    "CUDA_VISIBLE_DEVICES",
)


def utc_now() -> str:
    """Now, ISO 8601 in UTC with milliseconds (``2025-01-31T12:00:00.123+00:00``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _iso(value: str | datetime | float | None) -> str | None:
    """A time as ISO 8601 UTC: a string is kept, a datetime or epoch seconds converted."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    else:
        moment = datetime.fromtimestamp(float(value), UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")


def _run(cmd: Sequence[str], cwd: _PathLike | None = None, timeout_s: float = 10.0) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    try:
        done = subprocess.run(
            list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(directory: _PathLike = ".") -> dict[str, Any]:
    """Commit and dirty flag of the checkout holding ``directory``; None when not in git.

    Dirty means tracked files differ from the commit (``git describe --dirty``'s meaning);
    untracked files such as results do not count.
    """
    commit = _run(["git", "-C", str(directory), "rev-parse", "HEAD"])
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _run(["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"])
    return {
        "commit": commit.strip(),
        "dirty": None if status is None else bool(status.strip()),
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_facts(path: _PathLike | None, with_content: bool = False) -> dict[str, Any] | None:
    """Path, sha256 and size of a file (and its text when asked); None for no file.

    A file that cannot be read gives ``sha256: None`` and an ``error``, never an exception.
    """
    if path is None:
        return None
    path = Path(path)
    facts: dict[str, Any] = {"path": str(path), "sha256": None, "bytes": None}
    if with_content:
        facts["content"] = None
    try:
        facts["sha256"] = _sha256(path)
        facts["bytes"] = path.stat().st_size
        if with_content:
            facts["content"] = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        facts["error"] = f"{type(exc).__name__}: {exc.strerror or exc}"
    return facts


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution; None when it is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _gpus() -> list[dict[str, Any]] | None:
    """The job's GPUs (CUDA_VISIBLE_DEVICES: its slot, Slurm's grant, or the user's choice),
    each with index, UUID, model, driver and memory; None without nvidia-smi."""
    try:
        gpus = visible_gpus()
    except (RuntimeError, OSError, subprocess.SubprocessError):
        return None
    if gpus is None:
        return None
    return [g.to_json() for g in gpus] or None


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model"):
            return value.strip()
    return platform.processor() or None


def hardware() -> dict[str, Any]:
    """The job's GPUs (None without nvidia-smi), the CPU model and core count."""
    return {
        "gpus": _gpus(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def scheduler() -> dict[str, str | None] | None:
    """The Slurm job this runs in (id, node, partition, cluster, GPUs); None outside Slurm."""
    if not os.environ.get("SLURM_JOB_ID"):
        return None
    return {name.lower(): os.environ.get(name) for name in _SLURM_VARS}


def fetch_json(
    url: str, timeout_s: float = HTTP_TIMEOUT_S, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """GET a JSON document: ``{"url", "status", "body"}`` or ``{"url", "error"}``; never
    raises. A body that is not JSON is kept as text. `headers` (an API key's) are sent,
    never recorded. Bounded by total time and size, and never redirected
    (``thetalker.util.http_get``): a redirect is the answer, ``{"url", "status",
    "redirect": its origin, "error"}``, so a key is never sent to another host."""
    try:
        answer = http_get(url, timeout_s, MAX_ANSWER_BYTES, headers)
    except GetError as exc:
        return {"url": url, "error": str(exc)}
    if answer.redirect:
        return {
            "url": url,
            "status": answer.status,
            "redirect": redirect_origin(answer.location, url),
            "error": redirect_note(answer.status, answer.location, url),
        }
    if answer.status >= 400:
        return {
            "url": url,
            "status": answer.status,
            "error": f"HTTP {answer.status} {answer.reason}",
        }
    raw = answer.body.decode("utf-8", errors="replace")
    try:
        # NaN and Infinity (which json.loads takes) as null: what a server says never keeps
        # provenance.json, written strictly, from being written.
        body: Any = json.loads(raw, parse_constant=lambda _name: None)
    except (json.JSONDecodeError, RecursionError):
        body = raw
    return {"url": url, "status": answer.status, "body": body}


def redact_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """The variables set for the server, values of credential-like names replaced."""
    return _redact_env(env)


def _server_version(version: dict[str, Any]) -> str | None:
    """The version string out of /version's body (``{"version": ...}`` or plain text)."""
    body = version.get("body")
    if isinstance(body, dict):
        value = body.get("version")
        return None if value is None else str(value)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return None


def collect_provenance(
    *,
    config_slice: Mapping[str, Any] | None = None,
    server: Any = None,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    deploy_file: _PathLike | None = None,
    prompts: _PathLike | None = None,
    reference: _PathLike | None = None,
    seed: int | None = None,
    system: str | None = None,
    model: str | None = None,
    concurrency: int | None = None,
    started_at: str | datetime | float | None = None,
    ended_at: str | datetime | float | None = None,
    resources: Mapping[str, Any] | None = None,
    workflow_dir: _PathLike = ".",
    http_timeout_s: float = HTTP_TIMEOUT_S,
) -> dict[str, Any]:
    """Everything known about one load point, as a JSON-ready dict (see the module docstring).

    server: a handle with ``command``, ``env`` and ``base_url`` (``launch_server``'s); the
        explicit ``command``/``env``/``base_url`` arguments win over it.
    config_slice: what the run was configured with (the bench job); its keys ``system``,
        ``model``, ``deploy_file``, ``prompts``, ``ref_audio`` and ``seed`` fill the
        arguments left None.
    resources: ``ResourceSampler.result()``.
    """
    job = dict(config_slice) if config_slice is not None else {}
    command = command if command is not None else getattr(server, "command", None)
    env = env if env is not None else getattr(server, "env", None)
    base_url = base_url if base_url is not None else getattr(server, "base_url", None)
    deploy_file = deploy_file if deploy_file is not None else job.get("deploy_file")
    prompts = prompts if prompts is not None else job.get("prompts")
    reference = reference if reference is not None else job.get("ref_audio")
    seed = seed if seed is not None else job.get("seed")

    if base_url:
        root = base_url.rstrip("/")
        # An external server's key (its variable's name on the handle), so a hosted API's
        # /v1/models answers; a server we started is asked as before, without one.
        key_env = getattr(server, "api_key_env", None)
        headers = auth_headers(key_env) if key_env else None
        version = fetch_json(f"{root}/version", http_timeout_s, headers)
        models = fetch_json(f"{root}/v1/models", http_timeout_s, headers)
        for answer in (version, models):
            answer["url"] = redact_url(answer.get("url"))
    else:
        version = models = {"url": None, "error": "no server base_url given"}
    system = system if system is not None else job.get("system")
    serving_env = getattr(server, "serving_env", None)
    stock = contamination(serving_env, getattr(server, "log_path", None), env)
    point = f"{system}/{model if model is not None else job.get('model')} c{concurrency}"
    if stock["stock_contaminated"] is None:
        print(
            f"warning: {point}: a stock vllm-omni point whose serving environment cannot be "
            f"judged ({stock['unknown_reason']}); provenance marks stock_contaminated unknown "
            "(null)",
            file=sys.stderr,
            flush=True,
        )
    if stock["stock_contaminated"]:
        names = ", ".join(str(p.get("name")) for p in stock["thestage_plugins"]) or "none listed"
        print(
            f"warning: {point}: a stock vllm-omni point served with thestage-vllm-omni "
            f"{stock['thestage_version']} active (plugins: {names}; log lines: "
            f"{len(stock['log_lines'])}); provenance marks it stock_contaminated",
            file=sys.stderr,
            flush=True,
        )

    return {
        "schema_version": PROVENANCE_SCHEMA,
        "system": system,
        "model": model if model is not None else job.get("model"),
        "concurrency": concurrency,
        "host": socket.gethostname(),
        "started_at": _iso(started_at),
        "ended_at": _iso(ended_at),
        "seed": seed,
        "workflow": {"directory": str(Path(workflow_dir).resolve()), **git_state(workflow_dir)},
        "config": redact_config(job) or None,
        "deploy": file_facts(deploy_file, with_content=True),
        "prompts": file_facts(prompts),
        "reference": file_facts(reference),
        "server": {
            "command": redact_command(command),
            "env": redact_env(env),
            "base_url": redact_url(base_url),
            "version": version,
            "server_version": _server_version(version),
            "models": models,
            # What the startup log stated (Nari: its execution config's SHA-256); only there.
            **({"startup": server.startup} if getattr(server, "startup", None) else {}),
        },
        "packages": package_versions(),
        "hardware": hardware(),
        "scheduler": scheduler(),
        "resources": dict(resources) if resources is not None else None,
        "serving_env": serving_env,
        "stock_contaminated": stock["stock_contaminated"],
        "stock_check": stock,
    }


def write_provenance(path: _PathLike, **kwargs: Any) -> dict[str, Any]:
    """Collect provenance (same keyword arguments as ``collect_provenance``) and write it to
    ``path`` atomically; returns what was written."""
    data = collect_provenance(**kwargs)
    write_json(path, data)
    return data
