"""Make PyPI's CUDA builds of torchvision and torchaudio importable beside torch+cpu.

Run by scripts/engine-venv.sh with the engine venv's python:

    python scripts/engine_venv_patch.py torchvision|torchaudio SITE_PACKAGES

Each change is idempotent, says what it changed on stderr, and is checked by importing the
package in a fresh interpreter afterwards (a failure exits 1 with the import's error).

torchvision: its C++ ops library links CUDA and does not load; `_meta_registrations.py` then
registers fake kernels for `torchvision::nms` and `torchvision::qnms` with unguarded
`@torch.library.register_fake(...)` decorators, which raise "operator torchvision::nms does not
exist" at import. Each of those two decorators is made conditional on
`torchvision.extension._has_ops()` (the check the same file's `register_meta` already makes).

torchaudio: `lib/*.so` link libc10_cuda.so ("Could not load this library"). They are moved to
`lib/cuda-only/`, where torchaudio's loader does not look; it then runs without its C++
extension, and its pure-torch functions (resample, Spectrogram: all vllm-omni uses) work.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GUARD = "torchvision.extension._has_ops()"
FAKE_OPS = ("torchvision::nms", "torchvision::qnms")


def say(message: str) -> None:
    print(f"engine_venv_patch: {message}", file=sys.stderr)


def patch_torchvision(site: Path) -> None:
    path = site / "torchvision" / "_meta_registrations.py"
    text = path.read_text(encoding="utf-8")
    for op in FAKE_OPS:
        plain = f'@torch.library.register_fake("{op}")\n'
        guarded = f'@(torch.library.register_fake("{op}") if {GUARD} else (lambda fn: fn))\n'
        if guarded in text:
            say(f"{path}: {op} already guarded")
            continue
        if text.count(plain) != 1:
            raise SystemExit(f"engine_venv_patch: {path}: expected one line {plain.strip()!r}")
        text = text.replace(plain, guarded)
        say(f"{path}: register_fake({op!r}) now only when {GUARD}")
    path.write_text(text, encoding="utf-8")


def patch_torchaudio(site: Path) -> None:
    lib = site / "torchaudio" / "lib"
    parked = lib / "cuda-only"
    parked.mkdir(exist_ok=True)
    for so in sorted(lib.glob("*.so")):
        so.rename(parked / so.name)
        say(f"moved {so} -> {parked / so.name}")
    if not any(parked.glob("*.so")):
        say(f"{lib}: no shared library found (nothing moved)")


def check_import(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"engine_venv_patch: import {name} still fails: {tail}")
    say(f"import {name}: ok")


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] not in ("torchvision", "torchaudio"):
        raise SystemExit("usage: engine_venv_patch.py torchvision|torchaudio SITE_PACKAGES")
    name, site = argv[0], Path(argv[1])
    {"torchvision": patch_torchvision, "torchaudio": patch_torchaudio}[name](site)
    check_import(name)


if __name__ == "__main__":
    main(sys.argv[1:])
