"""One (system, model) job of the workflow: serve, warm up, sweep every concurrency point, stop.

A model server takes minutes to start on a GPU, so one job serves every concurrency point of
its model: `thetalker.launch.launch_server` starts it (free port, health wait, MPS, voice
registration), then each point runs in the job's order through `thetalker.client.run_benchmark`
into its own folder (records.jsonl, summary.json, provenance.json), and the server's whole
process group is stopped when the block is left, also on an error, SIGTERM or Ctrl-C.

The job is a `thetalker.job.BenchJob`, passed as its canonical JSON (Snakemake's params, so
any change to it reruns the job). Where each point goes is the rule's business: its
records.jsonl outputs, one per point in the job's concurrency order, and each point writes its
files beside its records:

    python -m thetalker.serve_and_sweep --job '{...}' --server-log L --records R1 R2 ...
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thetalker.acceptance import point_failure
from thetalker.job import BenchJob, BenchJobError, check_job_inputs
from thetalker.point_warnings import point_warning

if TYPE_CHECKING:  # imported lazily at run time: `--help` needs neither aiohttp nor the server
    from thetalker.client import BenchOptions
    from thetalker.launch import ServerSpec

__all__ = ["server_spec", "bench_options", "run_job", "main"]


def _ref_text(job: BenchJob) -> str | None:
    return Path(job.ref_text).read_text(encoding="utf-8").strip() if job.ref_text else None


def server_spec(job: BenchJob, server_log: Path) -> ServerSpec:
    """The `thetalker.launch.ServerSpec` of a job (port chosen free at launch)."""
    from thetalker.launch import ServerSpec

    register = None
    if job.voice.get("clone") == "registered":
        register = {
            "name": job.voice.get("name", "ref"),
            "audio": job.ref_audio,
            "ref_text": _ref_text(job),
        }
    return ServerSpec(
        launcher=job.launcher,
        model_id=job.model_id,
        deploy_config=job.deploy_file,
        port=None,
        env=dict(job.env),
        extra_args=list(job.extra_args),
        mps=job.mps,
        health_timeout_s=job.health_timeout_s,
        log_path=server_log,
        voices_dir=None,  # vllm-omni: a fresh folder beside the log, made by launch
        register_voice=register,
    )


def bench_options(
    job: BenchJob, base_url: str, concurrency: int, save_audio_dir: Path | None
) -> BenchOptions:
    """The client options of one concurrency point."""
    from thetalker.client import BenchOptions

    clone = job.voice.get("clone")
    return BenchOptions(
        base_url=base_url,
        model=job.model_id,
        # Cloning, inline or from the registered voice, is the Base task (the speech API
        # rejects ref_text for any other); a built-in speaker is CustomVoice.
        task_type=job.voice.get("task_type") or ("Base" if clone else "CustomVoice"),
        speaker=job.voice.get("speaker"),
        voice=job.voice.get("name", "ref") if clone == "registered" else None,
        ref_audio=job.ref_audio if clone == "inline" else None,
        ref_text=_ref_text(job) if clone == "inline" else None,
        language=job.language,
        expected_sample_rate=job.sample_rate,
        concurrency=int(concurrency),
        requests=job.requests[int(concurrency)],
        warmup=job.warmup,
        seed=job.seed,
        timeout_s=job.request_timeout_s,
        save_audio_dir=str(save_audio_dir) if save_audio_dir else None,
        max_error_rate=job.max_error_rate,
        **dict(job.agent or {}),  # the agent mode: protocol and the text's pace
    )


def run_job(job: BenchJob, point_dirs: Sequence[Path], server_log: Path) -> list[dict[str, Any]]:
    """Serve the job's model and run each concurrency point into its folder (same order as
    `job.concurrency`); return the point summaries. A failed point stops the job."""
    from thetalker.client import LineReporter, format_point_end, run_benchmark
    from thetalker.launch import launch_server
    from thetalker.prompts import load_prompts
    from thetalker.provenance import utc_now, write_provenance
    from thetalker.sampler import ResourceSampler

    if len(point_dirs) != len(job.concurrency):
        raise BenchJobError(
            f"{len(point_dirs)} point folders for {len(job.concurrency)} concurrency points"
        )
    prompts = load_prompts(job.prompts)
    # "c8: 120/300 done, 2 errors, 41 s elapsed, ~62 s left" every few seconds, into the log.
    progress = LineReporter(functools.partial(print, flush=True))
    summaries: list[dict[str, Any]] = []
    with launch_server(server_spec(job, server_log)) as server:
        print(f"serving {job.system}/{job.model} at {server.base_url}", flush=True)
        for concurrency, point_dir in zip(job.concurrency, point_dirs, strict=True):
            # A rerun starts from nothing: records are appended, never mixed with old ones.
            shutil.rmtree(point_dir, ignore_errors=True)
            point_dir.mkdir(parents=True)
            audio_dir = point_dir / "audio" if job.save_audio else None
            opts = bench_options(job, server.base_url, concurrency, audio_dir)
            started = utc_now()
            with ResourceSampler(pid=server.pid) as sampler:
                summary = run_benchmark(opts, prompts, point_dir, progress)
            write_provenance(
                point_dir / "provenance.json",
                server=server,
                config_slice=job.to_dict(),
                concurrency=concurrency,
                started_at=started,
                ended_at=utc_now(),
                resources=sampler.result(),
            )
            print(format_point_end(summary, f"c{concurrency}"), flush=True)
            warning = point_warning(summary, f"{job.system}/{job.model} c{concurrency}")
            if warning:  # accepted (max_error_rate) but not clean: said in the job's log
                print(warning, flush=True)
            failure = point_failure(summary, job.max_error_rate)
            if failure:
                raise BenchJobError(f"{job.system}/{job.model} c{concurrency}: {failure}")
            summaries.append(summary)
    return summaries


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--job", required=True, help="the job spec, BenchJob JSON")
    parser.add_argument("--server-log", required=True, type=Path, help="the server's log file")
    parser.add_argument(
        "--records",
        required=True,
        nargs="+",
        type=Path,
        help="each point's records.jsonl, in the job's concurrency order (files go beside it)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m thetalker.serve_and_sweep"
) -> int:
    args = _parser(prog).parse_args(argv)
    try:
        job = BenchJob.from_json(args.job)
        check_job_inputs(job)  # bad input is exit 2, before any server starts
    except BenchJobError as exc:
        print(f"error: --job: {exc}", file=sys.stderr)
        return 2
    try:
        point_dirs = [records.parent for records in args.records]
        run_job(job, point_dirs, args.server_log)
    except KeyboardInterrupt:  # Ctrl-C: the server is stopped and the records kept already
        print(
            f"interrupted; finished requests are in {args.records[0].parent.parent}",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:  # one clear line (plus a server log tail when there is one)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
