"""Resource sampler: how much memory (and GPU or CPU) the served model used during a run.

A background thread samples every ``interval_s`` (0.5 s by default) while a load point runs:

- ``nvidia-smi`` present (source ``"nvidia-smi"``): device ``memory.used`` and
  ``utilization.gpu`` of the GPUs this job may use (``CUDA_VISIBLE_DEVICES``, which nvidia-smi
  itself ignores, is passed as ``--id``), plus per-process ``used_memory`` of the server's
  process tree from ``--query-compute-apps``. Parsed from ``--format=csv,noheader,nounits``
  (plain numbers; ``[N/A]`` or ``[Not Supported]`` count as missing).
- otherwise (source ``"proc"``): the server's process tree (the process, its descendants and
  its process group when it leads one) through psutil: summed RSS, and CPU seconds whose rate
  gives utilisation in percent of one core (it can exceed 100 on several cores).

Energy (nvidia-smi only): each GPU sample also asks ``power.draw`` (watts, summed over the
job's GPUs). No energy figure is made up: a ``[N/A]`` draw, an MIG slice (its draw is the
whole GPU's) or another process on the job's GPUs stops the power samples and says why in
``power_note``. ``mark("begin")`` / ``mark("end")`` (the client's scored window) take a sample
at once and keep ``scored``: the window's seconds, CPU-seconds (proc) and joules (trapezoid,
thetalker.metrics.usage), so warmup and probe fall outside. ``idle_power.measure_idle_power``
takes the draw with the server loaded and nothing sent (before a job's first point).

Use it as a context manager around one load point, then read ``result()``::

    with ResourceSampler(pid=server.pid) as sampler:
        run_benchmark(opts, prompts, point_dir)
    peaks = sampler.result()   # dict, goes into provenance.json as "resources"

The thread never raises: a failed sample is counted (``errors``) with its last message, and
the sampler keeps going. ``stop()`` (or leaving the block) joins the thread promptly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from thetalker.metrics.usage import trapezoid_j
from thetalker.pipeline.gpu_power import mean_power_w, parse_power_csv
from thetalker.pipeline.machine_load import MachineLoad

__all__ = [
    "DEFAULT_INTERVAL_S",
    "ResourcePeaks",
    "ResourceSampler",
    "parse_gpu_csv",
    "parse_apps_csv",
    "process_tree_pids",
]

DEFAULT_INTERVAL_S = 0.5
_NVIDIA_SMI_TIMEOUT_S = 10.0
_MIB = 1024 * 1024


@dataclass
class ResourcePeaks:
    """What the sampler saw. Memory in MiB, utilisation in percent.

    source: "nvidia-smi", "proc", or "none" (no nvidia-smi and no pid to watch).
    peak_memory_mib: GPU: peak of device memory.used summed over the job's GPUs;
        proc: peak summed RSS of the server's process tree.
    peak_process_memory_mib: GPU only: peak used_memory of the server's process tree
        (all compute apps when no pid was given); None when nvidia-smi listed none.
    mean/peak_utilization_pct: GPU: utilization.gpu averaged over the job's GPUs;
        proc: CPU percent of one core, from CPU-seconds deltas between samples.
    cpu_seconds: proc only: CPU seconds the tree used while sampled.
    other_cpu_pct, load_average_1m, cpus: the machine's load over the same window, from
        either source (thetalker.pipeline.machine_load): the share of its CPU that processes
        other than the server and the client used, the 1-minute load average at the end, and
        its logical CPUs.
    mean_power_w: nvidia-smi only: time-weighted mean power.draw (W) over the whole sampling.
    power_note: why there is no energy figure (None when power was read throughout).
    scored: the scored window's figures between mark("begin") and mark("end"): `seconds`,
        `cpu_seconds` (proc; else None), `energy_j` (None without power),
        `mean_utilization_pct` and `cpus` (proc: the cores the server may use); None unmarked.
    """

    source: str
    samples: int = 0
    interval_s: float = DEFAULT_INTERVAL_S
    peak_memory_mib: float | None = None
    peak_process_memory_mib: float | None = None
    mean_utilization_pct: float | None = None
    peak_utilization_pct: float | None = None
    cpu_seconds: float | None = None
    gpu_ids: str | None = None
    other_cpu_pct: float | None = None
    load_average_1m: float | None = None
    cpus: int | None = None
    errors: int = 0
    last_error: str | None = None
    mean_power_w: float | None = None
    power_note: str | None = None
    scored: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(text: str) -> float | None:
    """One nvidia-smi CSV cell (nounits): a number, or None for [N/A] / [Not Supported]."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_gpu_csv(text: str) -> list[tuple[float | None, float | None]]:
    """Lines of ``memory.used,utilization.gpu`` (csv,noheader,nounits), one per GPU."""
    rows = []
    for line in text.splitlines():
        cells = line.split(",")
        if len(cells) != 2:
            continue
        rows.append((_number(cells[0]), _number(cells[1])))
    return rows


def parse_apps_csv(text: str) -> dict[int, float]:
    """Lines of ``pid,used_memory`` (csv,noheader,nounits) -> MiB per pid (summed over GPUs)."""
    used: dict[int, float] = {}
    for line in text.splitlines():
        cells = line.split(",")
        if len(cells) != 2 or not cells[0].strip().isdigit():
            continue
        mib = _number(cells[1])
        if mib is not None:
            pid = int(cells[0])
            used[pid] = used.get(pid, 0.0) + mib
    return used


def process_tree_pids(pid: int) -> list[psutil.Process]:
    """The process, its descendants, and its process group when it leads one (a server
    started in its own session): daemonised helpers that left the tree still count."""
    root = psutil.Process(pid)
    procs = {root.pid: root}
    for child in root.children(recursive=True):
        procs[child.pid] = child
    try:
        leads_group = os.getpgid(pid) == pid
    except OSError:
        leads_group = False
    if leads_group:
        for proc in psutil.process_iter():
            try:
                if proc.pid not in procs and os.getpgid(proc.pid) == pid:
                    procs[proc.pid] = proc
            except (OSError, psutil.Error):
                continue
    return list(procs.values())


def _visible_gpu_ids() -> str | None:
    """CUDA_VISIBLE_DEVICES as nvidia-smi --id takes it (indices or UUIDs), else None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value or value.startswith("-"):
        return None
    return value


@dataclass
class _Accumulator:
    memory: list[float] = field(default_factory=list)
    process_memory: list[float] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    power: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, watts)


class ResourceSampler:
    """Background sampler of the server's memory and utilisation; see the module docstring.

    pid: the server's process (its tree is watched); None watches the GPUs only.
    source: "auto" (nvidia-smi when it answers, else proc), "nvidia-smi" or "proc".
    """

    def __init__(
        self,
        pid: int | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        source: str = "auto",
        nvidia_smi: str | None = None,
    ) -> None:
        if source not in ("auto", "nvidia-smi", "proc"):
            raise ValueError(f"sampler source {source!r}: use auto, nvidia-smi or proc")
        if interval_s <= 0:
            raise ValueError(f"sampler interval_s {interval_s}: must be positive")
        self.pid = pid
        self.interval_s = float(interval_s)
        self._requested = source
        self._nvidia_smi = nvidia_smi
        self._gpu_ids = _visible_gpu_ids()
        self._acc = _Accumulator()
        self._samples = 0
        self._errors = 0
        self._last_error: str | None = None
        self._cpu_by_pid: dict[int, float] = {}
        self._last_cpu_t: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.source = "none"
        self._machine = MachineLoad(self._server_tree)
        self._power_note: str | None = None
        self._sampling = threading.RLock()
        # phase -> (t, cpu s, power samples, utilisation samples)
        self._marks: dict[str, tuple[float, float, int, int]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> ResourceSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            return
        self.source = self._choose_source()
        self._machine_safely()  # the window of the machine's load opens
        self._sample_safely()  # one sample at once, so even a short run has data
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=_NVIDIA_SMI_TIMEOUT_S + 5)
        self._thread = None
        self._sample_safely()  # and one at the end
        self._machine_safely()

    def mark(self, phase: str) -> None:
        """The scored window's `begin` or `end`: a sample now, and where the sums stood."""
        with self._sampling:  # no sample of the thread's in between
            self._sample_safely()
            with self._lock:
                power = self._acc.power
                # With power, the window's ends are its end samples' times: energy / seconds
                # is the mean draw exactly.
                t = power[-1][0] if power and self._power_note is None else time.monotonic()
                n_util = len(self._acc.utilization)
                self._marks[phase] = (t, self._acc.cpu_seconds, len(power), n_util)

    def result(self) -> dict[str, Any]:
        with self._lock:
            acc = self._acc
            util = acc.utilization
            peaks = ResourcePeaks(
                source=self.source,
                samples=self._samples,
                interval_s=self.interval_s,
                peak_memory_mib=_round(max(acc.memory)) if acc.memory else None,
                peak_process_memory_mib=(
                    _round(max(acc.process_memory)) if acc.process_memory else None
                ),
                mean_utilization_pct=_round(sum(util) / len(util)) if util else None,
                peak_utilization_pct=_round(max(util)) if util else None,
                cpu_seconds=_round(acc.cpu_seconds) if self.source == "proc" else None,
                gpu_ids=self._gpu_ids if self.source == "nvidia-smi" else None,
                errors=self._errors,
                last_error=self._last_error,
                mean_power_w=mean_power_w(acc.power) if self._power_note is None else None,
                power_note=self._power_note if self.source == "nvidia-smi" else None,
                scored=self._scored(acc),
            )
        try:
            machine = self._machine.result()
        except Exception as exc:  # a figure missing, never a failed point
            self._record_error(exc)
            machine = {}
        return {**peaks.as_dict(), **{k: v for k, v in machine.items() if v is not None}}

    def _scored(self, acc: _Accumulator) -> dict[str, Any] | None:
        if "begin" not in self._marks or "end" not in self._marks:
            return None
        (t0, cpu0, p0, u0), (t1, cpu1, p1, u1) = self._marks["begin"], self._marks["end"]
        util = acc.utilization[u0:u1]  # the samples after begin's, up to end's
        energy = None
        if self.source == "nvidia-smi" and self._power_note is None:
            # The samples from the one taken at begin to the one taken at end.
            window = acc.power[max(p0 - 1, 0) : p1]
            energy = trapezoid_j([t for t, _ in window], [w for _, w in window])
        return {  # to the microsecond / microjoule: the energy is checked against seconds
            "seconds": round(t1 - t0, 6),
            "cpu_seconds": round(cpu1 - cpu0, 6) if self.source == "proc" else None,
            "energy_j": round(energy, 6) if energy is not None else None,
            # GPU: mean utilization.gpu; proc: percent of one core (cpus: the cores it may use)
            "mean_utilization_pct": _round(sum(util) / len(util)) if util else None,
            "cpus": self._cpus() if self.source == "proc" else None,
        }

    def _cpus(self) -> int | None:
        try:  # the cores the server may run on (its affinity), else the machine's
            return len(psutil.Process(self.pid).cpu_affinity() or []) or psutil.cpu_count()
        except (psutil.Error, AttributeError, TypeError):
            return psutil.cpu_count()

    # -- sampling --------------------------------------------------------------------------

    def _choose_source(self) -> str:
        if self._requested in ("auto", "nvidia-smi"):
            program = self._nvidia_smi or shutil.which("nvidia-smi")
            if program is not None:
                self._nvidia_smi = program
                try:
                    self._query_gpu()
                    return "nvidia-smi"
                except Exception as exc:  # no driver, no device: fall back when allowed
                    if self._requested == "nvidia-smi":
                        self._record_error(exc)
                        return "nvidia-smi"
            elif self._requested == "nvidia-smi":
                self._record_error(RuntimeError("nvidia-smi not found on PATH"))
                return "nvidia-smi"
        return "proc" if self.pid is not None else "none"

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_safely()

    def _sample_safely(self) -> None:
        # One sample at a time: mark() samples from the client's thread, and two at once
        # would count the same CPU-seconds twice (both from the same previous sample).
        with self._sampling:
            try:
                if self.source == "nvidia-smi":
                    self._sample_gpu()
                elif self.source == "proc":
                    self._sample_proc()
            except Exception as exc:  # the thread must outlive any one bad sample
                self._record_error(exc)

    def _server_tree(self) -> set[int]:
        if self.pid is None:
            return set()
        try:
            return {p.pid for p in process_tree_pids(self.pid)}
        except psutil.Error:  # the server is gone: nothing of it left to count
            return set()

    def _machine_safely(self) -> None:
        try:
            self._machine.snapshot()
        except Exception as exc:  # psutil on an odd system: the figure goes missing
            self._record_error(exc)

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"

    def _run_smi(self, query: str) -> str:
        assert self._nvidia_smi is not None
        cmd = [self._nvidia_smi, query, "--format=csv,noheader,nounits"]
        if self._gpu_ids:
            cmd.append(f"--id={self._gpu_ids}")
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(
                f"nvidia-smi exited {done.returncode}: {message[-1] if message else ''}"
            )
        return done.stdout

    def _query_gpu(self) -> list[tuple[float | None, float | None]]:
        rows = parse_gpu_csv(self._run_smi("--query-gpu=memory.used,utilization.gpu"))
        if not rows:
            raise RuntimeError("nvidia-smi listed no GPU")
        return rows

    def _sample_gpu(self) -> None:
        rows = self._query_gpu()
        apps = parse_apps_csv(self._run_smi("--query-compute-apps=pid,used_memory"))
        memory = [m for m, _ in rows if m is not None]
        util = [u for _, u in rows if u is not None]
        process_mib = self._tree_gpu_memory(apps)
        self._sample_power(apps)
        with self._lock:
            self._samples += 1
            if memory:
                self._acc.memory.append(sum(memory))
            if util:
                self._acc.utilization.append(sum(util) / len(util))
            if process_mib is not None:
                self._acc.process_memory.append(process_mib)

    def _sample_power(self, apps: dict[int, float]) -> None:
        """One power.draw sample, unless a reason not to read power was found (kept)."""
        if self._power_note is not None:
            return
        foreign = self._foreign_pids(apps)
        if foreign:
            self._power_note = (
                f"shared GPU: {len(foreign)} other process(es) on it (pid {min(foreign)})"
            )
            return
        try:
            watts, why = parse_power_csv(self._run_smi("--query-gpu=power.draw,mig.mode.current"))
        except Exception as exc:  # an old driver without the field: no energy, said why
            watts, why = None, f"power.draw unreadable: {exc}"
        with self._lock:
            if watts is None:
                self._power_note = why
            else:
                self._acc.power.append((time.monotonic(), watts))

    def _foreign_pids(self, apps: dict[int, float]) -> set[int]:
        """Compute processes on the job's GPUs outside the server's tree (none without a pid)."""
        if self.pid is None or not apps:
            return set()
        try:
            mine = {p.pid for p in process_tree_pids(self.pid)}
        except psutil.Error:
            return set()
        return set(apps) - mine

    def _tree_gpu_memory(self, apps: dict[int, float]) -> float | None:
        if not apps:
            return None
        if self.pid is None:
            return sum(apps.values())
        try:
            pids = {p.pid for p in process_tree_pids(self.pid)}
        except psutil.Error:
            return None
        mine = [mib for pid, mib in apps.items() if pid in pids]
        return sum(mine) if mine else None

    def _sample_proc(self) -> None:
        assert self.pid is not None
        now = time.monotonic()
        rss = 0
        cpu_delta = 0.0
        seen: dict[int, float] = {}
        for proc in process_tree_pids(self.pid):
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    cpu = times.user + times.system
            except psutil.Error:
                continue  # exited between listing and reading
            seen[proc.pid] = cpu
            # A process first seen now contributes its whole CPU time only on the first
            # sample (the baseline); later newcomers count from zero.
            previous = self._cpu_by_pid.get(proc.pid, 0.0 if self._last_cpu_t else cpu)
            cpu_delta += max(0.0, cpu - previous)
        with self._lock:
            self._samples += 1
            self._acc.memory.append(rss / _MIB)
            if self._last_cpu_t is not None and now > self._last_cpu_t:
                self._acc.cpu_seconds += cpu_delta
                self._acc.utilization.append(100.0 * cpu_delta / (now - self._last_cpu_t))
            self._cpu_by_pid = seen
            self._last_cpu_t = now


def _round(value: float) -> float:
    return round(float(value), 2)
