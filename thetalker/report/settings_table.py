"""settings.md, settings.csv, settings.png and each (system, model)'s best.yaml: the settings
search (docs/settings.md), from the records alone.

Per (system, model) under results/settings/{system}/{model}/: screen.json (every setting,
its screen figures, kept or screened out), and for each kept setting its folder: the
grid's points ({point}/records.jsonl, summary.json, provenance.json) and search.json (the
bisection's points). Each capacity is recomputed under the service level given here
(thetalker.report.settings_rank), so a change of capacity.slo reruns no server.

    python -m thetalker.report.settings_table --runs JSON --slo JSON --gpu-hour-usd 2.99 \\
        --table settings.md --csv settings.csv --figure settings.png --command "snakemake ..."

`--runs`: [{"system", "model", "dir", "points": [grid point labels]}, ...]; best.yaml is
written into each run's dir.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from thetalker.data import layout  # noqa: E402
from thetalker.data.manifest import read_search_manifest  # noqa: E402
from thetalker.data.records import read_records  # noqa: E402
from thetalker.metrics import point_cost, summarize_point  # noqa: E402
from thetalker.metrics.players import player_model  # noqa: E402
from thetalker.pipeline.capacity import ServiceLevel  # noqa: E402
from thetalker.report.capacity import broke_first  # noqa: E402
from thetalker.report.common import MISSING, markdown_table, save_figure  # noqa: E402
from thetalker.report.settings_rank import (  # noqa: E402
    SettingResult,
    compare,
    envelope,
    p95_at,
    rank,
)

__all__ = ["load_setting", "run_rows", "settings_table", "best_yaml", "main"]


def _point(records_path: Path) -> tuple[float, list[dict[str, Any]], dict[str, Any]]:
    """(load, scored records, summary + resources) of one point's folder: the load is its
    concurrency, or its request rate (open loop)."""
    where = layout.point_location(records_path)
    records = [r for r in read_records(records_path) if not r.get("warmup")]
    summary = summarize_point(records, concurrency=where.concurrency).to_dict()
    try:
        prov = json.loads((records_path.parent / "provenance.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        prov = {}
    summary["_resources"] = prov.get("resources") or {}
    summary["_provenance"] = records_path.parent / "provenance.json"
    load = where.concurrency if where.concurrency is not None else where.request_rate
    return float(load or 0), records, summary


def load_setting(folder: Path, points: Sequence[str], label: str, stock: bool) -> SettingResult:
    """A searched setting's grid points and search points, closed and open loop."""
    paths = [folder / p / "records.jsonl" for p in points]
    manifest = folder / "search.json"
    if manifest.is_file():
        paths += [Path(p) for p in read_search_manifest(manifest).records()]
    result = SettingResult(label, stock, {})
    for path in paths:
        if not path.is_file():
            continue
        load, records, summary = _point(path)
        if layout.point_location(path).concurrency is None:
            result.rate_loads[load] = summary
        else:
            result.loads[load], result.records[load] = summary, records
    return result


def _n(value: Any, digits: int) -> str:
    return MISSING if value is None else f"{float(value):.{digits}f}"


def run_rows(
    run: Mapping[str, Any], level: ServiceLevel, gpu_hour_usd: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per setting of a run (searched first, best first; then screened out), and the
    run's verdict: winner, runner-up, comparison, envelope."""
    folder = Path(run["dir"])
    screen = json.loads((folder / "screen.json").read_text(encoding="utf-8"))
    kept = [s for s in screen["settings"] if s["kept"]]
    results = [
        load_setting(folder / s["label"], run["points"], s["label"], s["stock"]) for s in kept
    ]
    ordered = rank(results, level)
    meta = {s["label"]: s for s in screen["settings"]}
    column = player_model(level.player_model).column
    rows = []
    for place, r in enumerate(ordered, start=1):
        cap = r.capacity(level)
        at = r.loads.get(cap.load, {}) if cap.load is not None else {}
        res = at.get("_resources") or {}
        rows.append(
            {
                "system": run["system"],
                "model": run["model"],
                "setting": r.label,
                "stock": r.stock,
                "sha256": meta[r.label]["sha256"],
                "place": place,
                "capacity_streams": cap.load,
                "capacity_label": cap.label(),
                "capacity_rps_label": r.rate_capacity(level).label(" req/s"),
                "broke_first": broke_first(level, cap, r.loads),
                "cliff_streams": ";".join(f"{x:g}" for x in cap.passing_above),
                "rtfx": at.get("rtfx"),
                "ttfa_audible_s_p95": p95_at(r, cap.load),
                "continuity_pct_model": at.get(column),
                "busy_mean_pct": res.get("mean_utilization_pct"),
                "busy_source": res.get("source"),
                "memory_peak_mib": res.get("peak_memory_mib"),
                "usd_per_million_chars": point_cost(at, gpu_hour_usd, level.min_continuity_pct)
                if at
                else None,
                "screened_out_at": None,
            }
        )
    for s in screen["settings"]:
        if not s["kept"]:
            rows.append(
                {
                    "system": run["system"],
                    "model": run["model"],
                    "setting": s["label"],
                    "stock": s["stock"],
                    "sha256": s["sha256"],
                    "screened_out_at": screen["screen_concurrency"],
                    "screen_rank": s.get("rank"),
                    "screen": s.get("screen"),
                }
            )
    verdict: dict[str, Any] = {"winner": ordered[0] if ordered else None, "runner": None}
    if len(ordered) > 1:
        verdict["runner"] = ordered[1]
        verdict["comparison"] = compare(ordered[0], ordered[1], level)
    verdict["envelope"] = envelope(results, level)
    verdict["screen_concurrency"] = screen["screen_concurrency"]
    verdict["searched"] = ordered
    return rows, verdict


# What the sampler's busy figure is of (thetalker.pipeline.sampler's sources).
_DEVICE = {"nvidia-smi": "GPU", "proc": "CPU, % of one core"}


def _setting_cell(row: Mapping[str, Any]) -> str:
    return f"{row['setting']} (stock)" if row["stock"] else row["setting"]


def settings_table(
    runs: Sequence[tuple[Mapping[str, Any], list, dict]], level: ServiceLevel
) -> str:
    out = [
        "# Settings search\n",
        f"Service level: {level.describe()}. Every capacity is recomputed from the records. "
        "Busy and memory: the server's sampler at the capacity (a GPU's utilization, or the "
        "server's CPU in % of one core and its resident memory). Winner: the most streams "
        "held, ties to the lower audible first audio p95; distinguishable from the runner-up "
        "only when the paired interval (by prompt, at one load both ran) excludes no "
        "difference (docs/settings.md).\n",
    ]
    for run, rows, verdict in runs:
        out.append(f"\n## {run['system']} / {run['model']}\n\n")
        header = ["setting", "sha256", "streams held", "broke first (at the next load)", "cliff"]
        header += ["RTFx", "audible p95 (s)", f"continuity % ({level.player_model})"]
        header += ["busy %", "memory (MiB)", "USD/M chars"]
        # Requests per second held, where the open-loop points (request_rates) ran.
        rates = any(r.get("capacity_rps_label") not in (None, "n/a") for r in rows)
        header += ["req/s held"] if rates else []
        body = []
        for r in rows:
            if r["screened_out_at"] is not None:
                sc = r.get("screen") or {}
                body.append(
                    [_setting_cell(r), r["sha256"][:12],
                     f"screened out at c{r['screened_out_at']} (rank {r.get('screen_rank')})",
                     f"at c{r['screened_out_at']}: continuity {_n(sc.get('continuity_pct'), 1)}%, "
                     f"audible p95 {_n(sc.get('ttfa_audible_s_p95'), 3)} s",
                     MISSING, MISSING, MISSING, MISSING, MISSING, MISSING, MISSING]
                    + ([MISSING] if rates else [])
                )  # fmt: skip
                continue
            body.append(
                [_setting_cell(r), r["sha256"][:12], r["capacity_label"],
                 r["broke_first"] or "nothing (no load failed)",
                 f"holds again at {r['cliff_streams']}" if r["cliff_streams"] else "no",
                 _n(r["rtfx"], 2), _n(r["ttfa_audible_s_p95"], 3),
                 _n(r["continuity_pct_model"], 1),
                 f"{_n(r['busy_mean_pct'], 1)} ({_DEVICE.get(r['busy_source'], MISSING)})",
                 _n(r["memory_peak_mib"], 0), _n(r["usd_per_million_chars"], 2)]
                + ([r["capacity_rps_label"]] if rates else [])
            )  # fmt: skip
        out.append(markdown_table(header, body, label_columns=5))
        winner = verdict["winner"]
        if winner is None:
            out.append("\nNo setting was searched.\n")
            continue
        line = f"\n**Winner: {winner.label}**"
        line += f" ({winner.capacity(level).label()} streams)."
        if verdict.get("runner") is not None:
            line += f" Runner-up {verdict['runner'].label}: {verdict['comparison'].describe()}."
        else:
            line += " No runner-up was searched."
        out.append(line + "\n\n")
        out.append("Envelope: at each load, the best audible first audio p95 among the settings "
                   "holding continuity and failures there.\n\n")  # fmt: skip
        env = [
            [f"{e['load']:g}", e["best"] or "none holds", _n(e["audible_p95_s"], 3),
             _n(e["continuity_pct"], 1), f"{e['holding']}/{e['measured']}"]
            for e in verdict["envelope"]
        ]  # fmt: skip
        out.append(
            markdown_table(
                ["streams", "best setting", "audible p95 (s)", "continuity %", "holding/measured"],
                env,
                label_columns=2,
            )
        )
    return "".join(out)


def best_yaml(
    run: Mapping[str, Any], verdict: Mapping[str, Any], level: ServiceLevel, command: str
) -> str:
    """The winner's file (deploy file or argument set) under a header saying what it won."""
    winner = verdict["winner"]
    folder = Path(run["dir"])
    if winner is None:
        return "# No setting was searched: no winner.\n"
    files = sorted((folder / winner.label).glob("*-*.yaml"))
    body = files[0].read_text(encoding="utf-8") if files else ""
    cap = winner.capacity(level)
    prov: dict[str, Any] = {}
    at = winner.loads.get(cap.load) if cap.load is not None else None
    if at and Path(at["_provenance"]).is_file():
        prov = json.loads(Path(at["_provenance"]).read_text(encoding="utf-8"))
    hw = prov.get("hardware") or {}
    gpus = ", ".join(str(g.get("name") or g.get("model")) for g in hw.get("gpus") or []) or "none"
    comparison = verdict.get("comparison")
    margin = comparison.describe() if comparison else "no runner-up searched"
    head = [
        f"# Best setting of {run['system']} / {run['model']}: {winner.label}",
        f"# Won: {cap.label()} streams held (results/tables/settings.md)",
        f"# Service level: {level.describe()}",
        f"# Hardware: GPUs {gpus}; CPU {hw.get('cpu_model')} x {hw.get('cpu_count')}",
        f"# Margin over the runner-up: {margin}",
        f"# Measured by: {command}",
        f"# Server command: {' '.join((prov.get('server') or {}).get('command') or [])}",
        f"# File: {files[0] if files else 'none'}",
    ]
    return "\n".join(head) + "\n" + body


def settings_figure(
    runs: Sequence[tuple[Mapping[str, Any], list, dict]], level: ServiceLevel, out: Path
) -> None:
    """Audible first audio p95 against streams per searched setting; star at its capacity."""
    fig, ax = plt.subplots(figsize=(8.0, 4.5))
    for run, _, verdict in runs:
        for r in verdict["searched"]:
            xs = sorted(r.loads)
            ys = [p95_at(r, x) for x in xs]
            keep = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if not keep:
                continue
            name = f"{run['system']} {r.label}{' (stock)' if r.stock else ''}"
            (line,) = ax.plot(*zip(*keep, strict=True), marker="o", label=name)
            cap = r.capacity(level)
            if cap.load is not None and p95_at(r, cap.load) is not None:
                ax.plot(cap.load, p95_at(r, cap.load), "*", markersize=14, color=line.get_color())
    if level.max_audible_p95_s is not None:
        ax.axhline(level.max_audible_p95_s, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("audible first audio p95 (s)")
    ax.set_title("Settings search: each searched setting (star: its capacity)", fontsize="medium")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    save_figure(fig, out, 120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m thetalker.report.settings_table")
    parser.add_argument("--runs", required=True, help="JSON list of the runs")
    parser.add_argument("--slo", required=True, help="the service level, JSON")
    parser.add_argument("--gpu-hour-usd", type=float, required=True)
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--csv", required=True, type=Path)
    parser.add_argument("--figure", required=True, type=Path)
    parser.add_argument("--command", default="snakemake results/tables/settings.md")
    args = parser.parse_args(argv)
    level = ServiceLevel.from_spec(json.loads(args.slo))
    done = []
    for run in json.loads(args.runs):
        rows, verdict = run_rows(run, level, args.gpu_hour_usd)
        folder = Path(run["dir"])
        done.append((run, rows, verdict))
        (folder / "best.yaml").write_text(
            best_yaml(run, verdict, level, args.command), encoding="utf-8"
        )
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(settings_table(done, level), encoding="utf-8")
    fields = ["system", "model", "setting", "stock", "sha256", "place", "capacity_streams",
              "capacity_label", "capacity_rps_label", "broke_first", "cliff_streams", "rtfx",
              "ttfa_audible_s_p95",
              "continuity_pct_model", "busy_mean_pct", "busy_source", "memory_peak_mib",
              "usd_per_million_chars", "screened_out_at", "screen_rank", "winner",
              "distinguishable"]  # fmt: skip
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for _, rows, verdict in done:
            for r in rows:
                win = verdict["winner"] is not None and r["setting"] == verdict["winner"].label
                comp = verdict.get("comparison")
                writer.writerow(
                    {
                        **r,
                        "winner": win,
                        "distinguishable": comp.distinguishable if win and comp else None,
                    }
                )
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    settings_figure(done, level, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
