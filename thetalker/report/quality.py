"""The WER table and figure from the wer.json files of the quality stage.

They print what `thetalker.quality.wer.summarize` wrote and compute nothing new: the table shows
`wer_pm` (`x.xx ± y.yy`, percent; `x.xx [low, high]` where the sentences had no spread to
bootstrap, e.g. no error) per model (row) and system (column), with the ASR model and the
normaliser named under it; the figure draws each WER as a point with its interval as an
asymmetric bar. A wer.json without `system`/`model` labels takes
them from its path, results/quality/{system}/{model}/wer.json.

    python -m thetalker.report.quality --wer results/quality/*/*/wer.json \
        --table results/tables/wer.md --figure results/figures/wer.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.report.markdown import md_cell

__all__ = ["MISSING", "QualityReportError", "load_wer", "wer_table", "wer_figure", "main"]

MISSING = "n/a"
FIGSIZE = (8.0, 4.5)
DPI = 120
WerSource = str | Path | Mapping[str, Any]


class QualityReportError(ValueError):
    """A wer.json that cannot be reported; the message names the file and field."""


def load_wer(source: WerSource) -> dict[str, Any]:
    """A wer.json as a dict with `system` and `model` filled in (from its path if absent)."""
    if isinstance(source, Mapping):
        data, where = dict(source), "<dict>"
    else:
        path = Path(source)
        where = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise QualityReportError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        data.setdefault("system", None)
        data.setdefault("model", None)
        data["system"] = data["system"] or path.parent.parent.name
        data["model"] = data["model"] or path.parent.name
    for field in ("system", "model", "wer", "ci_low", "ci_high", "wer_pm"):
        if field not in data:
            raise QualityReportError(f"{where}: missing field {field!r}")
    return data


def _grid(
    sources: Sequence[WerSource], models: Sequence[str] | None, systems: Sequence[str] | None
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[str], list[str]]:
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for src in sources:
        data = load_wer(src)
        cells[(str(data["model"]), str(data["system"]))] = data
    seen_models = list(dict.fromkeys(m for m, _ in cells))
    seen_systems = list(dict.fromkeys(s for _, s in cells))
    return cells, list(models or seen_models), list(systems or seen_systems)


def _provenance(cells: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[str]:
    """One line per distinct ASR model / normaliser, so a mix is visible, not hidden."""
    lines = []
    for data in cells.values():
        asr = data.get("asr") or {}
        versions = ", ".join(f"{k} {v}" for k, v in (asr.get("versions") or {}).items() if v)
        line = (
            f"ASR: {asr.get('backend', 'unknown')} model "
            f"{asr.get('model_name') or asr.get('model', 'unknown')}"
            + (f" ({versions})" if versions else "")
            + f"; normaliser: {data.get('normalizer', 'unknown')}"
            + f"; {data.get('n_resamples', '?')} bootstrap resamples, seed {data.get('seed', '?')}"
        )
        if line not in lines:
            lines.append(line)
    return lines


def wer_table(
    wer_jsons: Sequence[WerSource],
    models: Sequence[str] | None = None,
    systems: Sequence[str] | None = None,
) -> str:
    """Markdown: WER in percent, `x.xx ± y.yy` (half the 95% bootstrap interval) or
    `x.xx [low, high]` (no spread to bootstrap: the Wilson interval of edits over words)."""
    cells, models, systems = _grid(wer_jsons, models, systems)
    header = "| model | " + " | ".join(md_cell(s) for s in systems) + " |"
    rule = "|---|" + "---:|" * len(systems)
    rows = []
    for model in models:
        values = []
        for system in systems:
            data = cells.get((model, system))
            values.append(str(data["wer_pm"]) if data and data.get("wer") is not None else MISSING)
        rows.append(f"| {md_cell(model)} | " + " | ".join(values) + " |")
    notes = [f"- {line}" for line in _provenance(cells)]
    return "\n".join(
        [
            "WER (%), pooled over sentences, ± half the 95% bootstrap interval over sentences; "
            "[low, high] where the sentences show no spread to bootstrap (no error, or the "
            "same rate in each): the 95% Wilson interval of edits over words, what the sample "
            "cannot rule out (docs/quality.md).",
            "",
            header,
            rule,
            *rows,
            "",
            *notes,
            "",
        ]
    )


def wer_figure(
    wer_jsons: Sequence[WerSource],
    out: str | Path,
    models: Sequence[str] | None = None,
    systems: Sequence[str] | None = None,
) -> None:
    """Points at the pooled WER with bars from ci_low to ci_high, one colour per system."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    cells, models, systems = _grid(wer_jsons, models, systems)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    step = 0.6 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs, ys, lows, highs = [], [], [], []
        for j, model in enumerate(models):
            data = cells.get((model, system))
            if not data or data.get("wer") is None:
                continue
            xs.append(j + (i - (len(systems) - 1) / 2) * step)
            ys.append(float(data["wer"]))
            lows.append(float(data["wer"]) - float(data["ci_low"]))
            highs.append(float(data["ci_high"]) - float(data["wer"]))
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o", capsize=4, label=system)
    ax.set_xticks(range(len(models)), list(models))
    ax.set_xlim(-0.5, len(models) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("WER (%), 95% bootstrap interval")
    ax.set_title("Word error rate (Whisper transcription of the streamed audio)")
    ax.legend()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m thetalker.report.quality", description=__doc__.split("\n")[0]
    )
    p.add_argument("--wer", nargs="+", required=True, help="wer.json files")
    p.add_argument("--models", nargs="+", help="row order (default: as found)")
    p.add_argument("--systems", nargs="+", help="column order (default: as found)")
    p.add_argument("--table", help="Markdown file to write")
    p.add_argument("--figure", help="PNG file to write")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.table:
            table = wer_table(args.wer, args.models, args.systems)
            Path(args.table).parent.mkdir(parents=True, exist_ok=True)
            Path(args.table).write_text(table, encoding="utf-8")
        if args.figure:
            wer_figure(args.wer, args.figure, args.models, args.systems)
    except (QualityReportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
