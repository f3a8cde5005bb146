"""capacity.md and capacity.png: how many streams each (system, model) holds.

From results/points.csv (records alone): each point holds the service level or not
(`thetalker.pipeline.capacity.ServiceLevel`, `capacity.slo`: failures, continuity under a
named player model, audible first audio p95, optionally WER (from the wer.json beside a
point's records, quality.at_speed_points) and first byte p90, every figure at once); the
capacity is `thetalker.pipeline.capacity.find_capacity` over the closed-loop points
(streams) and, where there are open-loop points, over those (requests per second). Points
the bisection added (off the settings' grid) count like any other and are drawn hollow.
Beside the capacity: continuity under the level's player model, audible first audio p95 and TTFA p90
there, and the price (`thetalker.metrics.point_cost`) at the capacity and at the headline
concurrency; which figures broke at the first failing load (the figure that broke first),
and any cliff (a load holding above a failing one). A CSV with the same numbers is
written beside.

    python -m thetalker.report.capacity --points results/points.csv --settings JSON|FILE \\
        --table capacity.md --figure capacity.png

The settings (thetalker.report.settings) carry the rows, the headline point, the price, the
grid and the service level (`slo`: thetalker.pipeline.load_points.service_level_spec).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from thetalker.data import layout  # noqa: E402
from thetalker.metrics import player_model, point_cost  # noqa: E402
from thetalker.pipeline.capacity import NEVER, NO_POINTS, Capacity, ServiceLevel, find_capacity  # noqa: E402
from thetalker.report.common import (  # noqa: E402
    DPI,
    FIGSIZE,
    MISSING,
    fmt_range,
    is_nan,
    load_points_or_report,
    markdown_table,
    onset_words,
    point_at,
    point_cost_at,
    point_labels,
    save_figure,
    table_figure_parser,
    write_table_and_figure,
)
from thetalker.report.limits import (  # noqa: E402
    BUSY_PCT,
    CLIENT_LAG_S,
    NOT_DETERMINED,
    REJECTED_PCT,
    limited_by,
    overload_shape,
)
from thetalker.report.machine_cost import (  # noqa: E402
    MACHINE_COST_WORDS,
    machine_cost_cell,
    machine_cost_values,
)

__all__ = ["loads_of", "capacity_of", "capacity_rows", "capacity_table", "capacity_figure", "main"]


def point_wer_pct(summary: dict[str, Any]) -> float | None:
    """The WER (%) of a point's audio: wer.json beside its (first) records file, as
    quality.at_speed_points writes it; None when there is none."""
    files = str(summary.get("records") or "").split(";")
    if not files or not files[0]:
        return None
    try:
        return float(json.loads((Path(files[0]).parent / "wer.json").read_text())["wer"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def point_listened(summary: dict[str, Any]) -> dict[str, float | None]:
    """What the listener hears at a point, from the files beside its (first) records file:
    `dnsmos_ovrl` (mean OVRL, dnsmos.json) and `unhealthy_pct` (streams with an audio defect
    or failed, health.json); None where a file is absent or DNSMOS not installed."""
    files = str(summary.get("records") or "").split(";")
    folder = Path(files[0]).parent if files and files[0] else None
    out: dict[str, float | None] = {"dnsmos_ovrl": None, "unhealthy_pct": None}
    if folder is None:
        return out
    try:
        dnsmos = json.loads((folder / "dnsmos.json").read_text())
        if dnsmos.get("available") and dnsmos.get("streams"):
            out["dnsmos_ovrl"] = sum(float(s["ovrl"]) for s in dnsmos["streams"]) / len(
                dnsmos["streams"]
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        streams = json.loads((folder / "health.json").read_text())["streams"]
        bad = sum(1 for s in streams if not s.get("ok") or s.get("defects"))
        out["unhealthy_pct"] = 100.0 * bad / len(streams) if streams else None
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return out


def loads_of(
    points: pd.DataFrame,
    model: str,
    system: str,
    open_loop: bool = False,
    wer: bool = False,
    listened: bool = False,
) -> dict[float, dict[str, Any]]:
    """load -> point summary of one (model, system): concurrency, or request rate; with
    `wer`, each summary gets its `wer_pct` (point_wer_pct); with `listened`, its
    `dnsmos_ovrl` and `unhealthy_pct` (point_listened)."""
    out = {}
    for label in point_labels(points):
        concurrency, rate = layout.parse_point_label(label) or (None, None)
        load = rate if open_loop else concurrency
        if load is not None:
            summary = point_at(points, model, system, label)
            if summary is not None:
                if wer:
                    summary["wer_pct"] = point_wer_pct(summary)
                if listened:
                    summary.update(point_listened(summary))
                out[load] = summary
    return out


def capacity_of(
    points: pd.DataFrame, model: str, system: str, level: ServiceLevel, open_loop: bool = False
) -> tuple[Capacity, dict[float, dict[str, Any]]]:
    wer = level.max_wer_pct is not None
    listened = level.min_dnsmos_ovrl is not None or level.max_unhealthy_pct is not None
    loads = loads_of(points, model, system, open_loop, wer, listened)
    return find_capacity({load: level.holds(s) for load, s in loads.items()}), loads


def broke_first(level: ServiceLevel, cap: Capacity, loads: dict[float, dict[str, Any]]) -> str:
    """`audible first audio p95 (s) 1.3 (limit 1) at 8`: the figures that failed at the
    first failing load, or "" when none failed."""
    if cap.first_failing is None:
        return ""
    failed = [f for f in level.figures(loads.get(cap.first_failing)) if not f.holds]
    return "; ".join(f.describe() for f in failed) + f" at {cap.first_failing:g}"


def not_judged(
    level: ServiceLevel, cap: Capacity, loads: dict[float, dict[str, Any]], unit: str = ""
) -> list[str]:
    """The level's figures that did not judge this capacity: measured at no load (DNSMOS
    not installed, say: `DNSMOS OVRL`), or not at a load that decided it, the load held or
    the first failing one (a search point has no saved audio: `DNSMOS OVRL at 6`). Such a
    figure passes where it is missing (`ServiceLevel.figures`), so the table must say so."""
    if not loads:
        return []
    # Per load, the figures that held only for want of a value.
    missing = {
        load: {f.name for f in level.figures(s) if f.value is None and f.holds}
        for load, s in loads.items()
    }
    never = set.intersection(*missing.values())
    deciding = [x for x in (cap.load, cap.first_failing) if x is not None and x in loads]
    out = []
    for name in (f.name for f in level.figures(None)):
        if name in never:
            out.append(f"{name} ({unit.strip()})" if unit else name)
        else:
            out += [f"{name} at {x:g}{unit}" for x in deciding if name in missing[x]]
    return out


def capacity_rows(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    level: ServiceLevel,
    headline: int,
    gpu_hour_usd: float,
    servers: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """One row per (model, system); `servers`: server.csv (its queue and generation times
    for "limited by"), None where it was not built."""
    rows = []
    for model in models:
        for system in systems:
            cap, loads = capacity_of(points, model, system, level)
            at = loads.get(cap.load) if cap.load is not None else None
            rate_cap, rate_loads = capacity_of(points, model, system, level, open_loop=True)
            get = (at or {}).get
            failing = loads.get(cap.first_failing) if cap.first_failing is not None else None
            limit = limited_by(failing, _server_row(servers, model, system, failing))
            model_column = player_model(level.player_model).column
            rows.append(
                {
                    "model": model,
                    "system": system,
                    "capacity_streams": cap.load,
                    "verdict": cap.verdict,
                    "first_failing_streams": cap.first_failing,
                    "capacity_label": cap.label(),
                    "broke_first": broke_first(level, cap, loads),
                    "cliff_streams": ";".join(f"{x:g}" for x in cap.passing_above),
                    "player_model": level.player_model,
                    "continuity_pct_model": get(model_column),
                    "ttfa_audible_s_p95": get("ttfa_audible_s_p95"),
                    "audible_pct": get("audible_pct"),
                    "continuity_pct": get("continuity_pct"),
                    "continuity_pct_low": get("continuity_pct_low"),
                    "continuity_pct_high": get("continuity_pct_high"),
                    "ttfa_s_p90": get("ttfa_s_p90"),
                    "ttfa_s_p90_low": get("ttfa_s_p90_low"),
                    "ttfa_s_p90_high": get("ttfa_s_p90_high"),
                    "n_failed": get("n_failed"),
                    "n_scored": get("n_scored"),
                    "usd_per_million_chars_at_capacity": (
                        point_cost(at, gpu_hour_usd, level.min_continuity_pct) if at else None
                    ),
                    "usd_per_million_chars_at_headline": point_cost_at(
                        points, model, system, headline, gpu_hour_usd, level.min_continuity_pct
                    ),
                    **machine_cost_values(at, "at_capacity_"),
                    "limited_by": limit[0] if failing else None,
                    "limited_by_evidence": limit[1] if failing else None,
                    "past_the_knee": overload_shape(loads, cap.first_failing) or None,
                    "capacity_rps": rate_cap.load,
                    "verdict_rps": rate_cap.verdict,
                    "capacity_rps_label": rate_cap.label(" req/s"),
                    "broke_first_rps": broke_first(level, rate_cap, rate_loads),
                    "not_judged": ";".join(
                        not_judged(level, cap, loads)
                        + not_judged(level, rate_cap, rate_loads, " req/s")
                    ),
                }
            )
    return rows


def _server_row(
    servers: pd.DataFrame | None, model: str, system: str, point: dict[str, Any] | None
) -> dict[str, Any] | None:
    """server.csv's row of the point, NaN as None (None: no table or no row)."""
    if servers is None or point is None or servers.empty:
        return None
    found = servers[
        (servers["model"] == model)
        & (servers["system"] == system)
        & (servers["point"] == point.get("point"))
    ]
    if found.empty:
        return None
    return {k: (None if is_nan(v) else v) for k, v in found.iloc[0].to_dict().items()}


def _money(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def capacity_table(
    rows: Sequence[dict[str, Any]],
    points: pd.DataFrame,
    level: ServiceLevel,
    headline: int,
    gpu_hour_usd: float,
) -> str:
    """capacity.md from `capacity_rows`' rows (built once, also written as capacity.csv);
    `points` for the onset's words, the rest as the rows were built with."""
    open_loop = any(r["verdict_rps"] != NO_POINTS for r in rows)
    header = ["model", "system", "streams held", "broke first (at the next load)", "cliff"]
    header += [f"continuity % ({level.player_model})", "audible p95 (s)", "audible %"]
    header += ["TTFA p90 (s)", "failed", "USD/M chars there", f"USD/M chars at c{headline}"]
    header += ["machine cost there", "limited by (at the first failing load)", "past the knee"]
    header += ["req/s held", "broke first (req/s)"] if open_loop else []
    unjudged = any(r["not_judged"] for r in rows)
    header += ["not judged (measured at no load)"] if unjudged else []
    body = []
    for r in rows:
        failed = (
            f"{int(r['n_failed'] or 0)}/{int(r['n_scored'] or 0)}" if r["n_scored"] else MISSING
        )
        cells = [
            r["model"],
            r["system"],
            r["capacity_label"],
            r["broke_first"] or "nothing (no load failed)",
            f"holds again at {r['cliff_streams']}" if r["cliff_streams"] else "no",
            _number(r["continuity_pct_model"], 1),
            _number(r["ttfa_audible_s_p95"], 3),
            _number(r["audible_pct"], 1),
            fmt_range(r["ttfa_s_p90"], r["ttfa_s_p90_low"], r["ttfa_s_p90_high"], 3),
            failed,
            _money(r["usd_per_million_chars_at_capacity"]),
            _money(r["usd_per_million_chars_at_headline"]),
            machine_cost_cell({k.removeprefix("at_capacity_"): v for k, v in r.items()}),
            f"{r['limited_by']}: {r['limited_by_evidence']}" if r["limited_by"] else MISSING,
            r["past_the_knee"] or MISSING,
        ]
        extra = [r["capacity_rps_label"], r["broke_first_rps"] or MISSING] if open_loop else []
        extra += [r["not_judged"].replace(";", ", ") or "none"] if unjudged else []
        body.append(cells + extra)
    title = (
        f"Capacity: the most concurrent streams that keep the service level ({level.describe()}), "
        'every lower load holding too ("at least": the top point still holds; "never": the '
        "lowest already fails). Broke first: the figures that failed at the first failing "
        "load; cliff: loads above it that held again (the level is not monotone there). "
        f"Audible first audio: {onset_words(points)} (inaudible streams count as failures). "
        "TTFA p90 [95% interval, points.csv's `ttfa_s_method`] at that load; the price there "
        f"and at the headline concurrency, at {gpu_hour_usd:g} USD per hour. "
        f"{MACHINE_COST_WORDS} {LIMIT_WORDS}"
    )
    if unjudged:
        title += (
            " Not judged: figures of the level that no load measured (no scored audio, DNSMOS "
            "not installed, WER not transcribed), or that a load deciding the capacity did not "
            "(a search point); the capacity was found without them there."
        )
    title += "\n\n"
    return title + markdown_table(header, body, label_columns=2)


LIMIT_WORDS = (
    "Limited by (thetalker.report.limits, docs/capacity.md): at the first failing load, what "
    f"saturated: admission (>= {REJECTED_PCT:g}% of the requests refused for load), the GPU or "
    f"CPU (>= {BUSY_PCT:g}% busy), the server queue (mean queue wait >= mean generation time), "
    f"the client (open-loop send lag p95 >= {CLIENT_LAG_S:g} s), named when it alone "
    f"saturated and the busy share was measured; else {NOT_DETERMINED}, the figures beside. "
    "Past the knee: requests refused for load at each load from the first failing one up, "
    "and how fast (p50)."
)


def _number(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def capacity_figure(
    points: pd.DataFrame,
    models: Sequence[str],
    systems: Sequence[str],
    level: ServiceLevel,
    out: Path,
    grid: Sequence[int] | None = None,
) -> None:
    """Continuity against concurrency per (model, system), the service level as a line,
    each capacity as a star; points off `grid` (bisection) hollow."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    on_grid = set(grid) if grid else None
    every_load: set[float] = set()
    for model in models:
        for system in systems:
            cap, loads = capacity_of(points, model, system, level)
            xs = sorted(loads)
            ys = [loads[x].get(player_model(level.player_model).column) for x in xs]
            keep = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if not keep:
                continue
            every_load.update(x for x, _ in keep)
            (line,) = ax.plot([x for x, _ in keep], [y for _, y in keep], label=f"{model} {system}")
            colour = line.get_color()
            for x, y in keep:
                searched = on_grid is not None and x not in on_grid
                ax.plot(x, y, "o", color=colour, markerfacecolor="none" if searched else colour)
            if cap.load is not None and cap.verdict != NEVER:
                y = loads[cap.load].get(player_model(level.player_model).column)
                ax.plot(cap.load, y, "*", markersize=14, color=colour)
            if cap.first_failing is not None:  # the first failing load: a cross
                y = loads[cap.first_failing].get(player_model(level.player_model).column)
                if y is not None:
                    ax.plot(cap.first_failing, y, "x", markersize=10, color=colour)
    ax.axhline(level.min_continuity_pct, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ticks = sorted(every_load)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_ylim(0, 105)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel(f"continuous streams (%), {level.player_model}")
    ax.set_title(
        "Capacity under the service level (star; cross: first failing load; hollow: bisection)",
        fontsize="medium",
    )
    ax.legend(fontsize="small")
    save_figure(fig, out, DPI)


def main(argv: Sequence[str] | None = None) -> int:
    parser = table_figure_parser("python -m thetalker.report.capacity", __doc__, "capacity")
    parser.add_argument(
        "--server-table",
        type=Path,
        help="server.csv (thetalker.report.server): queue and generation times for 'limited by'",
    )
    args = parser.parse_args(argv)
    points = load_points_or_report(args.points)
    if points is None:
        return 1
    try:
        level = ServiceLevel.from_spec(dict(args.slo))
    except (TypeError, ValueError) as exc:
        parser.error(f"--settings: report settings field slo: {exc}")
    servers = None
    if args.server_table is not None:
        try:
            servers = pd.read_csv(args.server_table)
        except (OSError, ValueError) as exc:
            print(f"error: --server-table {args.server_table}: {exc}", file=sys.stderr)
            return 1
    cost = (args.headline, args.gpu_hour_usd)
    rows = capacity_rows(points, args.models, args.systems, level, *cost, servers)
    text = capacity_table(rows, points, level, *cost)
    return write_table_and_figure(
        args,
        text,
        rows,
        lambda out: capacity_figure(points, args.models, args.systems, level, out, args.grid),
    )


if __name__ == "__main__":
    sys.exit(main())
