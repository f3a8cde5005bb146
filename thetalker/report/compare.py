"""thetalker-compare A B: what changed between two result folders, and what is noise.

A run is a folder holding the bench job's manifest `search.json` (`results/runs/S/M`,
`results/quality/S/M`); its points are the grid points the job finished (`{c<N>|r<R>}/`
with `summary.json` beside `records.jsonl`, or `round1/` .. `roundN/`) and the search points
its manifest lists; nothing else in the folder counts (a stray `records.jsonl` beside round
folders, or one without a summary, is refused). Points match by run (`runs`, `quality`),
system, model and point, and are compared only when they measured the same thing: the same
load, sample rate, model, protocol and prompt set; a point where they differ is named with
what differs, not compared. For every point compared it prints B against A (A is the base,
B the new run): RTFx as the ratio B / A, TTFA p50 and p90 as B - A in seconds,
continuity under the player model max_deficit_0.1s (vllm-omni's, the same on both sides;
thetalker.metrics.players) as B - A in percentage points, each with its 95% interval, and
names the changes whose interval excludes "no change" (1 for the ratio, 0 for a difference).

A change is judged against the noise between runs, which only rounds measure: with fewer than
2 rounds on either side (`repeats`), the intervals are printed but no change is named ("not
judged"). Two runs of the same code differ by more than a bootstrap over one run's requests
allows (the server's state, the machine's load), so a single round per side would call that
noise a change. And the facts that must agree are read from the records where the records
hold them (sample rate, protocol, prompt set): a `summary.json` that contradicts its own
records is refused, naming both. What is read is checked (thetalker.report.compare_inputs):
a file of the wrong shape, an unknown record schema, an empty records file or a manifest
path leaving its run is refused in one line naming the file; records of schema /1 against
/2 are compared with a warning (TTFA and the player's figures changed definition).

The two runs are independent (different sessions, maybe different servers), so nothing is
paired: a side's RTFx is the mean of its rounds' RTFx, each over its own window, and a round
whose requests all failed counts at 0 (a measurement, not a gap: the verdict names it);
B / A is the ratio of those means, with Fieller's interval and Welch's degrees of freedom
when both ran N > 1 rounds ([0, inf] where A's mean cannot be told from 0), else a bootstrap
over each run's requests with each round's window kept (thetalker.metrics.intervals.rounds). No
interval is zero-wide: rounds all alike get the bootstrap. The TTFA percentiles and
continuity are bootstraps over each run's requests (pooled over rounds), resampled on
their own. All from `thetalker.metrics`. Where both points saved what the listener hears
(dnsmos.json, health.json beside the records: docs/quality.md), two more: DNSMOS OVRL B - A
(paired by prompt, as naturalness.md pairs loads) and the share of clean streams B - A in
percentage points (each side resampled on its own); their columns appear only then.

Beside the intervals, a verdict per figure (the `verdict` column; thetalker.report
.compare_verdicts): regression, improvement or "no change the run can show", by the A/B's
rule (thetalker.metrics.ab_verdicts): the interval clear of no change, the estimate at least
the minimum effect (`--min-effect-rate-pct` 5 for RTFx, the larger of `--min-effect-time-s`
0.020 and `--min-effect-time-pct` 10 of A's value for TTFA, `--min-effect-share-pp` 5 for
continuity and clean streams), and, where both folders ran the same number of rounds (2+),
every round k of B against round k of A on the same side by that much; otherwise the verdict
rests on the interval alone and says so. A side whose requests mostly failed is a failed arm
("failed arm (B): k of n requests failed"), never a speed-up.

Exit status: 0 compared, 1 nothing to compare, 2 bad input; with `--fail-on-regression`,
3 when any figure's verdict is regression or B is a failed arm (a nightly job that keeps
yesterday's results/ gates on today's).

    thetalker-compare results-2026-11 results [--csv changes.csv] [--fail-on-regression]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker import metrics
from thetalker.data.record_reads import RecordError, read_rounds
from thetalker.metrics import Interval, MinEffect
from thetalker.report.compare_inputs import (
    CompareError,
    PointKey,
    differs,
    find_points,
    find_runs,
    listened,
    point_facts,
    point_schema,
    run_rounds,
)
from thetalker.report.compare_verdicts import point_verdicts, regressions, verdict_cell

__all__ = [
    "CompareError",
    "find_runs",
    "run_rounds",
    "find_points",
    "point_facts",
    "compare_point",
    "compare_folders",
    "distinguishable",
    "not_judged",
    "format_changes",
    "csv_rows",
    "regressions",
]

# (name in the output, key of compare_point, the value meaning "no change", digits)
FIGURES = (
    ("RTFx B/A", "rtfx_ratio", 1.0, 3),
    ("TTFA p50 B-A (s)", "ttfa_s_p50_change", 0.0, 3),
    ("TTFA p90 B-A (s)", "ttfa_s_p90_change", 0.0, 3),
    # Continuity under one named player model on both sides (thetalker.metrics.players).
    ("continuity max_deficit_0.1s B-A (pp)", "continuity_pct_change", 0.0, 1),
)
# Schema /2 took TTFA and the player's figures from the reads, /1 from the chunks
# (docs/records.md): compared across the two, those changes hold the difference too.
_SCHEMAS_DIFFER = (
    "A's records are {0}, B's {1}: TTFA and the player's figures (continuity) are taken "
    "from the chunks in /1 and from the reads in /2, so their changes hold that difference "
    "too (RTFx is the same figure)"
)
# Rounds a side needs before a change is named: the run-to-run noise is measured by them.
MIN_ROUNDS = 2


# What the listener hears (docs/quality.md), where both points saved and scored their audio
# (dnsmos.json, health.json beside the first round's records); columns only when one has it.
LISTEN_FIGURES = (
    ("DNSMOS OVRL B-A", "dnsmos_ovrl_change", 0.0, 2),
    ("clean streams B-A (pp)", "clean_pct_change", 0.0, 1),
)


def _ok(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("ok") and not r.get("warmup")]


def _clean(streams: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per stream 1 when it succeeded with no audio defect, else 0 (a failure counts)."""
    return [1.0 if s.get("ok") and not s.get("defects") else 0.0 for s in streams]


def compare_listened(folder_a: Path | None, folder_b: Path | None, seed: int) -> dict[str, Any]:
    """DNSMOS OVRL B - A (paired by prompt where it can be, as in naturalness.md) and the
    clean share B - A in points (each side resampled on its own); no value where a side
    lacks the file."""
    from thetalker.report.naturalness import load_difference

    dnsmos_a, health_a = listened(folder_a)
    dnsmos_b, health_b = listened(folder_b)
    none = Interval(None, None, None, "none", 0)
    out: dict[str, Any] = {"dnsmos_ovrl_change": none, "clean_pct_change": none}
    if dnsmos_a and dnsmos_b:
        out["dnsmos_ovrl_change"] = load_difference(dnsmos_b, dnsmos_a)[0]
    if health_a and health_b:
        # Every stream clean on both sides is no certainty: Newcombe's interval then.
        out["clean_pct_change"] = metrics.share_change_pct(
            _clean(health_b), _clean(health_a), seed=seed
        )
    return out


def _without_audio(
    rounds_a: Sequence[Sequence[Mapping[str, Any]]], rounds_b: Sequence[Sequence[Mapping[str, Any]]]
) -> str:
    """`A round 1, B round 3`: the rounds whose requests delivered no audio (RTFx 0), named
    beside the verdict: a failure the interval alone may not call a change."""
    return ", ".join(
        f"{side} round {k}"
        for side, rounds in (("A", rounds_a), ("B", rounds_b))
        for k, records in enumerate(rounds, start=1)
        if metrics.round_rtfx(records) == 0.0
    )


def compare_point(
    rounds_a: Sequence[Sequence[Mapping[str, Any]]],
    rounds_b: Sequence[Sequence[Mapping[str, Any]]],
    seed: int = metrics.SEED,
    folders: tuple[Path, Path] | None = None,
    min_effect: MinEffect | None = None,
) -> dict[str, Any]:
    """B against A at one point: the figures of each side and the Intervals of the change;
    with `folders` (each side's point folder), what the listener hears too; `verdicts`: a
    Verdict per judged figure against `min_effect` (thetalker.report.compare_verdicts)."""
    pooled_a = [r for one in rounds_a for r in one]
    pooled_b = [r for one in rounds_b for r in one]
    ttfa_a = [r.get("ttfa_s") for r in _ok(pooled_a)]
    ttfa_b = [r.get("ttfa_s") for r in _ok(pooled_b)]
    # The change bootstraps at once: those over samples of the same sizes share the draws.
    jobs: dict[Any, Any] = {
        ("p50", "p90"): metrics.percentile_change_job(ttfa_b, ttfa_a, (50, 90)),
        "continuity": metrics.continuity_change_job(pooled_b, pooled_a),
    }
    # One round a side: RTFx's bootstrap shares the draws too. Otherwise each side's RTFx is
    # the mean of its rounds, each over its own window, a failed round at 0
    # (thetalker.metrics.intervals.rounds).
    one_each = len(rounds_a) == 1 and len(rounds_b) == 1
    ratio_job = metrics.rtfx_change_job(pooled_b, pooled_a, ratio=True) if one_each else None
    if ratio_job is not None:
        jobs["ratio"] = ratio_job
    change = metrics.shared_change_bootstrap(jobs, seed=seed)
    if not one_each:
        ratio = metrics.rounds_rtfx_ratio(rounds_b, rounds_a, seed=seed)
    else:
        # No window on a side: no ratio (rtfx_change_bootstrap's answer for it).
        ratio = change["ratio"] if ratio_job else metrics.rtfx_change_bootstrap([], [])
    row = {
        "rounds_a": len(rounds_a),
        "rounds_b": len(rounds_b),
        "rtfx_a": metrics.rounds_rtfx_interval(rounds_a, seed=seed),
        "rtfx_b": metrics.rounds_rtfx_interval(rounds_b, seed=seed),
        "rtfx_ratio": ratio,
        "rounds_without_audio": _without_audio(rounds_a, rounds_b),
        "ttfa_s_p50_a": metrics.percentiles(ttfa_a)["p50"],
        "ttfa_s_p50_b": metrics.percentiles(ttfa_b)["p50"],
        "ttfa_s_p50_change": change["p50"],
        "ttfa_s_p90_change": change["p90"],
        "continuity_pct_a": metrics.continuity_interval(pooled_a),
        "continuity_pct_b": metrics.continuity_interval(pooled_b),
        "continuity_pct_change": metrics.continuity_change_at_bound(
            change["continuity"], jobs["continuity"]
        ),
        **compare_listened(*(folders or (None, None)), seed),
    }
    row["verdicts"] = point_verdicts(row, rounds_a, rounds_b, min_effect)
    return row


def compare_folders(
    a: str | Path,
    b: str | Path,
    seed: int = metrics.SEED,
    warn: Callable[[str], None] | None = None,
    min_effect: MinEffect | None = None,
) -> tuple[list[dict[str, Any]], list[PointKey], list[PointKey], list[str]]:
    """Rows for the points in both folders that measured the same thing (sorted), the
    points only in A, only in B, and a line for each point in both that is not compared
    because its load, sample rate, model, protocol or prompt set differ (naming which).
    A point whose two sides were written under different record schemas is compared, and
    `warn` (default: stderr) says so: its TTFA and player changes hold that difference.
    Each row's `verdicts` are judged against `min_effect` (default MinEffect())."""
    say = warn or (lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
    try:
        points_a, points_b = find_points(a), find_points(b)
    except RecordError as exc:
        raise CompareError(str(exc)) from None
    both = sorted(set(points_a) & set(points_b))
    rows, unlike = [], []
    for key in both:
        try:
            rounds_a = read_rounds(points_a[key])
            rounds_b = read_rounds(points_b[key])
            unlike_facts = differs(
                point_facts(points_a[key], rounds_a), point_facts(points_b[key], rounds_b)
            )
        except RecordError as exc:
            raise CompareError(str(exc)) from None
        if unlike_facts:
            line = "; ".join(unlike_facts)
            unlike.append(f"{'/'.join(key)}: not compared, A and B differ in {line}")
            continue
        schemas = (point_schema(points_a[key]), point_schema(points_b[key]))
        if schemas[0] != schemas[1]:
            say(f"{'/'.join(key)}: {_SCHEMAS_DIFFER.format(*schemas)}")
        run, system, model, point = key
        rows.append(
            {
                "run": run,
                "system": system,
                "model": model,
                "point": point,
                **compare_point(
                    rounds_a,
                    rounds_b,
                    seed,
                    (points_a[key][0].parent, points_b[key][0].parent),
                    min_effect,
                ),
            }
        )
    only_a = sorted(set(points_a) - set(points_b))
    return rows, only_a, sorted(set(points_b) - set(points_a)), unlike


def _cell(ci: Interval, digits: int, style: str = "plain") -> str:
    """`v [low, high]`; style `ratio` adds `x`, `change` a sign; `n/a` without a value."""
    if ci.value is None:
        return "n/a"
    sign = "+" if style == "change" else ""
    value = f"{ci.value:{sign}.{digits}f}" + ("x" if style == "ratio" else "")
    if ci.low is None or ci.high is None:
        return value
    return f"{value} [{ci.low:.{digits}f}, {ci.high:.{digits}f}]"


def _text(value: Any) -> str:
    """A label as one Markdown cell: on one line, its `|` escaped (a name cannot split the row)."""
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def not_judged(row: Mapping[str, Any]) -> str | None:
    """Why no change of the row is named (too few rounds to measure run-to-run noise), or None."""
    if min(row["rounds_a"], row["rounds_b"]) >= MIN_ROUNDS:
        return None
    return (
        f"not judged: {row['rounds_a']} round(s) in A, {row['rounds_b']} in B; run-to-run "
        f"noise needs {MIN_ROUNDS}+ a side (repeats)"
    )


def distinguishable(row: Mapping[str, Any]) -> list[str]:
    """The names of the changes whose interval excludes no change; none when not judged."""
    if not_judged(row) is not None:
        return []
    figures = (*FIGURES, *LISTEN_FIGURES)
    return [name for name, key, null, _ in figures if key in row and row[key].excludes(null)]


def format_changes(rows: Sequence[Mapping[str, Any]]) -> str:
    listened = any(
        key in row and row[key].value is not None for row in rows for _, key, *_ in LISTEN_FIGURES
    )
    figures = (*FIGURES, *LISTEN_FIGURES) if listened else FIGURES
    header = ["run", "system", "model", "point", "RTFx A", "RTFx B"]
    header += [*(name for name, *_ in figures), "verdict", "distinguishable from noise"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([" --- "] * 4 + [" ---: "] * (len(header) - 6) + [" --- "] * 2) + "|",
    ]
    names = {key: name for name, key, *_ in (*FIGURES, *LISTEN_FIGURES)}
    for row in rows:
        rtfx = [_cell(row[k], 1) for k in ("rtfx_a", "rtfx_b")]
        changes = [
            _cell(row[key], digits, "ratio" if key == "rtfx_ratio" else "change")
            for _, key, _, digits in figures
        ]
        named = distinguishable(row)
        verdict = not_judged(row) or ", ".join(named) or "none"
        if row.get("rounds_without_audio"):
            verdict += f"; {row['rounds_without_audio']} delivered no audio"
        labels = [_text(row[k]) for k in ("run", "system", "model", "point")]
        judged = _text(verdict_cell(row.get("verdicts", {}), names))
        cells = [*labels, *rtfx, *changes, judged, verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        flat: dict[str, Any] = {
            "run": row["run"],
            "system": row["system"],
            "model": row["model"],
            "point": row["point"],
        }
        for key, value in row.items():
            if key == "verdicts":
                continue
            if isinstance(value, Interval):
                flat.update({key: value.value, f"{key}_low": value.low, f"{key}_high": value.high})
                flat[f"{key}_method"] = value.method
            elif key not in flat:
                flat[key] = value
        flat["distinguishable"] = ";".join(distinguishable(row))
        flat["not_judged"] = not_judged(row) or ""
        verdicts = row.get("verdicts", {})
        names = {key: name for name, key, *_ in (*FIGURES, *LISTEN_FIGURES)}
        flat["verdict"] = verdict_cell(verdicts, names)
        for key, verdict in verdicts.items():
            flat[f"{key}_verdict"], flat[f"{key}_verdict_why"] = verdict.label, verdict.why
        out.append(flat)
    return out
