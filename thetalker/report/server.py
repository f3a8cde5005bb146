"""server.md, server.csv and server.png: the server's own view of each point beside the client's.

Per point (rounds pooled), from the point's `server_metrics.json` (the server's `/metrics`
deltas over the scored requests, `thetalker.pipeline.server_metrics`), its records and its
provenance (the resource sampler: a GPU, or the server process tree's CPU and memory):

- client first audio: TTFA p50 / mean over the ok records (the client's clock);
- server TTFP p50 / p95 from the `audio_ttfp_s` buckets, each with the bucket it lies in
  (the resolution the server's buckets allow), and the exact mean (sum / count);
- queue wait (`request_queue_wait_s`, mean) and generation time per stage
  (`stage_gen_time_s`, mean per `stage` label);
- server-side continuity at each threshold it exports: `audio_continuity_ok{threshold_ms}`
  over the streams it completed;
- requests the server counted (streams completed + aborted; without stream families, the
  requests it finished) against the scored requests the client sent: `lost` = sent -
  counted, non-zero when a request went missing between them (not for the agent mode's
  WebSocket sessions: one is many generations, or none the server counts as a stream, so
  counts, the gap and the figure's parts are left out there);
- the gap client TTFA mean - server TTFP mean: connection, HTTP, network and the client;
- busy (the sampler's mean utilization) and peak memory, each naming its device: the GPU
  (nvidia-smi) or, with none, the server process tree's CPU (percent of one core) and RSS.

The figure, one panel per (system, model) with server metrics: the client's mean first
audio at each load, stacked as queue (queue wait mean) + generation (TTFP mean - queue
wait mean) + transport (client TTFA mean - TTFP mean). Means, because means add up: the
three parts sum to the client's mean exactly (a part below zero, possible when the server
saw other requests than the client scored, is drawn as zero and said in the table).

    python -m thetalker.report.server --server-metrics results/runs/*/*/*/server_metrics.json \\
        [--search-manifests results/runs/*/*/search.json] --table server.md --figure server.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from thetalker.data.record_reads import RecordError, read_json, read_records  # noqa: E402
from thetalker.pipeline.server_metrics import (  # noqa: E402
    FILE_NAME,
    Quantile,
    histogram_quantile,
    merge_histograms,
)
from thetalker.report.common import DPI, MISSING, markdown_table, write_table  # noqa: E402
from thetalker.report.points import PointPathError, point_location, search_records  # noqa: E402

__all__ = ["pool_server_metrics", "reconcile", "server_rows", "server_table", "server_figure"]

FIGSIZE_PANEL = (5.0, 3.6)
COLORS = {"queue": "#d9a441", "generation": "#4c72b0", "transport": "#8c8c8c"}


def _rows(data: Mapping[str, Any], kind: str, stem: str) -> list[dict[str, Any]]:
    return list((data.get(kind) or {}).get(stem) or [])


def pool_server_metrics(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The rounds of one point as one: deltas add up (counters, histogram rows by label
    set). None when no round had server metrics."""
    have = [r for r in rounds if r.get("available")]
    if not have:
        return None
    # A family void in any round (a reset, or a page that could not be read as exported)
    # is void for the point: the rest of its rounds would count part of it as all of it.
    void: dict[str, str] = {}
    for data in have:
        for stem in data.get("resets") or []:
            void.setdefault(str(stem), "reset during the point")
        for stem, why in (data.get("void") or {}).items():
            void.setdefault(str(stem), str(why))
    notes = sorted({str(n) for data in have for n in data.get("notes") or []})
    # Each family's rows by label set, over the rounds; then a counter's deltas add up and
    # a histogram's rows merge.
    pooled: dict[str, dict[str, dict[tuple[Any, ...], list[Any]]]] = {
        "counters": {},
        "histograms": {},
    }
    for data in have:
        for kind, by_stem in pooled.items():
            for stem, rows in (data.get(kind) or {}).items():
                if stem in void:
                    continue
                into = by_stem.setdefault(stem, {})
                for row in rows:
                    into.setdefault(tuple(sorted(row["labels"].items())), []).append(row)
    return {
        "prefix": have[0].get("prefix"),
        "void": void,
        "notes": notes,
        "counters": {
            stem: [
                {"labels": dict(k), "value": sum(float(r["value"]) for r in rs)}
                for k, rs in rows.items()
            ]
            for stem, rows in pooled["counters"].items()
        },
        "histograms": {
            stem: [{"labels": dict(k), **(merge_histograms(rs) or {})} for k, rs in rows.items()]
            for stem, rows in pooled["histograms"].items()
        },
    }


def _counter(data: Mapping[str, Any], stem: str, **labels: str) -> float | None:
    rows = _rows(data, "counters", stem)
    if not rows:
        return None
    return sum(
        float(r["value"]) for r in rows if all(r["labels"].get(k) == v for k, v in labels.items())
    )


def _hist(data: Mapping[str, Any], stem: str, **labels: str) -> dict[str, Any] | None:
    merged = merge_histograms(_rows(data, "histograms", stem), labels or None)
    return merged if merged and merged["count"] > 0 else None


def _mean(hist: Mapping[str, Any] | None) -> float | None:
    return hist["sum"] / hist["count"] if hist and hist["count"] else None


def _quantile(hist: Mapping[str, Any] | None, q: float) -> Quantile | None:
    return histogram_quantile(q, hist["buckets"]) if hist else None


def _bucket(found: Quantile | None) -> str | None:
    if found is None:
        return None
    upper = "+Inf" if np.isinf(found.upper) else f"{found.upper:g}"
    return f"{found.lower:g}-{upper}"


def _client(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    scored = [r for r in records if not r.get("warmup")]
    ok = [r for r in scored if r.get("ok") and r.get("ttfa_s") is not None]
    ttfa = np.asarray([float(r["ttfa_s"]) for r in ok], dtype=float)
    websocket = any(r.get("protocol") == "websocket" for r in scored)
    return {
        "client_protocol": "websocket" if websocket else "http",
        "client_sent": len(scored),
        "client_ok": sum(1 for r in scored if r.get("ok")),
        "client_ttfa_p50_s": float(np.percentile(ttfa, 50)) if ttfa.size else None,
        "client_ttfa_mean_s": float(ttfa.mean()) if ttfa.size else None,
    }


# What the sampler's busy and memory figures are of, by its source (thetalker.pipeline.sampler):
# a GPU's utilization and device memory, or, with no GPU, the server process tree's CPU (in
# percent of one core: above 100 on several cores) and resident memory.
_DEVICES = {
    "nvidia-smi": ("GPU", "GPU", "GPU"),
    "proc": ("CPU", "CPU, % of one core", "RSS"),
}


def _resources(resources: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Busy mean and memory peak over the point's rounds, each with the device it is of;
    rounds sampled on different devices give no figure (a CPU and a GPU never pool)."""
    have = [r for r in resources if r and r.get("source") in _DEVICES]
    devices = sorted({_DEVICES[r["source"]][0] for r in have})
    if len(devices) != 1:
        device = f"mixed: {', '.join(devices)}" if devices else None
        return {"busy_device": device, "busy_mean_pct": None, "busy_unit": None,
                "memory_device": device, "memory_peak_mib": None}  # fmt: skip
    busy_device, busy_unit, memory_device = _DEVICES[have[0]["source"]]
    util = [r["mean_utilization_pct"] for r in have if r.get("mean_utilization_pct") is not None]
    mem = [r["peak_memory_mib"] for r in have if r.get("peak_memory_mib") is not None]
    return {
        "busy_device": busy_device,
        "busy_mean_pct": float(np.mean(util)) if util else None,
        "busy_unit": busy_unit,
        "memory_device": memory_device,
        "memory_peak_mib": float(max(mem)) if mem else None,
    }


def _on_device(value: Any, digits: int, device: Any) -> str:
    """A sampler figure with the device it is of: `177.0 (CPU, % of one core)`."""
    text = _s(value, digits)
    return f"{text} ({device})" if device else text


def _number_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def _thresholds(data: Mapping[str, Any]) -> list[str]:
    """The continuity thresholds the server exports, in order; a label that is no number
    is not a threshold (what a server exports never fails the report)."""
    rows = _rows(data, "counters", "audio_continuity_ok")
    labels = {r["labels"].get("threshold_ms", "") for r in rows}
    return sorted((t for t in labels if _number_or_none(t) is not None), key=float)


def reconcile(
    records: Sequence[Mapping[str, Any]],
    server_rounds: Sequence[Mapping[str, Any]],
    resources: Sequence[Mapping[str, Any] | None] = (),
) -> dict[str, Any]:
    """One point's row: the client's figures, the server's, and where they meet."""
    row: dict[str, Any] = {**_client(records), **_resources(resources)}
    data = pool_server_metrics(server_rounds)
    if data is None:
        reasons = sorted({str(r.get("reason")) for r in server_rounds if r.get("reason")})
        return {**row, "server_metrics": False, "server_reason": "; ".join(reasons) or None}
    row.update(server_metrics=True, server_reason=None, server_prefix=data["prefix"])
    void = data["void"]
    row["server_void"] = "; ".join(f"{k}: {v}" for k, v in sorted(void.items())) or None
    row["server_notes"] = "; ".join(data["notes"]) or None
    ttfp = _hist(data, "audio_ttfp_s")
    for q in (50, 95):
        found = _quantile(ttfp, q / 100)
        row[f"server_ttfp_p{q}_s"] = found.value if found else None
        row[f"server_ttfp_p{q}_bucket_s"] = _bucket(found)
    row["server_ttfp_mean_s"] = _mean(ttfp)
    row["server_ttfp_n"] = int(ttfp["count"]) if ttfp else 0
    queue = _hist(data, "request_queue_wait_s")
    row["queue_wait_mean_s"] = _mean(queue)
    found = _quantile(queue, 0.95)
    row["queue_wait_p95_s"] = found.value if found else None
    row["queue_wait_p95_bucket_s"] = _bucket(found)
    stages = sorted(
        {r["labels"].get("stage", "") for r in _rows(data, "histograms", "stage_gen_time_s")}
    )
    for stage in stages:
        gen = _hist(data, "stage_gen_time_s", stage=stage) if stage else None
        row[f"gen_time_mean_s_stage{stage}"] = _mean(gen)
    completed = _counter(data, "speech_stream_completed")
    aborted = _counter(data, "speech_stream_aborted")
    row["server_streams_completed"] = completed
    row["server_streams_aborted"] = aborted
    for thr in _thresholds(data):
        ok = _counter(data, "audio_continuity_ok", threshold_ms=thr) or 0.0
        row[f"server_continuity_pct_{thr}ms"] = 100.0 * ok / completed if completed else None
    underrun = _quantile(_hist(data, "audio_underrun_s"), 0.95)
    row["server_underrun_p95_s"] = underrun.value if underrun else None
    streams = (completed or 0.0) + (aborted or 0.0)
    finished = _counter(data, "requests_success")
    e2e = _hist(data, "e2e_request_latency_s")
    counted: float | None
    if void.keys() & {"speech_stream_completed", "speech_stream_aborted"}:
        counted, basis = None, None  # a void family is no zero: nothing to fall back on
    elif streams > 0:
        counted, basis = streams, "streams"
    elif "requests_success" in void:
        counted, basis = None, None
    elif finished:
        counted, basis = finished, "requests_success"
    elif "e2e_request_latency_s" in void:
        counted, basis = None, None
    else:
        counted, basis = (e2e["count"] if e2e else 0.0), "e2e_request_latency_s"
    row["server_counted"] = counted
    row["server_counted_from"] = basis
    row["lost"] = None if counted is None else row["client_sent"] - counted
    if row["client_protocol"] == "websocket":
        # A session is many speech generations (one a sentence) or none the server counts
        # as a stream: neither its counts nor its first audio line up with the client's.
        row.update(server_counted=None, server_counted_from=None, lost=None)
        row.update(gap_mean_s=None, gap_p50_s=None, **_parts({}))
        return row
    client_mean, server_mean = row["client_ttfa_mean_s"], row["server_ttfp_mean_s"]
    row["gap_mean_s"] = (
        client_mean - server_mean if client_mean is not None and server_mean is not None else None
    )
    p50c, p50s = row["client_ttfa_p50_s"], row["server_ttfp_p50_s"]
    row["gap_p50_s"] = p50c - p50s if p50c is not None and p50s is not None else None
    row.update(_parts(row))
    return row


def _parts(row: Mapping[str, Any]) -> dict[str, Any]:
    """queue / generation / transport of the client's mean first audio (see the module)."""
    client, ttfp = row.get("client_ttfa_mean_s"), row.get("server_ttfp_mean_s")
    if client is None or ttfp is None:
        return {"part_queue_s": None, "part_generation_s": None, "part_transport_s": None}
    queue = row.get("queue_wait_mean_s") or 0.0
    return {
        "part_queue_s": queue,
        "part_generation_s": ttfp - queue,
        "part_transport_s": client - ttfp,
    }


def _sort_key(row: Mapping[str, Any]) -> tuple:
    closed = row.get("concurrency") is not None
    load = row["concurrency"] if closed else row.get("request_rate") or 0.0
    return (row["system"], row["model"], not closed, float(load))


def server_rows(
    metrics_files: Iterable[str | Path], search_manifests: Iterable[str | Path] = ()
) -> list[dict[str, Any]]:
    """One row per point (rounds pooled), in (system, model, load) order."""
    files = [Path(p) for p in metrics_files]
    files += [Path(r).parent / FILE_NAME for r in search_records(search_manifests)]
    groups: dict[tuple[str, str, str, bool], list[Path]] = {}
    where: dict[tuple[str, str, str, bool], Any] = {}
    for path in files:
        loc = point_location(path.parent / "records.jsonl")
        key = (loc.system, loc.model, loc.point, loc.search)
        groups.setdefault(key, []).append(path)
        where[key] = loc
    rows = []
    for key, paths in groups.items():
        loc = where[key]
        records = [r for p in paths for r in read_records(p.parent / "records.jsonl")]
        rounds = [read_json(p) for p in paths]
        resources = []
        for p in paths:
            prov = p.parent / "provenance.json"
            resources.append(read_json(prov).get("resources") if prov.is_file() else None)
        row = {
            "system": loc.system,
            "model": loc.model,
            "point": loc.point,
            "concurrency": loc.concurrency,
            "request_rate": loc.request_rate,
            "search_point": loc.search,
            "rounds": len(paths),
            **reconcile(records, rounds, resources),
        }
        rows.append(row)
    return sorted(rows, key=_sort_key)


def _s(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return MISSING
    return f"{float(value):.{digits}f}"


def _with_bucket(row: Mapping[str, Any], key: str) -> str:
    value = row.get(f"{key}_s")
    if value is None:
        return MISSING
    return f"{_s(value)} ({row.get(f'{key}_bucket_s')})"


def _by_suffix(row: Mapping[str, Any], prefix: str, cell: Callable[[str, Any], str]) -> str:
    """`cell(suffix, value)` of each set column named `prefix` + suffix, joined by "; "."""
    parts = [
        cell(k.removeprefix(prefix), v)
        for k, v in row.items()
        if k.startswith(prefix) and v is not None
    ]
    return "; ".join(parts) or MISSING


def _gen(row: Mapping[str, Any]) -> str:
    return _by_suffix(row, "gen_time_mean_s_stage", lambda stage, v: f"{stage}: {_s(v)}")


def _continuity(row: Mapping[str, Any]) -> str:
    return _by_suffix(row, "server_continuity_pct_", lambda gap, v: f"{_s(v, 1)}% @{gap}")


def _left_out(row: Mapping[str, Any]) -> str:
    parts = [row.get("server_void"), row.get("server_notes")]
    return "; ".join(p for p in parts if p) or ""


def server_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """server.md: one line per point; a point without server metrics says why."""
    header = [
        "System",
        "Model",
        "Load",
        "Client first audio p50 (s)",
        "Server TTFP p50 (s) (bucket)",
        "Server TTFP p95 (s) (bucket)",
        "Queue wait mean (s)",
        "Generation mean per stage (s)",
        "Client - server first audio, mean (s)",
        "Server continuity",
        "Counted / sent",
        "Server busy mean (%) (device)",
        "Server memory peak (MiB) (device)",
        "Left out",
    ]
    lines = []
    for row in rows:
        load = row["point"] + ("*" if row.get("search_point") else "")
        head = [row["system"], row["model"], load, _s(row.get("client_ttfa_p50_s"))]
        gpu = [
            _on_device(row.get("busy_mean_pct"), 1, row.get("busy_unit")),
            _on_device(row.get("memory_peak_mib"), 0, row.get("memory_device")),
        ]
        if not row.get("server_metrics"):
            reason = f"no server metrics ({row.get('server_reason') or 'none recorded'})"
            lines.append([*head, reason, *[""] * 7, *gpu, ""])
            continue
        if row.get("server_void") and row.get("server_counted") is None:
            counted = "n/a (void, see Left out)"
        elif row.get("server_counted") is None:
            counted = f"n/a ({row.get('client_protocol')} sessions)"
        else:
            counted = f"{row['server_counted']:g} / {row['client_sent']}"
        if row.get("lost"):
            counted += f" (**{row['lost']:g} lost**)"
        lines.append(
            [
                *head,
                _with_bucket(row, "server_ttfp_p50"),
                _with_bucket(row, "server_ttfp_p95"),
                _s(row.get("queue_wait_mean_s")),
                _gen(row),
                _s(row.get("gap_mean_s")),
                _continuity(row),
                counted,
                *gpu,
                _left_out(row),
            ]
        )
    notes = (
        "\nTTFP: request arrival to first audio packet, as the server measures it; p50/p95 "
        "interpolated within the server's histogram buckets (the bucket, in s, is the "
        "resolution). Client - server: client TTFA mean minus server TTFP mean (connection, "
        "HTTP, network, client). Counted / sent: streams the server completed or aborted "
        "against the scored requests the client sent. Busy and memory: the sampler's, each naming "
        "its device: GPU (utilization, device memory) or, with no GPU, the server process "
        "tree's CPU (percent of one core) and RSS. `*`: a capacity-search point. Left "
        "out: the server's families whose figures are void for the point (a counter that "
        "reset, a series exported twice, a non-finite value, buckets that are not "
        "cumulative) and what else its page held that is not read; a figure from them "
        "shows as -.\n"
    )
    return markdown_table(header, lines, label_columns=3) + notes


def server_figure(rows: Sequence[Mapping[str, Any]], out: Path) -> None:
    """server.png: per (system, model), the client's mean first audio by load, stacked."""
    panels: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("server_metrics") and row.get("part_queue_s") is not None:
            panels.setdefault((row["system"], row["model"]), []).append(row)
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(FIGSIZE_PANEL[0] * n, FIGSIZE_PANEL[1]), squeeze=False)
    if not panels:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "no server metrics in this run", ha="center", va="center")
        ax.set_axis_off()
    for ax, ((system, model), points) in zip(axes[0], panels.items(), strict=False):
        x = np.arange(len(points))
        bottom = np.zeros(len(points))
        for part in ("queue", "generation", "transport"):
            values = np.asarray([max(float(p[f"part_{part}_s"]), 0.0) for p in points])
            ax.bar(x, values, bottom=bottom, color=COLORS[part], label=part)
            bottom += values
        ax.set_xticks(x, [p["point"] + ("*" if p.get("search_point") else "") for p in points])
        ax.set_title(f"{system} / {model}")
        ax.set_xlabel("load")
        ax.set_ylabel("client first audio, mean (s)")
        ax.legend(fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.server", description=__doc__)
    parser.add_argument("--server-metrics", nargs="+", required=True, type=Path)
    parser.add_argument("--search-manifests", nargs="*", default=[], type=Path)
    parser.add_argument("--table", required=True, type=Path, help="server.md (CSV beside it)")
    parser.add_argument("--figure", required=True, type=Path, help="server.png")
    args = parser.parse_args(argv)
    try:
        rows = server_rows(args.server_metrics, args.search_manifests)
    except (RecordError, PointPathError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_table(args.table, server_table(rows), rows)
    server_figure(rows, args.figure)
    have = sum(1 for r in rows if r.get("server_metrics"))
    print(f"{args.table}: {len(rows)} points, {have} with server metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
