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
records is refused, naming both.

The two runs are independent (different sessions, maybe different servers), so nothing is
paired: RTFx compares the rounds' RTFx by Welch's t when both ran N > 1 rounds, else a
bootstrap over each run's requests with each run's window kept; the TTFA percentiles and
continuity are bootstraps over each run's requests (pooled over rounds), resampled on
their own. All from `thetalker.metrics`. Where both points saved what the listener hears
(dnsmos.json, health.json beside the records: docs/quality.md), two more: DNSMOS OVRL B - A
(paired by prompt, as naturalness.md pairs loads) and the share of clean streams B - A in
percentage points (each side resampled on its own); their columns appear only then.

    thetalker-compare results-2026-11 results [--csv changes.csv]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker import metrics
from thetalker.data.records import RecordError, read_json, read_rounds
from thetalker.metrics import Interval

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
]

PointKey = tuple[str, str, str, str]
_MANIFEST = "search.json"
_POINT_DIR = re.compile(r"^(?:c\d+|r\d+(?:\.\d+)?)$")
_ROUND_DIR = re.compile(r"^round(\d+)$")
# (name in the output, key of compare_point, the value meaning "no change", digits)
FIGURES = (
    ("RTFx B/A", "rtfx_ratio", 1.0, 3),
    ("TTFA p50 B-A (s)", "ttfa_s_p50_change", 0.0, 3),
    ("TTFA p90 B-A (s)", "ttfa_s_p90_change", 0.0, 3),
    # Continuity under one named player model on both sides (thetalker.metrics.players).
    ("continuity max_deficit_0.1s B-A (pp)", "continuity_pct_change", 0.0, 1),
)
# Rounds a side needs before a change is named: the run-to-run noise is measured by them.
MIN_ROUNDS = 2


# What the listener hears (docs/quality.md), where both points saved and scored their audio
# (dnsmos.json, health.json beside the first round's records); columns only when one has it.
LISTEN_FIGURES = (
    ("DNSMOS OVRL B-A", "dnsmos_ovrl_change", 0.0, 2),
    ("clean streams B-A (pp)", "clean_pct_change", 0.0, 1),
)


class CompareError(ValueError):
    """A folder that cannot be compared; the message names it."""


def find_runs(folder: str | Path) -> list[Path]:
    """The runs under a folder (the folder itself may be one): folders holding the bench
    job's manifest `search.json` (written by every job, a quality run's too)."""
    root = Path(folder)
    if not root.is_dir():
        raise CompareError(f"{root}: not a folder")
    return sorted(m.parent for m in root.rglob(_MANIFEST))


def run_rounds(run: Path) -> dict[str, list[Path]]:
    """point label -> the records file of each round, in round order: the grid points the
    job finished (a `summary.json` beside the records, in `{point}/` or `{point}/round<k>/`)
    and the search points its manifest lists. Nothing else in the folder counts: a stale
    `records.jsonl` beside rounds, or one with no summary, is refused, never pooled."""
    manifest = read_json(run / _MANIFEST)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("points"), list):
        raise CompareError(f"{run / _MANIFEST}: not a search manifest (no `points` list)")
    found: dict[str, list[Path]] = {}
    for point in sorted(p for p in run.iterdir() if p.is_dir() and _POINT_DIR.match(p.name)):
        rounds = sorted(
            (int(m.group(1)), d)
            for d in point.iterdir()
            if (m := _ROUND_DIR.match(d.name)) and d.is_dir()
        )
        if rounds and (point / "records.jsonl").exists():
            raise CompareError(
                f"{point}: both records.jsonl and round folders; which is the run is unclear"
            )
        dirs = [d for _, d in rounds] if rounds else [point]
        if [k for k, _ in rounds] != list(range(1, len(rounds) + 1)):
            raise CompareError(f"{point}: rounds {[k for k, _ in rounds]}, not 1..{len(rounds)}")
        for d in dirs:
            if (d / "records.jsonl").exists() and not (d / "summary.json").exists():
                raise CompareError(f"{d}: records.jsonl without summary.json (a job cut short)")
        if all((d / "records.jsonl").exists() for d in dirs) and dirs:
            found[point.name] = [d / "records.jsonl" for d in dirs]
    for entry in manifest["points"]:
        files = [_under(run, Path(r)) for r in entry.get("records") or []]
        if files:
            found[f"search/{entry['point']}"] = files
    return found


def _under(run: Path, recorded: Path) -> Path:
    """A manifest's records path, taken below the run's own `search/` (the folder may have
    moved since the job wrote it)."""
    parts = recorded.parts
    if "search" not in parts:
        raise CompareError(f"{run / _MANIFEST}: {recorded} is not under search/")
    i = len(parts) - 1 - parts[::-1].index("search")
    return run.joinpath(*parts[i:])


def find_points(folder: str | Path) -> dict[PointKey, list[Path]]:
    """(run, system, model, point) -> its records files (one per round, in round order),
    for every run under the folder. `run` is where the run sits (`runs`, `quality`)."""
    root = Path(folder)
    found: dict[PointKey, list[Path]] = {}
    for run in find_runs(root):
        manifest = read_json(run / _MANIFEST)
        where = run.relative_to(root).parts  # e.g. (runs, S, M): the run sits in `runs`
        kind = "/".join(where[:-2]) or "."
        system = str(manifest.get("system") or run.parent.name)
        model = str(manifest.get("model") or run.name)
        for point, files in run_rounds(run).items():
            found[(kind, system, model, point)] = files
    return found


def point_facts(files: Sequence[Path], rounds: Sequence[Sequence[Mapping[str, Any]]]) -> dict:
    """What must agree for two points to be compared: the load, the sample rate, the model
    sent, the protocol, and the prompt set (the texts of the scored requests)."""
    facts: dict[str, Any] = {}
    for path, records in zip(files, rounds, strict=True):
        summary_path = path.with_name("summary.json")
        summary = read_json(summary_path)
        options = summary.get("options") or {}
        scored = [r for r in records if not r["warmup"]]
        one = {
            "load": (summary.get("concurrency"), summary.get("request_rate")),
            "sample rate": _records_say(scored, "sample_rate", summary.get("sample_rate"), path),
            "model": options.get("model"),
            "protocol": _records_say(scored, "protocol", options.get("protocol", "http"), path),
            "prompt set": frozenset(r["text"] for r in scored),
        }
        if one["sample rate"] != summary.get("sample_rate"):
            raise CompareError(
                f"{summary_path}: sample_rate {summary.get('sample_rate')}, but its records "
                f"{path.name} were measured at {one['sample rate']} Hz"
            )
        if one["protocol"] != options.get("protocol", "http"):
            raise CompareError(
                f"{summary_path}: protocol {options.get('protocol', 'http')}, but its records "
                f"{path.name} are {one['protocol']}"
            )
        if facts and one != facts:
            raise CompareError(f"{path}: its rounds differ in {_differs(facts, one)[0]}")
        facts = one
    return facts


def _records_say(records: Sequence[Mapping[str, Any]], field: str, default: Any, path: Path) -> Any:
    """The one value the scored records hold for `field` (`default` with none scored);
    records that hold several are refused."""
    values = {r.get(field, "http" if field == "protocol" else None) for r in records}
    if len(values) > 1:
        shown = ", ".join(sorted(map(str, values)))
        raise CompareError(f"{path}: its records mix {field} values ({shown})")
    return values.pop() if values else default


def _differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    out = []
    for name in a:
        if a[name] == b.get(name):
            continue
        if name == "prompt set":
            common = len(a[name] & b[name])
            out.append(f"prompt set ({len(a[name])} vs {len(b[name])} texts, {common} in common)")
        elif name == "load":
            out.append(f"load ({_load(a[name])} vs {_load(b[name])})")
        else:
            out.append(f"{name} ({a[name]} vs {b[name]})")
    return out


def _load(load: tuple[Any, Any]) -> str:
    concurrency, rate = load
    return f"{rate} req/s" if rate is not None else f"{concurrency} streams"


def _ok(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("ok") and not r.get("warmup")]


def _listened(folder: Path | None) -> tuple[list[dict[str, Any]] | None, list[Any] | None]:
    """(DNSMOS streams, health streams) saved beside a point's records; None where absent
    (or DNSMOS not installed)."""
    if folder is None:
        return None, None
    out: list[list[Any] | None] = []
    for name in ("dnsmos.json", "health.json"):
        path = folder / name
        data = read_json(path) if path.exists() else {}
        streams = data.get("streams") if data.get("available", True) else None
        out.append(streams if isinstance(streams, list) and streams else None)
    return out[0], out[1]


def _clean(streams: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per stream 1 when it succeeded with no audio defect, else 0 (a failure counts)."""
    return [1.0 if s.get("ok") and not s.get("defects") else 0.0 for s in streams]


def compare_listened(folder_a: Path | None, folder_b: Path | None, seed: int) -> dict[str, Any]:
    """DNSMOS OVRL B - A (paired by prompt where it can be, as in naturalness.md) and the
    clean share B - A in points (each side resampled on its own); no value where a side
    lacks the file."""
    from thetalker.report.naturalness import load_difference

    dnsmos_a, health_a = _listened(folder_a)
    dnsmos_b, health_b = _listened(folder_b)
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


def compare_point(
    rounds_a: Sequence[Sequence[Mapping[str, Any]]],
    rounds_b: Sequence[Sequence[Mapping[str, Any]]],
    seed: int = metrics.SEED,
    folders: tuple[Path, Path] | None = None,
) -> dict[str, Any]:
    """B against A at one point: the figures of each side and the Intervals of the change;
    with `folders` (each side's point folder), what the listener hears too."""
    pooled_a = [r for one in rounds_a for r in one]
    pooled_b = [r for one in rounds_b for r in one]
    ttfa_a = [r.get("ttfa_s") for r in _ok(pooled_a)]
    ttfa_b = [r.get("ttfa_s") for r in _ok(pooled_b)]
    # The change bootstraps at once: those over samples of the same sizes share the draws.
    jobs: dict[Any, Any] = {
        ("p50", "p90"): metrics.percentile_change_job(ttfa_b, ttfa_a, (50, 90)),
        "continuity": metrics.continuity_change_job(pooled_b, pooled_a),
    }
    repeats = len(rounds_a) > 1 and len(rounds_b) > 1
    ratio_job = None if repeats else metrics.rtfx_change_job(pooled_b, pooled_a, ratio=True)
    if ratio_job is not None:
        jobs["ratio"] = ratio_job
    change = metrics.shared_change_bootstrap(jobs, seed=seed)
    if repeats:
        rtfx_a = [metrics.summarize_point(r)["rtfx"] for r in rounds_a]
        rtfx_b = [metrics.summarize_point(r)["rtfx"] for r in rounds_b]
        ratio = metrics.welch_interval(rtfx_b, rtfx_a, ratio=True)
    else:
        # No window on a side: no ratio (rtfx_change_bootstrap's answer for it).
        ratio = change["ratio"] if ratio_job else metrics.rtfx_change_bootstrap([], [])
    return {
        "rounds_a": len(rounds_a),
        "rounds_b": len(rounds_b),
        "rtfx_a": metrics.rtfx_interval(rounds_a, seed=seed),
        "rtfx_b": metrics.rtfx_interval(rounds_b, seed=seed),
        "rtfx_ratio": ratio,
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


def compare_folders(
    a: str | Path, b: str | Path, seed: int = metrics.SEED
) -> tuple[list[dict[str, Any]], list[PointKey], list[PointKey], list[str]]:
    """Rows for the points in both folders that measured the same thing (sorted), the
    points only in A, only in B, and a line for each point in both that is not compared
    because its load, sample rate, model, protocol or prompt set differ (naming which)."""
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
            differs = _differs(
                point_facts(points_a[key], rounds_a), point_facts(points_b[key], rounds_b)
            )
        except RecordError as exc:
            raise CompareError(str(exc)) from None
        if differs:
            unlike.append(f"{'/'.join(key)}: not compared, A and B differ in " + "; ".join(differs))
            continue
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
    header += [*(name for name, *_ in figures), "distinguishable from noise"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([" --- "] * 4 + [" ---: "] * (len(header) - 5) + [" --- "]) + "|",
    ]
    for row in rows:
        rtfx = [_cell(row[k], 1) for k in ("rtfx_a", "rtfx_b")]
        changes = [
            _cell(row[key], digits, "ratio" if key == "rtfx_ratio" else "change")
            for _, key, _, digits in figures
        ]
        named = distinguishable(row)
        cells = [
            row["run"],
            row["system"],
            row["model"],
            row["point"],
            *rtfx,
            *changes,
            not_judged(row) or ", ".join(named) or "none",
        ]
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
            if isinstance(value, Interval):
                flat.update({key: value.value, f"{key}_low": value.low, f"{key}_high": value.high})
                flat[f"{key}_method"] = value.method
            elif key not in flat:
                flat[key] = value
        flat["distinguishable"] = ";".join(distinguishable(row))
        flat["not_judged"] = not_judged(row) or ""
        out.append(flat)
    return out
