"""Which keys of a vllm-omni deploy file the installed build does not read.

vllm-omni's deploy loader (``vllm_omni/config/stage_config.py``: ``load_deploy_config``, in
0.28.0 and 0.30.0 alike) reads the keys it knows by name and drops the rest without a word:
``model_runner`` (0.30.0's) is read by nothing in 0.28.0. Two builds compared with one deploy
file must say which keys each ignored, so the answer comes from the build itself: ``PROBE``
runs in the serving environment's own interpreter (as ``thetalker.lifecycle.serving_env``
probes versions there) and runs the build's own loader on the file, watching what it reads.

What "read" means, per key (a key is a dotted path: ``model_runner`` at the top level,
``stages[1].max_num_seqs`` directly under a stage, the stage by its position in the list):

- top level: ``load_deploy_config`` asked for the key by name (``get``, ``[...]``, ``pop``);
  the probe hands it the file's mapping (as the build's ``resolve_deploy_yaml`` resolved it,
  ``base_config`` merged) wrapped so that each such read is recorded. A test for presence
  alone (``"stage_args" in raw``) is no read. Were the loader to iterate the whole top level
  (no such build is known), which keys it uses could not be told: the answer is None, with
  that reason.
- under a stage: the stage parser copies every key it does not reserve into its flat
  arguments, so per stage a key is read when the parser asked for it by name, or it landed in
  a typed field of the build's ``StageDeployConfig`` with the file's value, or it went into
  ``engine_extras`` and the build's own filter of engine arguments
  (``filter_dataclass_kwargs(OmniEngineArgs, ...)``, what ``build_vllm_config`` applies
  before creating the engine of an LLM stage, the kind every Qwen3-TTS stage is) keeps it.
  A key that is none of these is dropped before the engine is built.
- nested mappings (``connectors``, sampling parameters, ``engine_args``' contents,
  ``platforms``' stages) are the model's or the connector's and are not judged.

A build whose loader, stage schema or engine-argument filter cannot be found where these
builds keep them, or a probe that cannot run, gives None with the reason: never a guess.

Server-side figures by build, for ``/v1/audio/speech`` (the route TheTalker's clients use):
vllm-omni 0.30.0's ``serving_speech.py`` observes ``vllm_omni:audio_ttfp_s`` (each stream's
first packet) and ``vllm_omni:audio_underrun_s`` (each stream's end) and counts
``vllm_omni:speech_stream_completed_total``. 0.28.0 registers the two histograms
(``metrics/modality.py``) but observes them only on the chat route (``serving_chat.py``),
and has no ``speech_stream_completed`` family at all. ``audio_continuity_ok_total`` is left
out of the judgment (``SPEECH_FIGURES``): it counts continuous streams only, so no count is
also what a build that serves it shows when no stream was continuous (0.30.0 on 2 CPU cores);
``audio_underrun_s``, observed at the same call for every stream, says whether server-side
continuity is served at all. What a point's ``server_metrics.json``
(deltas over the scored requests, thetalker.pipeline.server_metrics) then holds, as seen on
a real 0.28.0 run (tests/engine/builds/test_build_0_28.py checks it):

- registered, never observed: the stem is there with NO rows (``"audio_ttfp_s": []``): a
  labelled family exports only its ``# HELP``/``# TYPE`` lines until its first observation;
- not registered: the stem is absent (``speech_stream_completed`` on 0.28.0);
- observed before the point but not during it: rows whose ``count`` (a histogram) or
  ``value`` (a counter) is 0.

All three are "not served by this build" when the point's requests were answered;
``unserved_figures`` names them, each with which of the three it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "PROBE",
    "SPEECH_FIGURES",
    "NOT_EXPORTED",
    "NEVER_OBSERVED",
    "NOTHING_IN_POINT",
    "deploy_reads",
    "unread_deploy_keys",
    "unread_from_report",
    "unserved_figures",
]

_PROBE_TIMEOUT_S = 180.0  # imports vllm: tens of seconds on a busy 2-core machine

# The server-side stream figures the server table reads that a serving build observes for EVERY
# answered stream (so "nothing observed" means "not served"), with their kind in
# server_metrics.json (thetalker.pipeline.server_metrics.families keys a counter without _total).
SPEECH_FIGURES = {
    "audio_ttfp_s": "histogram",
    "audio_underrun_s": "histogram",
    "speech_stream_completed": "counter",
}
NOT_EXPORTED = "not exported by this build"
NEVER_OBSERVED = "exported, never observed"
NOTHING_IN_POINT = "observed nothing over the point"

# Self-contained: it runs in the serving environment's interpreter, where thetalker is absent.
# It prints one JSON line: {"keys": [...], "read": [...]} or {"unknown": reason}.
PROBE = r"""
import dataclasses, json, sys

def main(path):
    try:
        from vllm_omni.config import stage_config as sc
    except Exception as exc:
        return {"unknown": f"vllm_omni.config.stage_config does not import: {exc!r}"[:300]}
    need = ("load_deploy_config", "resolve_deploy_yaml", "StageDeployConfig")
    missing = [n for n in need if not hasattr(sc, n)]
    if missing:
        return {"unknown": "vllm_omni.config.stage_config has no " + ", ".join(missing)}
    try:
        from vllm_omni.engine.arg_utils import OmniEngineArgs
        from vllm_omni.entrypoints.utils import filter_dataclass_kwargs
    except Exception as exc:
        why = f"the build's engine-argument filter is not where expected: {exc!r}"
        return {"unknown": why[:300]}

    class Reads(dict):
        # A mapping that records the keys read from it by name.
        def __init__(self, data):
            super().__init__(data)
            self.read, self.iterated = set(), False
        def get(self, key, default=None):
            self.read.add(key)
            return super().get(key, default)
        def __getitem__(self, key):
            self.read.add(key)
            return super().__getitem__(key)
        def pop(self, key, *default):
            self.read.add(key)
            return super().pop(key, *default)
        def setdefault(self, key, default=None):
            self.read.add(key)
            return super().setdefault(key, default)
        def items(self):
            self.iterated = True
            return super().items()
        def keys(self):
            self.iterated = True
            return super().keys()
        def values(self):
            self.iterated = True
            return super().values()
        def __iter__(self):
            self.iterated = True
            return super().__iter__()

    raw = sc.resolve_deploy_yaml(path)
    if not isinstance(raw, dict):
        return {"unknown": f"resolve_deploy_yaml gave a {type(raw).__name__}, not a mapping"}
    stages_raw = raw.get("stages") or []
    top = Reads(raw)
    stages = [Reads(s) if isinstance(s, dict) else s for s in stages_raw]
    if "stages" in raw:
        dict.__setitem__(top, "stages", stages)
    original = sc.resolve_deploy_yaml
    sc.resolve_deploy_yaml = lambda _path: top
    try:
        deploy = sc.load_deploy_config(path)
    except Exception as exc:
        return {"unknown": f"the build's load_deploy_config refused the file: {exc!r}"[:300]}
    finally:
        sc.resolve_deploy_yaml = original
    if top.iterated:
        return {"unknown": "this build's load_deploy_config iterates the whole top level: "
                           "which keys it uses cannot be told"}
    keys = [str(k) for k in raw]
    read = [str(k) for k in raw if k in top.read]
    parsed = list(getattr(deploy, "stages", None) or [])
    if len(parsed) != len(stages):
        return {"unknown": f"{len(stages)} stages in the file, {len(parsed)} parsed"}
    typed = {f.name for f in dataclasses.fields(sc.StageDeployConfig)} - {"engine_extras"}
    for i, (stage, ds) in enumerate(zip(stages, parsed)):
        if not isinstance(stage, Reads):
            continue
        extras = getattr(ds, "engine_extras", None) or {}
        for key, value in dict.items(stage):
            name = f"stages[{i}].{key}"
            keys.append(name)
            if key in stage.read:
                read.append(name)
            elif key in typed and getattr(ds, key) == value:
                read.append(name)
            elif key in extras and filter_dataclass_kwargs(OmniEngineArgs, {key: extras[key]}):
                read.append(name)
    return {"keys": keys, "read": read}

try:
    out = main(sys.argv[1])
except Exception as exc:
    out = {"unknown": f"the probe failed: {exc!r}"[:300]}
print(json.dumps(out))
"""


def _python(serving_env: str | Path) -> Path:
    """The interpreter of a serving environment (a venv or prefix, as `systems.S.serving_env`)."""
    return Path(serving_env).expanduser() / "bin" / "python"


def unread_from_report(report: Mapping[str, Any]) -> list[str] | None:
    """The keys of a probe's report (``PROBE``'s JSON) that the build did not read, in file
    order; None when the report holds no answer (``unknown``)."""
    if "unknown" in report or not isinstance(report.get("keys"), list):
        return None
    read = set(report.get("read") or [])
    return [str(k) for k in report["keys"] if k not in read]


def deploy_reads(
    serving_env: str | Path,
    deploy_file: str | Path,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the build installed in ``serving_env`` reads of ``deploy_file``, for provenance:
    ``{"deploy_file", "deploy_sha256", "python", "unread": [dotted keys] | None,
    "reason": str | None}``; ``reason`` says why ``unread`` is None. ``env`` (the system's)
    is laid over this process's environment for the probe. Never raises."""
    deploy = Path(deploy_file)
    python = _python(serving_env)
    out: dict[str, Any] = {"deploy_file": str(deploy), "python": str(python)}
    try:
        out["deploy_sha256"] = hashlib.sha256(deploy.read_bytes()).hexdigest()
    except OSError as exc:
        return {**out, "deploy_sha256": None, "unread": None, "reason": f"{deploy}: {exc}"}
    try:
        done = subprocess.run(
            [str(python), "-c", PROBE, str(deploy.resolve())],
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {**out, "unread": None, "reason": f"the probe did not run: {exc}"}
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
        reason = f"the probe printed no JSON (exit {done.returncode}): {tail}"
        return {**out, "unread": None, "reason": reason}
    unread = unread_from_report(report)
    reason = None if unread is not None else str(report.get("unknown") or "no keys reported")
    return {**out, "unread": unread, "reason": reason}


def unread_deploy_keys(
    serving_env: str | Path, deploy_file: str | Path, env: Mapping[str, str] | None = None
) -> list[str] | None:
    """The dotted keys of ``deploy_file`` (``model_runner``, ``stages[0].max_num_seqs``) the
    build in ``serving_env`` does not read; None when that cannot be told (``deploy_reads``
    gives the reason)."""
    return deploy_reads(serving_env, deploy_file, env)["unread"]


def unserved_figures(
    server_metrics: Mapping[str, Any], figures: Mapping[str, str] = SPEECH_FIGURES
) -> dict[str, str] | None:
    """The stems of ``figures`` a point's ``server_metrics.json`` shows the server did not
    serve, each with why (``NOT_EXPORTED``, ``NEVER_OBSERVED``, ``NOTHING_IN_POINT``; see the
    module docstring); a figure served is left out. None when the file cannot say (no server
    metrics, or one of the figures voided or reset over the point: its deltas are unknown).
    Meaningful for a point whose requests were answered: a point whose requests all failed
    counts nothing on any build."""
    if not server_metrics.get("available"):
        return None
    void = set(server_metrics.get("void") or {}) | set(server_metrics.get("resets") or [])
    if void & set(figures):
        return None
    unserved: dict[str, str] = {}
    for stem, kind in figures.items():
        family = server_metrics.get(f"{kind}s") or {}
        if stem not in family:
            unserved[stem] = NOT_EXPORTED
        elif not family[stem]:
            unserved[stem] = NEVER_OBSERVED
        else:
            field = "count" if kind == "histogram" else "value"
            if all(float(row.get(field) or 0.0) == 0.0 for row in family[stem]):
                unserved[stem] = NOTHING_IN_POINT
    return unserved
