"""Stage workers and model runners: vllm-omni's on top of vLLM's CPU ones.

Each model runner mixes vLLM's ``CPUModelRunner`` (CPU tensors in place of device buffers,
CUDA stream/event placeholders during construction, the CPU model loader) with vllm-omni's
AR or generation runner (stage inputs and outputs, the inter-stage connector, the talker's
multi-token prediction). Three things of 0.30.0 need a hand, each found by running it:

* ``CPUModelRunner.load_model`` does not call ``super()``, so vllm-omni's post-load hooks
  (talker MTP buffers, prefix-cache policy, duplex sampling hook) would be skipped.
  ``_CPULoader`` sits in the MRO where vLLM's ``GPUModelRunner.load_model`` would be, so
  vllm-omni's ``load_model`` chain runs and ends in the CPU loader.
* ``compilation_config.max_cudagraph_capture_size`` is None on the CPU platform; vllm-omni's
  ``_init_talker_mtp`` compares it with ``>``. No CUDA graph is captured here: it is 0.
* vllm-omni's async output path copies on CUDA streams with CUDA events: it is off.

The workers build these runners where vLLM's ``CPUWorker.init_device`` builds its own
(``model_runner_cls``, which vllm-omni's connector check also reads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import vllm.v1.worker.cpu_worker as cpu_worker_module
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner
from vllm_omni.worker.mixins import OmniWorkerMixin

__all__ = [
    "CPUARModelRunner",
    "CPUARWorker",
    "CPUGenerationModelRunner",
    "CPUGenerationWorker",
]


class _CPULoader(GPUModelRunner):
    """Ends vllm-omni's ``load_model`` chain in vLLM's CPU loader (see the module docstring)."""

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        CPUModelRunner.load_model(self, *args, **kwargs)  # type: ignore[arg-type]


class _CPUOmniRunner:
    """What both CPU stage runners share (mixed in first)."""

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        compilation = self.compilation_config  # type: ignore[attr-defined]
        if compilation.max_cudagraph_capture_size is None:
            compilation.max_cudagraph_capture_size = 0
        # Skip CPUModelRunner.load_model (no super() call): the omni chain after it in the
        # MRO runs, and _CPULoader ends it with the CPU loader.
        super(CPUModelRunner, self).load_model(*args, **kwargs)  # type: ignore[misc]

    def _should_use_async_omni_output(self) -> bool:
        return False


class CPUARModelRunner(_CPUOmniRunner, CPUModelRunner, GPUARModelRunner, _CPULoader):
    """The talker stage's runner (autoregressive, KV cache, sampler)."""


class CPUGenerationModelRunner(
    _CPUOmniRunner, CPUModelRunner, GPUGenerationModelRunner, _CPULoader
):
    """The Code2Wav stage's runner (one forward per chunk, no KV cache)."""


@contextlib.contextmanager
def _cpu_worker_builds(runner_cls: type) -> Iterator[None]:
    """vLLM's CPUWorker.init_device names CPUModelRunner from its module: for the length of
    the call, that name is this stage's runner."""
    saved = cpu_worker_module.CPUModelRunner
    cpu_worker_module.CPUModelRunner = runner_cls  # type: ignore[misc]
    try:
        yield
    finally:
        cpu_worker_module.CPUModelRunner = saved  # type: ignore[misc]


class CPUARWorker(OmniWorkerMixin, CPUWorker):
    model_runner_cls = CPUARModelRunner

    def init_device(self) -> None:
        with _cpu_worker_builds(self.model_runner_cls):
            super().init_device()


class CPUGenerationWorker(OmniWorkerMixin, CPUWorker):
    model_runner_cls = CPUGenerationModelRunner

    def init_device(self) -> None:
        with _cpu_worker_builds(self.model_runner_cls):
            super().init_device()
