"""One (system, model) job of the workflow: serve, warm up, sweep every concurrency point, stop.

A model server takes minutes to start on a GPU, so one job serves every concurrency point of
its model: `thetalker.launch.launch_server` starts it (free port, health wait, MPS, voice
registration), then each point runs in config order through `thetalker.client.run_benchmark`
into `<out-dir>/c<N>/` (records.jsonl, summary.json, provenance.json), and the server's whole
process group is stopped when the block is left, also on an error, SIGTERM or Ctrl-C.

The job spec is the JSON string `thetalker.workflow_config.bench_job` builds from the config,
passed whole through Snakemake's params so that any change to it reruns the job.

    python -m thetalker.bench --job '{...}' --out-dir results/runs/S/M --server-log L
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily at run time: `--help` needs neither aiohttp nor the server
    from thetalker.client import BenchOptions
    from thetalker.launch import ServerSpec

__all__ = [
    "BenchJobError",
    "JOB_FIELDS",
    "parse_job",
    "server_spec",
    "bench_options",
    "run_job",
    "main",
]

# The keys `thetalker.workflow_config.bench_job` writes and this module reads.
JOB_FIELDS = (
    "system",
    "model",
    "launcher",
    "model_id",
    "deploy_file",
    "deploy_sha256",
    "env",
    "extra_args",
    "mps",
    "sample_rate",
    "language",
    "voice",
    "ref_audio",
    "ref_text",
    "prompts",
    "concurrency",
    "requests",
    "warmup",
    "seed",
    "request_timeout_s",
    "health_timeout_s",
    "max_error_rate",
    "save_audio",
)


class BenchJobError(RuntimeError):
    """A job that cannot run or whose point failed; one line naming what."""


def parse_job(text: str) -> dict[str, Any]:
    try:
        job = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchJobError(f"--job: not valid JSON ({exc.msg})") from None
    if not isinstance(job, dict):
        raise BenchJobError("--job: expected a JSON object")
    missing = [key for key in JOB_FIELDS if key not in job]
    if missing:
        raise BenchJobError(f"--job: missing field(s) {', '.join(missing)}")
    for c in job["concurrency"]:
        if str(c) not in job["requests"]:
            raise BenchJobError(f"--job: field requests has no count for concurrency {c}")
    return job


def _ref_text(job: Mapping[str, Any]) -> str | None:
    path = job.get("ref_text")
    return Path(path).read_text(encoding="utf-8").strip() if path else None


def server_spec(job: Mapping[str, Any], server_log: Path) -> ServerSpec:
    """The `thetalker.launch.ServerSpec` of a job (port chosen free at launch)."""
    from thetalker.launch import ServerSpec

    voice = job["voice"]
    register = None
    if voice.get("clone") == "registered":
        register = {
            "name": voice.get("name", "ref"),
            "audio": job["ref_audio"],
            "ref_text": _ref_text(job),
        }
    return ServerSpec(
        launcher=job["launcher"],
        model_id=job["model_id"],
        deploy_config=job["deploy_file"],
        port=None,
        env=dict(job["env"]),
        extra_args=list(job["extra_args"]),
        mps=bool(job["mps"]),
        health_timeout_s=float(job["health_timeout_s"]),
        log_path=server_log,
        voices_dir=None,  # vllm-omni: a fresh folder beside the log, made by launch
        register_voice=register,
    )


def bench_options(
    job: Mapping[str, Any], base_url: str, concurrency: int, save_audio_dir: Path | None
) -> BenchOptions:
    """The client options of one concurrency point."""
    from thetalker.client import BenchOptions

    voice = job["voice"]
    clone = voice.get("clone")
    return BenchOptions(
        base_url=base_url,
        model=job["model_id"],
        # Cloning, inline or from the registered voice, is the Base task (the speech API
        # rejects ref_text for any other); a built-in speaker is CustomVoice.
        task_type=voice.get("task_type") or ("Base" if clone else "CustomVoice"),
        speaker=voice.get("speaker"),
        voice=voice.get("name", "ref") if clone == "registered" else None,
        ref_audio=job["ref_audio"] if clone == "inline" else None,
        ref_text=_ref_text(job) if clone == "inline" else None,
        language=job["language"],
        expected_sample_rate=job["sample_rate"],
        concurrency=int(concurrency),
        requests=int(job["requests"][str(concurrency)]),
        warmup=int(job["warmup"]),
        seed=int(job["seed"]),
        timeout_s=float(job["request_timeout_s"]),
        save_audio_dir=str(save_audio_dir) if save_audio_dir else None,
        max_error_rate=float(job["max_error_rate"]),
    )


def _check_point(job: Mapping[str, Any], concurrency: int, summary: Mapping[str, Any]) -> None:
    where = f"{job['system']}/{job['model']} c{concurrency}"
    if not summary.get("n_ok"):
        raise BenchJobError(f"{where}: no scored request succeeded")
    error_rate = summary.get("error_rate") or 0.0
    if error_rate > float(job["max_error_rate"]):
        raise BenchJobError(
            f"{where}: error rate {error_rate:.3f} above max_error_rate {job['max_error_rate']}"
        )


def run_job(job: Mapping[str, Any], out_dir: Path, server_log: Path) -> list[dict[str, Any]]:
    """Serve the job's model and run every concurrency point; return the point summaries."""
    from thetalker.client import run_benchmark
    from thetalker.launch import launch_server
    from thetalker.prompts import load_prompts
    from thetalker.provenance import utc_now, write_provenance
    from thetalker.sampler import ResourceSampler

    prompts = load_prompts(job["prompts"])
    summaries: list[dict[str, Any]] = []
    with launch_server(server_spec(job, server_log)) as server:
        print(f"serving {job['system']}/{job['model']} at {server.base_url}", flush=True)
        for concurrency in job["concurrency"]:
            point_dir = out_dir / f"c{concurrency}"
            # A rerun starts from nothing: records are appended, never mixed with old ones.
            shutil.rmtree(point_dir, ignore_errors=True)
            point_dir.mkdir(parents=True)
            audio_dir = point_dir / "audio" if job["save_audio"] else None
            opts = bench_options(job, server.base_url, concurrency, audio_dir)
            started = utc_now()
            with ResourceSampler(pid=server.pid) as sampler:
                summary = run_benchmark(opts, prompts, point_dir)
            write_provenance(
                point_dir / "provenance.json",
                server=server,
                config_slice=dict(job),
                concurrency=concurrency,
                started_at=started,
                ended_at=utc_now(),
                resources=sampler.result(),
            )
            print(
                f"c{concurrency}: n_ok={summary.get('n_ok')}/{summary.get('n_scored')} "
                f"rtfx={summary.get('rtfx')} continuity_pct={summary.get('continuity_pct')}",
                flush=True,
            )
            _check_point(job, concurrency, summary)
            summaries.append(summary)
    return summaries


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m thetalker.bench", description=__doc__)
    parser.add_argument("--job", required=True, help="the job spec, JSON (workflow_config)")
    parser.add_argument("--out-dir", required=True, type=Path, help="results/runs/SYSTEM/MODEL")
    parser.add_argument("--server-log", required=True, type=Path, help="the server's log file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        job = parse_job(args.job)
    except BenchJobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        run_job(job, args.out_dir, args.server_log)
    except KeyboardInterrupt:  # Ctrl-C: the server is stopped and the records kept already
        print(f"interrupted; finished requests are in {args.out_dir}", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line (plus a server log tail when there is one)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
