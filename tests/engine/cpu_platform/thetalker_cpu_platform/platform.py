"""The platform: vllm-omni's ``OmniPlatform`` interface answered by vLLM's ``CpuPlatform``."""

from __future__ import annotations

import psutil
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

_WORKERS = "thetalker_cpu_platform.workers"


class CPUOmniPlatform(OmniPlatform, CpuPlatform):
    """vLLM's CPU platform (device "cpu", CPU attention, no CUDA graphs, no async scheduling)
    with the stage workers of ``workers``."""

    _omni_enum = OmniPlatformEnum.OOT

    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        return f"{_WORKERS}.CPUARWorker"

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        return f"{_WORKERS}.CPUGenerationWorker"

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/deploy"

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False

    @classmethod
    def supports_talker_mtp_graph_capture(cls) -> bool:
        # The talker's multi-token-prediction graph is a CUDA graph.
        return False

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None  # CPU work is synchronous

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return int(psutil.virtual_memory().available)

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)
