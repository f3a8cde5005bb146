"""One (system, model) job of the workflow: serve, warm up, sweep every point, search, stop.

A model server takes minutes to start on a GPU, so one job serves every load point of its
model: `thetalker.lifecycle.launch.launch_server` starts it (free port, health wait, MPS, voice
registration), then each point runs in the job's order through `thetalker.client.run_benchmark`
into its own folder (records.jsonl, summary.json, provenance.json), and the server's whole
process group is stopped when the block is left, also on an error, SIGTERM or Ctrl-C.

The points: the concurrency grid (`c{N}`, closed loop), then the request rates (`r{R}`, open
loop). With `repeats` N > 1 each point runs N times back to back (`{point}/round1/` ..
`roundN/`). With a capacity search (`capacity.refine`) the job then bisects, on the same
server, between the last load that holds the service level and the first that does not
(`thetalker.pipeline.capacity_search`, at most `capacity.max_steps` points): those search
points are points like any other, written under `search/{point}/` beside the manifest
`search.json` (`--search-manifest`), which lists them (none when the search is off or has no
bracket) and the capacity the job found. A search point whose requests fail past `max_error_rate`
does not hold the level; it does not fail the job.

The job is a `thetalker.pipeline.job.BenchJob`, passed as its canonical JSON (Snakemake's params, so
any change to it reruns the job). Where each grid point goes is the rule's business: its
records.jsonl outputs, one per point and round in the job's order (points, then rounds),
and each point writes its files beside its records (server_metrics.json too: the server's
`/metrics` read just before and after the scored requests, `thetalker.pipeline.server_metrics`):

    python -m thetalker.pipeline.serve_and_sweep --job '{...}' --server-log L --records R1 R2 ... \
        [--search-manifest results/runs/S/M/search.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thetalker.data import layout
from thetalker.data.manifest import SearchPoint, write_search_manifest
from thetalker.pipeline.capacity_search import Load, manifest_of, search
from thetalker.pipeline.job import BenchJob, BenchJobError, check_job_inputs
from thetalker.pipeline.verdicts import point_failure, point_warning

if TYPE_CHECKING:  # imported lazily at run time: `--help` needs neither aiohttp nor the server
    from thetalker.client import BenchOptions
    from thetalker.lifecycle.launch import ServerSpec

__all__ = [
    "Load",
    "grid_loads",
    "requests_at",
    "server_spec",
    "bench_options",
    "metrics_path",
    "run_job",
    "main",
]


def grid_loads(job: BenchJob) -> list[Load]:
    """The job's grid in the order it runs: concurrency points, then request rates."""
    return [Load(concurrency=c) for c in job.concurrency] + [
        Load(request_rate=r) for r in job.request_rates
    ]


def requests_at(job: BenchJob, load: Load) -> int:
    """Scored requests at a load: the config's count on the grid; a search point between
    grid points gets the count of the grid point below it, and at least one per stream (so
    the load is reached); a request-rate point gets `rate_requests`."""
    if load.concurrency is None:
        return int(job.rate_requests or 1)
    if load.concurrency in job.requests:
        return job.requests[load.concurrency]
    below = [c for c in job.concurrency if c < load.concurrency]
    base = job.requests[max(below)] if below else job.requests[min(job.concurrency)]
    return max(base, load.concurrency)


def _ref_text(job: BenchJob) -> str | None:
    return Path(job.ref_text).read_text(encoding="utf-8").strip() if job.ref_text else None


def server_spec(job: BenchJob, server_log: Path) -> ServerSpec:
    """The `thetalker.lifecycle.launch.ServerSpec` of a job (port chosen free at launch)."""
    from thetalker.lifecycle.launch import ServerSpec

    register = None
    if job.voice.get("clone") == "registered":
        register = {
            "name": job.registered_voice(),
            "audio": job.ref_audio,
            "ref_text": _ref_text(job),
        }
    return ServerSpec(
        launcher=job.launcher,
        model_id=job.model_id,
        deploy_config=job.deploy_file,
        port=None,
        env=dict(job.env),
        secret_env=list(job.secret_env),  # names only: values come from this environment
        extra_args=list(job.extra_args),
        mps=job.mps,
        health_timeout_s=job.health_timeout_s,
        log_path=server_log,
        voices_dir=None,  # vllm-omni: a fresh folder beside the log, made by launch
        register_voice=register,
        profile=job.profile,
        base_url=job.base_url,
        command=job.command,
        ready_path=job.ready_path,
        serving_env=job.serving_env,
        api_key_env=job.api_key_env,
    )


def bench_options(
    job: BenchJob,
    base_url: str,
    concurrency: int | None,
    save_audio_dir: Path | None,
    request_rate: float | None = None,
) -> BenchOptions:
    """The client options of one point: `concurrency` streams, or (concurrency None) open
    loop at `request_rate`, with as many connections as requests (arrivals never wait)."""
    from thetalker.client import BenchOptions

    load = Load(concurrency=concurrency, request_rate=None if concurrency else request_rate)
    requests = requests_at(job, load)

    clone = job.voice.get("clone")
    return BenchOptions(
        base_url=base_url,
        model=job.model_id,
        # Cloning, inline or from the registered voice, is the Base task (the speech API
        # rejects ref_text for any other); a built-in speaker is CustomVoice.
        task_type=job.voice.get("task_type") or ("Base" if clone else "CustomVoice"),
        speaker=job.voice.get("speaker"),
        voice=job.registered_voice(),
        ref_audio=job.ref_audio if clone == "inline" else None,
        ref_text=_ref_text(job) if clone == "inline" else None,
        language=job.language,
        expected_sample_rate=job.sample_rate,
        concurrency=int(concurrency) if concurrency is not None else requests,
        request_rate=load.request_rate,
        requests=requests,
        warmup=job.warmup,
        seed=job.seed,
        timeout_s=job.request_timeout_s,
        save_audio_dir=str(save_audio_dir) if save_audio_dir else None,
        max_error_rate=job.max_error_rate,
        max_in_flight=job.max_in_flight if load.request_rate is not None else None,
        onset=job.onset,
        **dict(job.agent or {}),  # the agent mode: protocol and the text's pace
        **_server_options(job),
    )


def _server_options(job: BenchJob) -> dict[str, Any]:
    """The client's `server` (the API the job's server speaks) and, when the system names
    one, `api_key_env` (else BenchOptions' default: the usual variables)."""
    options: dict[str, Any] = {"server": job.speaks}
    if job.api_key_env is not None:
        options["api_key_env"] = job.api_key_env
    return options


@dataclass
class _Session:
    """What the points of one job share: the job, its server, the prompts, the progress."""

    job: BenchJob
    server: Any
    prompts: Any
    progress: Any
    idle_power: dict[str, Any] | None = None  # the draw before the first point (sampler)

    def run_point(self, load: Load, dirs: Sequence[Path], search: bool = False) -> dict[str, Any]:
        """Run a load's rounds into `dirs`; return the pooled summary of its records (as
        thetalker.report.points computes it), with `failure` when a round failed its
        acceptance. A failed grid point stops the job; a failed search point only fails."""
        from thetalker.client import format_point_end, run_benchmark
        from thetalker.data.record_reads import read_rounds
        from thetalker.data.record_writes import write_json
        from thetalker.metrics import summarize_point
        from thetalker.pipeline.idle_power import IDLE_POWER_S, measure_idle_power
        from thetalker.pipeline.provenance import collect_provenance, utc_now
        from thetalker.pipeline.sampler import ResourceSampler
        from thetalker.pipeline.server_metrics import PointScrape

        job, name = self.job, f"{self.job.system}/{self.job.model}"
        failure = None
        if self.idle_power is None:  # once, the server loaded and nothing sent yet
            sampler = ResourceSampler(pid=self.server.pid)
            self.idle_power = measure_idle_power(sampler, IDLE_POWER_S)
        for k, point_dir in enumerate(dirs, start=1):
            label = load.label if len(dirs) == 1 else f"{load.label} round {k}"
            # A rerun starts from nothing: records are appended, never mixed with old ones.
            shutil.rmtree(point_dir, ignore_errors=True)
            point_dir.mkdir(parents=True)
            audio_dir = point_dir / "audio" if job.save_audio else None
            opts = bench_options(
                job, self.server.base_url, load.concurrency, audio_dir, load.request_rate
            )
            started = utc_now()
            # The server's own view (server_metrics.json): /metrics around the scored requests.
            scraper = PointScrape(self.server.base_url, path=metrics_path(job.launcher))
            try:
                with ResourceSampler(pid=self.server.pid) as sampler:
                    summary = run_benchmark(
                        opts, self.prompts, point_dir, self.progress, _window(scraper, sampler)
                    )
            finally:
                scraper.end()  # a point cut short still says what the server counted
                scraper.write(point_dir)
            provenance = collect_provenance(
                server=self.server,
                config_slice=job.to_dict(),
                concurrency=load.concurrency,
                started_at=started,
                ended_at=utc_now(),
                resources=sampler.result(),
            )
            marks = {"point": load.label, "request_rate": load.request_rate, "round": k}
            marks["search_point"] = search  # added by the capacity search, off the grid
            marks["server_metrics"] = scraper.note(getattr(self.server, "command", None))
            marks["idle_power"] = self.idle_power
            write_json(point_dir / "provenance.json", {**provenance, **marks})
            if search:
                write_json(point_dir / "summary.json", {**summary, "search_point": True})
            print(format_point_end(summary, label), flush=True)
            warning = point_warning(summary, f"{name} {label}")
            if warning:  # accepted (max_error_rate) but not clean: said in the job's log
                print(warning, flush=True)
            failure = failure or point_failure(summary, job.max_error_rate)
            if failure and not search:
                raise BenchJobError(f"{name} {label}: {failure}")
        records = [r for one in read_rounds([d / "records.jsonl" for d in dirs]) for r in one]
        pooled = summarize_point(records, concurrency=load.concurrency).to_dict()
        return {**pooled, "failure": failure} if failure else pooled


def metrics_path(launcher: str) -> str | None:
    """Where a server the launcher starts exports Prometheus metrics (thetalker.backends),
    None if nowhere."""
    from thetalker import backends

    try:
        return backends.launcher(launcher).metrics_path
    except backends.UnknownBackendError:
        return "/metrics"  # a kind this checkout does not know: ask, and record the answer


def _window(scraper: Any, sampler: Any = None) -> Callable[[str, float], None]:
    """run_benchmark's scored window, driving a `PointScrape` and the resource sampler's
    marks (the window's CPU-seconds and energy)."""

    def window(phase: str, t_origin: float) -> None:
        if sampler is not None:
            sampler.mark(phase)
        if phase == "begin":
            scraper.begin(t_origin)
        else:
            scraper.end()

    return window


def _gpu_slot_for(job: BenchJob) -> AbstractContextManager[Any]:
    """The job's GPU for its whole life (thetalker.lifecycle.gpu_slots), or nothing to hold."""
    from thetalker.lifecycle.gpu_slots import GPU_LAUNCHERS, gpu_slot

    if job.launcher not in GPU_LAUNCHERS:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        say = functools.partial(print, flush=True)
        with gpu_slot(f"{job.system}/{job.model}", say=say) as slot:
            if slot is not None:
                print(f"GPU {slot.gpu.index} ({slot.gpu.uuid}, {slot.source})", flush=True)
            yield

    return held()


def run_job(
    job: BenchJob,
    records: Sequence[Path],
    server_log: Path,
    search_manifest: Path | None = None,
    launch: Callable[[ServerSpec], AbstractContextManager[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Serve the job's model and run each grid point (and round) into the folder of its
    records file (in the job's order: points, then rounds), then the capacity search when
    the job has one and `search_manifest` is given (search points under its `search/`
    folder; the manifest written in every case). Returns the grid points' summaries.
    `launch`: what serves the spec (thetalker.lifecycle.launch.launch_server; a test's own
    server). The job holds its run's lock (thetalker.lifecycle.run_lock) throughout, and
    refuses (RunBusyError) before deleting anything when an earlier run still holds it."""
    from thetalker.lifecycle.run_lock import lock_path, run_lock

    loads = grid_loads(job)
    if len(records) != len(loads) * job.repeats:
        raise BenchJobError(
            f"{len(records)} records files for {len(loads)} points x {job.repeats} rounds"
        )
    groups = [
        [Path(r).parent for r in records[i * job.repeats : (i + 1) * job.repeats]]
        for i in range(len(loads))
    ]
    for load, group in zip(loads, groups, strict=True):
        for k, folder in enumerate(group, start=1):
            _check_destination(folder / "records.jsonl", load, k if job.repeats > 1 else None)
    # Nothing is deleted before this job knows it is the run's only writer (run_lock).
    with run_lock(lock_path(server_log)):
        return _run_locked(job, loads, groups, server_log, search_manifest, launch)


def _check_destination(path: Path, load: Load, round_k: int | None) -> None:
    """The records file given for `load` (round `round_k`; None: a single run) names that
    point in its folders (thetalker.data.layout): the outputs are matched to the points by
    what they say, never by their order alone, so an order of `expand()` other than the
    job's cannot put one point's records in another's folder. BenchJobError otherwise."""
    try:
        where = layout.point_location(path)
    except layout.PointPathError as exc:
        raise BenchJobError(f"records file {exc}") from None
    said = where.point + (f"/{layout.round_name(where.round)}" if where.repeated else "")
    wanted = load.label + (f"/{layout.round_name(round_k)}" if round_k is not None else "")
    if said != wanted:
        raise BenchJobError(
            f"records file {path}: its folder says {said}, but it is given the load {wanted} "
            "(the job's points in order: closed loop, then open loop, each round in turn)"
        )


def _run_locked(
    job: BenchJob,
    loads: list[Load],
    groups: list[list[Path]],
    server_log: Path,
    search_manifest: Path | None,
    launch: Callable[[ServerSpec], AbstractContextManager[Any]] | None,
) -> list[dict[str, Any]]:
    from thetalker.client import LineReporter
    from thetalker.data.prompts import load_prompts
    from thetalker.lifecycle.launch import launch_server
    from thetalker.util.fdlimit import ensure_fd_limit

    search_dir = search_manifest.with_suffix("") if search_manifest else None
    if search_dir is not None:  # a rerun's search starts from nothing too
        shutil.rmtree(search_dir, ignore_errors=True)
    prompts = load_prompts(job.prompts)
    # A descriptor per stream (open loop: every request may be in flight), or refused now.
    ensure_fd_limit(max([*job.concurrency, *([job.rate_requests or 1] * bool(job.request_rates))]))
    # "c8: 120/300 done, 2 errors, 41 s elapsed, ~62 s left" every few seconds, into the log.
    progress = LineReporter(functools.partial(print, flush=True))
    summaries: dict[Load, dict[str, Any]] = {}
    points: list[SearchPoint] = []
    capacity: dict[str, Any] = {}
    with (
        _gpu_slot_for(job),
        (launch or launch_server)(server_spec(job, server_log)) as server,
    ):
        print(f"serving {job.system}/{job.model} at {server.base_url}", flush=True)
        session = _Session(job, server, prompts, progress)
        for load, dirs in zip(loads, groups, strict=True):
            summaries[load] = session.run_point(load, dirs)
        if job.capacity is not None and search_dir is not None:
            points, capacity = search(session, summaries, search_dir)
    if search_manifest is not None:
        write_search_manifest(search_manifest, manifest_of(job, points, capacity))
    return list(summaries.values())


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--job", required=True, help="the job spec, BenchJob JSON")
    parser.add_argument("--server-log", required=True, type=Path, help="the server's log file")
    parser.add_argument(
        "--records",
        required=True,
        nargs="+",
        type=Path,
        help="each point's records.jsonl, in the job's order: points, then rounds "
        "(files go beside it)",
    )
    parser.add_argument(
        "--search-manifest",
        type=Path,
        help="search.json to write (always): the capacity search's points, under search/ beside it",
    )
    parser.add_argument(
        "--slo",
        help="the capacity search's service level (capacity.slo JSON), given at run time "
        "rather than in the job spec: the settings search's jobs (thetalker.pipeline."
        "settings_grid.search_job), so a change of it reruns none of them",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m thetalker.pipeline.serve_and_sweep"
) -> int:
    args = _parser(prog).parse_args(argv)
    try:
        job = BenchJob.from_json(args.job)
        if args.slo is not None and job.capacity is not None:
            job = dataclasses.replace(job, capacity={**job.capacity, "slo": json.loads(args.slo)})
        check_job_inputs(job)  # bad input is exit 2, before any server starts
    except (BenchJobError, ValueError) as exc:  # a --slo that is no JSON too
        print(f"error: --job: {exc}", file=sys.stderr)
        return 2
    try:
        run_job(job, args.records, args.server_log, args.search_manifest)
    except KeyboardInterrupt:  # Ctrl-C: the server is stopped and the records kept already
        print(
            f"interrupted; finished requests are in {args.records[0].parent.parent}",
            file=sys.stderr,
        )
        return 130
    except asyncio.CancelledError:  # SIGTERM where no server guard holds it (an external
        # server): the run was cancelled as Ctrl-C cancels it (thetalker.client.run)
        print(
            f"terminated; finished requests are in {args.records[0].parent.parent}",
            file=sys.stderr,
        )
        return 143
    except Exception as exc:  # one clear line (plus a server log tail when there is one)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
