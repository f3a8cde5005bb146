"""vllm-omni 0.30.0's own OpenAI speech and voices layer on loopback, with only the engine faked.

Run with the contract venv's python (scripts/contract-venv.sh), exactly like the real CLI:

    python tests/contract/fake_engine_server.py serve k2-fsa/OmniVoice --omni \\
        --host 127.0.0.1 --port 0 [--deploy-config FILE]

The command line goes through vllm-omni's own parser and `validate`. The deploy file (or the
bundled one) goes through 0.30.0's `load_deploy_config` and `merge_pipeline_deploy` with the
model's registered pipeline; the stage configs, default sampling params and chunk sizes come
from the result. What is served is 0.30.0's code: vLLM's `build_app` (its exception
handlers), the vllm-omni router (`vllm_omni/entrypoints/openai/api_server.py`) with its
engine-error handlers, `OmniOpenAIServingSpeech` with the model's real TTS adapter (or the
pure-diffusion path for OmniVoice), the real request model, and 0.30.0's audio metrics
(`OmniModalityMetrics`, observed by the serving layer itself, served at `/metrics`). Faked:
`engine.generate` (sine chunks on the schedule of `schedule.py`) and the few adapter steps
that need checkpoint files (tokenizers, the MOSS processor); each stand-in is named below.
Prints `FAKE_ENGINE_PORT=N` once the port listens. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub here: checkpoint lookups fail fast
sys.path.insert(0, str(Path(__file__).resolve().parent))

import schedule  # noqa: E402  (this folder, pure Python)


def parse_cli(argv: list[str]):
    """vllm-omni's own CLI parser, built as `vllm_omni/entrypoints/cli/main.py` builds it."""
    import vllm_omni.entrypoints.cli.serve as omni_serve
    from vllm_omni.utils.tracking_parser import TrackingArgumentParser

    parser = TrackingArgumentParser(description="vLLM OMNI CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    for cmd in omni_serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        cmds[cmd.name] = cmd
    args = parser.parse_args(argv)
    if args.subparser in cmds:
        cmds[args.subparser].validate(args)
    if getattr(args, "model_tag", None) is not None:  # as the serve command's cmd() does
        args.model = args.model_tag
    return args


def resolve_stages(profile: schedule.ModelProfile, deploy_path: str | None):
    """0.30.0's loader: the deploy file (else the bundled one) merged with the pipeline."""
    import vllm_omni
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.config.stage_config import load_deploy_config, merge_pipeline_deploy

    path = deploy_path or str(Path(vllm_omni.__file__).parent / "deploy" / profile.stock_deploy)
    deploy = load_deploy_config(path)
    pipeline = resolve_pipeline_config(profile.pipeline)
    merged = merge_pipeline_deploy(pipeline, deploy)
    return pipeline, deploy, merged


def chunk_extra(profile: schedule.ModelProfile, deploy, merged) -> dict:
    """The deploy values that set the chunking (see `schedule.chunk_samples`)."""
    if profile.kind == "voxcpm2":
        overrides = merged[0].yaml_engine_args.get("hf_overrides") or {}
        return dict(overrides.get("voxcpm2_runtime_config") or {})
    for conn in (deploy.connectors or {}).values():
        return dict(conn.get("extra") or {})
    return {}


def hf_config_for(profile: schedule.ModelProfile) -> SimpleNamespace:
    """The checkpoint metadata the adapters read (the real config.json is not here)."""
    if profile.kind != "qwen3":
        return SimpleNamespace(sample_rate=profile.sample_rate)
    talker = SimpleNamespace(
        spk_id={name: 3000 + i for i, name in enumerate(schedule.QWEN3_SPEAKERS)},
        codec_language_id={name: 2000 + i for i, name in enumerate(schedule.QWEN3_LANGUAGES)},
        hidden_size=2048,
        spk_is_dialect={},
    )
    return SimpleNamespace(
        tts_model_type=profile.checkpoint_task, talker_config=talker, codec_frame_rate_hz=12.5
    )


def _request_text(prompt: Any) -> str:
    """The request's text, as each adapter puts it into the engine prompt."""
    if isinstance(prompt, dict):
        if "input" in prompt:  # OmniVoice (diffusion)
            return str(prompt["input"])
        info = prompt.get("additional_information") or {}
        if isinstance(info.get("text"), list):  # Qwen3, and the VoxCPM2 stand-in prompt
            return str(info["text"][0])
        ids = prompt.get("prompt_token_ids")
        if isinstance(ids, list):  # MOSS: the stand-in processor's byte-level ids
            return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")
    return ""


class FakeEngine:
    """The engine client (`AsyncOmni` for AR models, the diffusion engine for OmniVoice):
    what the serving layer reads from it, and a `generate` playing `schedule.py`."""

    def __init__(self, profile, model_config, stage_configs, sampling_params, extra) -> None:
        self.profile = profile
        self.model_config = model_config
        self.stage_configs = stage_configs
        self.default_sampling_params_list = sampling_params
        self.chunk_extra = extra
        self.errored = False
        self.dead_error = None
        self.renderer = None
        self.input_processor = None
        self.vllm_config = None
        self.model = model_config.model
        self.tts_batch_max_items = 32
        self.tts_max_instructions_length = None
        # AsyncOmni's audio metrics (served at /metrics from the default registry), on as
        # under --log-stats; the serving layer observes them itself (TTFP, underrun, ends).
        from vllm_omni.metrics.modality import OmniModalityMetrics

        self.mod_metrics = OmniModalityMetrics(model_name=self.model, log_stats=True)
        self.request_states: dict[str, Any] = {}  # none: the serving layer's own arrival time
        self.is_running = True

    async def check_health(self) -> None:
        return None

    async def get_supported_tasks(self) -> tuple[str, ...]:
        return ()

    async def do_log_stats(self) -> None:
        return None

    async def generate(self, prompt, request_id, sampling_params_list=None, **_: Any):
        import torch
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineGenerateError
        from vllm_omni.outputs import OmniRequestOutput

        text = _request_text(prompt)
        plan = schedule.parse_directives(text)
        sizes = schedule.chunk_samples(self.profile, self.chunk_extra, plan.frames)
        last = (sampling_params_list or [None])[-1]
        streaming = getattr(last, "output_kind", None) == RequestOutputKind.DELTA
        rate = self.profile.sample_rate
        sent = 0
        chunks: list[torch.Tensor] = []
        stage_id = len(self.stage_configs) - 1
        for index, n in enumerate(sizes):
            if plan.fail_after is not None and index == plan.fail_after:
                raise EngineGenerateError(f"fake engine: scheduled failure after {index} chunks")
            delay = n / rate * schedule.TIME_SCALE + (plan.first_delay_s if index == 0 else 0.0)
            await asyncio.sleep(delay)
            t = torch.arange(sent, sent + n, dtype=torch.float32) / rate
            chunk = 0.25 * torch.sin(2 * math.pi * 220.0 * t)
            sent += n
            chunks.append(chunk)
            final = index == len(sizes) - 1
            if not streaming and not final:
                continue
            metrics = {}
            if final:  # what SpeechOutputTokenCounter reads off the terminal output
                stage0 = {"finish_reason": "stop", "num_tokens_out": plan.frames}
                metrics = {"stage_metrics": {"0": stage0}}
            audio: Any = chunk if streaming else (torch.cat(chunks) if stage_id == 0 else chunks)
            yield OmniRequestOutput(
                request_id=request_id,
                finished=final,
                stage_id=stage_id,
                replica_id=0,  # as the orchestrator binds every output to its replica
                final_output_type="audio",
                metrics=metrics,
                _multimodal_output={"audio": audio, "sr": torch.tensor(rate)},
            )
        if plan.fail_after is not None and plan.fail_after >= len(sizes):
            raise EngineGenerateError("fake engine: scheduled failure after the last chunk")


class _ByteTokenizerProcessor:
    """Stand-in for MOSS-TTS's upstream processor (it comes with the checkpoint): byte-level
    text ids and an empty audio-code grid, so the real adapter's build runs on."""

    def build_user_message(self, **kwargs: Any) -> dict:
        return kwargs

    def build_assistant_message(self, **kwargs: Any) -> dict:
        return kwargs

    def __call__(self, conversations, mode: str):
        import torch

        text = str(conversations[0][0].get("text", ""))
        ids = list(text.encode("utf-8")) or [0]
        grid = torch.zeros((len(ids), 33), dtype=torch.int64)
        grid[:, 0] = torch.tensor(ids)
        return {"input_ids": [grid]}


def patch_checkpoint_steps(serving, profile: schedule.ModelProfile) -> None:
    """Replace the adapter steps that load checkpoint files (tokenizer, processor, codec)."""
    adapter = serving._adapter
    if profile.kind == "moss":
        adapter._get_moss_processor = lambda: _ByteTokenizerProcessor()

        async def encode_refs(request, *, has_inline_ref_audio, two_speaker):
            # The real one encodes the clip with the ~1.6 B audio tokenizer; this one decodes it
            # through the server's real resolver and hands over an empty code grid.
            import torch

            _wav, _sr, key = await serving._resolve_ref_audio_array(request.ref_audio)
            return [torch.zeros((1, 32), dtype=torch.int64)], {0: key}

        adapter._encode_moss_references = encode_refs
    elif profile.kind == "voxcpm2":

        async def build_prompt(request, uploaded_ref=None):
            # The real one tokenizes with the checkpoint's tokenizer and encodes the clip
            # with its VAE; this one still decodes an inline clip through the real resolver.
            if request.ref_audio is not None:
                await serving._resolve_ref_audio(request.ref_audio)
            ids = list(request.input.encode("utf-8"))
            return {"prompt_token_ids": ids, "additional_information": {"text": [request.input]}}

        adapter._build_prompt = build_prompt


def build_state(args, profile: schedule.ModelProfile):
    """The engine and what `omni_init_app_state` would put on `app.state` for it."""
    from vllm.entrypoints.openai.models.protocol import BaseModelPath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.sampling_params import SamplingParams
    from vllm_omni.config.stage_config import StageExecutionType
    from vllm_omni.entrypoints.openai.models import serving as omni_models_serving
    from vllm_omni.entrypoints.openai.serving_speech import OmniOpenAIServingSpeech
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    pipeline, deploy, merged = resolve_stages(profile, args.deploy_config)
    served = args.served_model_name[0] if args.served_model_name else args.model
    model_config = SimpleNamespace(
        model=args.model,
        hf_config=hf_config_for(profile),
        async_chunk=deploy.async_chunk,
        max_model_len=4096,
        tokenizer=args.model,
        allowed_local_media_path=args.allowed_local_media_path or "",
        allowed_media_domains=args.allowed_media_domains,
    )
    stages = []
    for ps, sc in zip(pipeline.stages, merged, strict=True):
        stages.append(
            SimpleNamespace(
                stage_id=ps.stage_id,
                stage_pipeline_config=ps,
                model_stage=ps.model_stage,
                model_config=SimpleNamespace(
                    model_arch=ps.model_arch or pipeline.model_arch, model=args.model
                ),
                worker_type=sc.worker_type,
                yaml_runtime=sc.yaml_runtime,
                yaml_engine_args=sc.yaml_engine_args,
            )
        )
    diffusion = len(pipeline.stages) == 1 and (
        pipeline.stages[0].execution_type == StageExecutionType.DIFFUSION
    )
    if diffusion:
        params = [OmniDiffusionSamplingParams()]
    else:
        params = [
            SamplingParams(**(sc.yaml_extras.get("default_sampling_params") or {})) for sc in merged
        ]
    engine = FakeEngine(profile, model_config, stages, params, chunk_extra(profile, deploy, merged))
    paths = [BaseModelPath(name=served, model_path=args.model)]
    if diffusion:
        models = omni_models_serving._DiffusionServingModels(paths)
        serving = OmniOpenAIServingSpeech.for_diffusion(
            diffusion_engine=engine, model_name=served, stage_configs=stages
        )
    else:
        models = OpenAIServingModels(engine, paths)
        serving = OmniOpenAIServingSpeech(
            engine, models, request_logger=None, model_name=served, forced_aligner_enabled=False
        )
        patch_checkpoint_steps(serving, profile)
    state = {
        "engine_client": engine,
        "openai_serving_models": models,
        "openai_serving_speech": serving,
        "stage_configs": stages,
        "args": args,
        "log_stats": False,
        "api_server_count": 1,
        "server_load_metrics": 0,
        "enable_server_load_tracking": False,
        "sleeping_stages": set(),
    }
    if diffusion:
        state["diffusion_engine"] = engine
    else:  # as omni_init_app_state: the text-in WebSocket (/v1/audio/speech/stream) over it
        from vllm_omni.entrypoints.openai.serving_speech_stream import OmniStreamingSpeechHandler

        state["openai_streaming_speech"] = OmniStreamingSpeechHandler(speech_service=serving)
    return serving, state


def build_app(args, state: dict):
    """`omni_run_server_worker`'s app: vLLM's app, upstream routes swapped for vllm-omni's."""
    from vllm.entrypoints.launchers.app import build_app as build_openai_app
    from vllm_omni.entrypoints.openai.api_server import remove_route_from_app, router
    from vllm_omni.entrypoints.serve.utils.errors import _register_omni_exception_handlers

    app = build_openai_app(args, ())
    for path, methods in (
        ("/v1/chat/completions", {"POST"}),
        ("/v1/chat/completions/batch", {"POST"}),
        ("/v1/models", {"GET"}),
        ("/health", {"GET"}),
    ):
        remove_route_from_app(app, path, methods)
    app.include_router(router)
    _register_omni_exception_handlers(app)
    for key, value in state.items():
        setattr(app.state, key, value)
    return app


async def serve(args, app) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host or "127.0.0.1", args.port))
    config = uvicorn.Config(app, log_level="info", timeout_keep_alive=5, access_log=False)
    server = uvicorn.Server(config)
    app.state.server = server  # as vLLM's serve_http sets it (the error handlers read it)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    print(f"FAKE_ENGINE_PORT={sock.getsockname()[1]}", flush=True)
    await task


def main(argv: list[str]) -> int:
    args = parse_cli(argv)
    profile = schedule.PROFILES.get(args.model)
    if profile is None:
        print(f"fake_engine_server: no profile for model {args.model!r}", file=sys.stderr)
        return 2
    serving, state = build_state(args, profile)
    app = build_app(args, state)
    try:
        asyncio.run(serve(args, app))
    finally:
        serving.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
