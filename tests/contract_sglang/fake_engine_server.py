"""sglang-omni 0.1.9's own server with only its pipeline faked: the `sgl-omni` command itself.

Run with the SGLang contract venv's python (scripts/contract-venv-sglang.sh), with exactly
the arguments `sgl-omni` takes:

    SGLANG_OMNI_STRICT_PORT=1 python tests/contract_sglang/fake_engine_server.py \\
        serve --model-path DIR --host 127.0.0.1 --port N [--tts_engine.engine.KEY V ...]

Everything runs as the real command runs it (sglang-omni.md, "Seam"): the typer CLI and its
dotted per-stage flags, the pipeline chosen from DIR/config.json's `architectures`, the
Qwen3-TTS CustomVoice speaker list from its `talker_config.spk_id`, the port check
(`SGLANG_OMNI_STRICT_PORT`), the built-in warm-up and the `/health` readiness it gates, every
route, the request model and validator, the error envelopes, PCM/WAV/SSE encoding and the
WebSocket handler. Faked: `sglang_omni.serve.launcher.MultiProcessPipelineRunner`, the one
object that would start the stage processes (preprocessing, the SGLang engine, the vocoder).
Its coordinator answers the calls the real `Client` makes, playing `schedule.py`: sine
chunks as `audio_waveform_payload` stream messages, then a `CompleteMessage`; a scheduled
failure raised the way the real coordinator raises a failed request's error; and admission
refused with sglang-omni's `QueueFullError` once running + queued requests are in flight.
Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub here: a model path is a local folder
sys.path.insert(0, str(Path(__file__).resolve().parent))

import schedule  # noqa: E402  (this folder, pure Python)

FROM_STAGE = "vocoder"  # Qwen3-TTS's terminal stage


def admission_ceiling(pipeline_config: Any) -> int:
    """Running + queued requests the engine stage admits (its dotted flags, else 0.1.9's
    Qwen3-TTS defaults)."""
    engine = pipeline_config.stage_named("tts_engine").engine
    running = getattr(engine, "max_running_requests", None) or schedule.DEFAULT_MAX_RUNNING
    queued = getattr(engine, "max_queued_requests", None)
    return int(running) + int(schedule.DEFAULT_MAX_QUEUED if queued is None else queued)


def request_text(request: Any) -> str:
    """The text of an `OmniRequest` as the speech route builds it (`inputs`: the text)."""
    inputs = getattr(request, "inputs", request)
    if isinstance(inputs, str):
        return inputs
    if isinstance(inputs, dict):
        for key in ("text", "input", "prompt"):
            if isinstance(inputs.get(key), str):
                return inputs[key]
    return str(inputs)


def sine(start: int, n: int, rate: int = schedule.SAMPLE_RATE) -> Any:
    import numpy as np

    t = np.arange(start, start + n, dtype=np.float32) / rate
    return (0.25 * np.sin(2 * math.pi * 220.0 * t)).astype(np.float32)


class FakeCoordinator:
    """What `sglang_omni.client.Client` calls on the coordinator, on `schedule.py`."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.in_flight: set[str] = set()
        self.total = 0
        self.refused = 0

    def _admit(self, request_id: str) -> None:
        from sglang_omni.admission import QueueFullError

        if len(self.in_flight) >= self.ceiling:
            self.refused += 1
            # The scheduler answers a CompleteMessage(success=False) with this text, and the
            # real coordinator raises QueueFullError.from_message(msg.error) (coordinator.py).
            raise QueueFullError.from_message(QueueFullError.MESSAGE)
        self.in_flight.add(request_id)
        self.total += 1

    async def stream(self, request_id: str, request: Any):
        from sglang_omni.proto.messages import CompleteMessage, StreamMessage
        from sglang_omni.utils.audio_payload import audio_waveform_payload

        self._admit(request_id)
        try:
            plan = schedule.parse_directives(request_text(request))
            sizes = schedule.chunk_samples(plan.frames)
            sent = 0
            for index, n in enumerate(sizes):
                if plan.fail_after is not None and index == plan.fail_after:
                    # The real coordinator turns a failed request's error text into this.
                    raise RuntimeError(f"fake engine: scheduled failure after {index} chunks")
                delay = n / plan.sample_rate * schedule.TIME_SCALE
                await asyncio.sleep(delay + (plan.first_delay_s if index == 0 else 0.0))
                payload = audio_waveform_payload(
                    sine(sent, n, plan.sample_rate), sample_rate=plan.sample_rate, modality="audio"
                )
                sent += n
                yield StreamMessage(
                    request_id=request_id, from_stage=FROM_STAGE, chunk=payload, modality="audio"
                )
            await asyncio.sleep(plan.hold_s)
            yield CompleteMessage(
                request_id=request_id,
                from_stage=FROM_STAGE,
                success=True,
                result=self._result(plan),
            )
        finally:
            self.in_flight.discard(request_id)

    def _result(self, plan: schedule.Directives) -> dict[str, Any]:
        usage = {"prompt_tokens": 8, "completion_tokens": plan.frames}
        return {
            "modality": "audio",
            "sample_rate": plan.sample_rate,
            "usage": usage,
            "finish_reason": "stop",
        }

    async def submit(self, request_id: str, request: Any) -> dict[str, Any]:
        """A non-streamed request: the whole waveform at once, after the whole schedule."""
        from sglang_omni.utils.audio_payload import audio_waveform_payload

        self._admit(request_id)
        try:
            plan = schedule.parse_directives(request_text(request))
            total = sum(schedule.chunk_samples(plan.frames))
            if plan.fail_after == 0:
                raise RuntimeError("fake engine: scheduled failure after 0 chunks")
            await asyncio.sleep(total / plan.sample_rate * schedule.TIME_SCALE)
            audio = audio_waveform_payload(
                sine(0, total, plan.sample_rate), sample_rate=plan.sample_rate
            )
            return {**audio, **self._result(plan)}
        finally:
            self.in_flight.discard(request_id)

    async def abort(self, request_id: str) -> bool:
        return request_id in self.in_flight

    def health(self) -> dict[str, Any]:
        return {
            "running": True,
            "stages": ["preprocessing", "tts_engine", FROM_STAGE],
            "entry_stage": "preprocessing",
            "total_requests": self.total,
            "pending_completions": len(self.in_flight),
            "request_states": {},
            "stream_delivery": {
                "stream_backlog_bytes": 0,
                "open_stream_count": len(self.in_flight),
                "generation_finished_stream_count": 0,
                "longest_reader_idle_s": 0.0,
                "failed_stream_count": 0,
            },
        }

    def get_request_info(self, request_id: str) -> None:
        return None


class FakeRunner:
    """`MultiProcessPipelineRunner` as `run_server` reads it; starts no process."""

    def __init__(self, pipeline_config: Any) -> None:
        self.pipeline_config = pipeline_config
        self.coordinator = FakeCoordinator(admission_ceiling(pipeline_config))
        ns = SimpleNamespace
        self.prep = ns(
            placement_plan=ns(gpus={}),
            process_plan=ns(groups=[], tp_stage_to_processes={}),
            logical_process_plan=ns(processes=[ns(num_replicas=1)]),
        )
        self.stage_control_endpoints: dict[str, str] = {}
        self.stage_http_routes: list[tuple[str, tuple[str, ...], str]] = []
        self._stopped = asyncio.Event()
        self.started_at: float | None = None

    async def start(self, timeout: float = 120.0) -> None:
        self.started_at = time.monotonic()
        print(f"FAKE_ENGINE_CEILING={self.coordinator.ceiling}", flush=True)

    async def stop(self) -> None:
        self._stopped.set()

    async def wait_failed(self) -> None:
        await self._stopped.wait()


def main(argv: list[str]) -> None:
    import sglang_omni.serve.launcher as launcher

    launcher.MultiProcessPipelineRunner = FakeRunner
    from sglang_omni.cli import app

    app(argv, prog_name="sgl-omni")


if __name__ == "__main__":
    main(sys.argv[1:])
