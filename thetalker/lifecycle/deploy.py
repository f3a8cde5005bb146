"""Deploy configurations by name: which file, which model, which rate, how to serve it.

The YAML files under ``thetalker/deploy_configs/`` (``deploy/`` at the repository root is the
same folder through a symlink) are handed to the server as they are, so they carry no
metadata keys: vllm-omni 0.30.0 drops a key it does not know with a warning at most, so a
stray or misspelled key silently runs the default (tests/contract checks every key). The
facts the tools need (served model id, sample rate, launcher, MPS, extra serve flags, voice
mode) live in ``REGISTRY`` below; ``tests/unit/test_deploy.py`` checks that each file's header
comment agrees with it.

``thetalker-deploy NAME`` prints the file's path, ``--model-id`` / ``--sample-rate`` print
those facts instead; no argument (or ``list``) prints every name with the model it serves,
its sample rate and its aliases (the original benchmark's listing). Unknown names exit 2.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ALIASES",
    "DEPLOY_DIR",
    "REGISTRY",
    "DeployEntry",
    "UnknownDeployError",
    "aliases_of",
    "listing",
    "names",
    "resolve",
    "sse_refusal",
]

# Package data at the package root (deploy/ at the repository root links to it).
DEPLOY_DIR = Path(__file__).resolve().parents[1] / "deploy_configs"

# Voice modes: how the published runs chose the voice for each model.
VOICE_SPEAKER = "speaker"  # a built-in speaker, sent as "speaker"
VOICE_REGISTERED = "registered"  # the reference clip uploaded once via POST /v1/audio/voices
VOICE_INLINE = "inline"  # the reference clip and transcript inline with every request


@dataclass(frozen=True)
class DeployEntry:
    """One deploy configuration and the facts needed to serve and drive it."""

    name: str
    filename: str
    model_id: str
    sample_rate: int
    launcher: str  # "vllm-omni" or "local" (see thetalker.lifecycle.launch)
    stock_file: str  # what the header's "# stock:" values refer to
    mps: bool = False  # serve under an NVIDIA MPS daemon
    extra_args: tuple[str, ...] = ()  # extra serve flags beyond the launcher's own
    voice_mode: str = VOICE_SPEAKER
    speaker: str | None = None  # for VOICE_SPEAKER
    task_type: str | None = None  # Qwen3-TTS request task_type
    # False: served on vllm-omni 0.30.0's non-streaming diffusion path (OmniVoice), which
    # ignores `stream`/`stream_format` and answers one whole audio body, never SSE.
    streams: bool = True

    @property
    def path(self) -> Path:
        return DEPLOY_DIR / self.filename

    def content_sha256(self) -> str:
        """Hash of the file's bytes, for workflow params that must rerun on an edit."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def _entry(
    name: str, model_id: str, sample_rate: int, launcher: str, stock_file: str, **facts: Any
) -> DeployEntry:
    """One registry entry; its file is always `<name>.yaml`."""
    return DeployEntry(
        name=name,
        filename=f"{name}.yaml",
        model_id=model_id,
        sample_rate=sample_rate,
        launcher=launcher,
        stock_file=stock_file,
        **facts,
    )


_VLLM = "vllm-omni"


def _qwen(size: str) -> DeployEntry:
    """Qwen3-TTS CustomVoice at one size (`1.7B` is `qwen3tts17b`): one stock file for both."""
    return _entry(
        "qwen3tts" + size.replace(".", "").lower(),
        f"Qwen/Qwen3-TTS-12Hz-{size}-CustomVoice",
        24000,
        _VLLM,
        "qwen3_tts.yaml",
        mps=True,
        speaker="ryan",
        task_type="CustomVoice",
    )


REGISTRY: dict[str, DeployEntry] = {
    e.name: e
    for e in (
        # name, served model id, sample rate, launcher, stock file, then the entry's own facts
        _qwen("1.7B"),
        _qwen("0.6B"),
        _entry("voxcpm2", "openbmb/VoxCPM2", 48000, _VLLM, "voxcpm2.yaml", voice_mode=VOICE_INLINE),
        _entry(
            "moss",
            "OpenMOSS-Team/MOSS-TTS",
            24000,
            _VLLM,
            "moss_tts.yaml",
            mps=True,
            # The 8B model's first start (kernel compile, graph capture) outlasts the defaults.
            extra_args=("--init-timeout", "1800", "--stage-init-timeout", "1800"),
            voice_mode=VOICE_REGISTERED,
        ),
        _entry(
            "omnivoice",
            "k2-fsa/OmniVoice",
            24000,
            _VLLM,
            "omnivoice.yaml",
            voice_mode=VOICE_REGISTERED,
            streams=False,
        ),
        _entry(
            "piper-joe",
            "piper-joe",
            22050,
            "local",
            "thetalker-serve-local defaults",
            speaker="joe",
        ),
    )
}

ALIASES: dict[str, str] = {"batch32": "voxcpm2", "tuned": "moss"}


def sse_refusal(entry: DeployEntry, field: str) -> str | None:
    """The one-line refusal for asking a non-streaming model for SSE, else None."""
    if entry.streams:
        return None
    return (
        f"{field}: {entry.name} ({entry.model_id}) is served on vllm-omni 0.30.0's "
        f"non-streaming diffusion path: it answers one whole audio body and never SSE, "
        f"so its first audio is its whole response time; use stream_format audio"
    )


class UnknownDeployError(KeyError):
    """A deploy name that is neither a registered name nor an alias."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def names() -> list[str]:
    """The registered deploy names (aliases not included), sorted."""
    return sorted(REGISTRY)


def aliases_of(name: str) -> list[str]:
    """The aliases that resolve to the registered `name`, sorted."""
    return sorted(alias for alias, target in ALIASES.items() if target == name)


def listing() -> list[str]:
    """One line per registered name: name, served model, sample rate, aliases."""
    width_name = max(len(n) for n in names())
    width_model = max(len(REGISTRY[n].model_id) for n in names())
    lines = []
    for name in names():
        entry = REGISTRY[name]
        line = f"{name:<{width_name}}  {entry.model_id:<{width_model}}  {entry.sample_rate:>5} Hz"
        aliases = aliases_of(name)
        if aliases:
            line += f"  (alias: {', '.join(aliases)})"
        lines.append(line)
    return lines


def _known_text() -> str:
    aliases = ", ".join(f"{a} -> {n}" for a, n in sorted(ALIASES.items()))
    return f"known: {', '.join(names())} (aliases: {aliases})"


def resolve(name: str) -> DeployEntry:
    """The entry for a name or alias; ``UnknownDeployError`` lists the known names."""
    key = ALIASES.get(name, name)
    try:
        return REGISTRY[key]
    except KeyError:
        raise UnknownDeployError(f"unknown deploy name {name!r}; {_known_text()}") from None
