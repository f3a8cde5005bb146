"""Reading records files and JSON files, refusing what is not what was written.

`read_records` reads records.jsonl a line at a time: each line decoded and checked against
`Record` in one msgspec pass (`fast_record`), the rest by the standard library and
`check_record`, which word the refusal; a key given twice, a request index read twice, a
figure apart from its timeline and request indices missing (`incompleteness`) are said or
refused naming file and line. `read_rounds` reads a point's rounds; `read_json` a JSON file
(summary.json, a manifest) as strictly. Writing them: thetalker.data.record_writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from thetalker.data.record_checks import timeline_problem
from thetalker.data.record_lines import (
    TOO_DEEP,
    RepeatedKey,
    counted_keys,
    fill_absent,
    no_repeats,
    presence_type,
    repeated_key,
)
from thetalker.data.records import ALL_RECORD_FIELDS, MAX_REQUEST_INDEX, Record, check_record

__all__ = [
    "RecordError",
    "read_records",
    "read_rounds",
    "fast_record",
    "missing_indices",
    "incompleteness",
    "read_json",
]


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not standard JSON")


def read_records(
    path: str | os.PathLike[str],
    warn: Callable[[str], None] | None = None,
    require_complete: bool = False,
    require_consistent: bool = False,
    declared_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; any bad line raises RecordError naming file and line.

    Every line is checked against the declared schema (`check_record`: required fields,
    declared types, finite numbers, the index range; `NaN`/`Infinity` tokens are refused),
    and a request index seen twice in the file is refused naming both lines: a record is
    never reinterpreted (a string `"false"` is not false) or counted twice.

    Two damages are reported, not hidden: a torn last line (a crash mid-write; everything
    before it is intact) is skipped with a warning naming file and line, and, once the file is
    read, request indices missing from 0..max (a failed or lost write) give a warning naming
    the file and the indices (`incompleteness`). `warn` gets each warning line (default: stderr
    with a `warning: ` prefix); `require_complete` raises RecordError for missing indices
    instead, after the last record was yielded.

    A record whose figures contradict its own timeline (`timeline_problem`: an `audio_s`
    its chunks do not carry, a `ttfa_s` after `wall_s`), or whose `sample_rate` is not the
    file's first record's, is warned once per field at the end (`FILE:LINE: field F: why`,
    and how many records are like it); `require_consistent` raises RecordError at the first.

    The file is read a line at a time (memory does not grow with it), and each line is
    decoded and checked in one pass of msgspec against `Record` (`fast_record`); a line
    that pass does not take goes through the standard library's decoder and `check_record`,
    which accept what the schema allows and word the refusal. `declared_only`: each record
    holds the schema's fields alone, every one (its default where the line has none), for a
    reader that needs nothing else: one typed pass (`fast_record`).
    """
    path = Path(path)
    say = warn if warn is not None else _warn_stderr
    seen: dict[int, int] = {}  # request_index -> its line
    doubts = _Doubts(path, require_consistent)
    rate: tuple[int, int] | None = None  # the file's sample rate, the line it was read at
    with path.open("rb") as fh:
        lines = iter(fh)  # split on \n alone, as written
        line = next(lines, None)
        lineno = 0
        while line is not None:
            following = next(lines, None)
            lineno += 1
            try:
                record, given = _fast_decode(line, declared_only)
                if record is None:
                    record = _checked_record(path, lineno, line, last=following is None, say=say)
                    if record is _TORN:
                        break
                    if record is None:  # a blank line
                        line = following
                        continue
                repeated = _repeat(line, record, given)
            except RecursionError:  # a value nested past what a decoder survives
                raise RecordError(f"{path}:{lineno}: {TOO_DEEP}") from None
            if repeated is not None:
                doubts.add(lineno, repeated, _REPEATED)
            index = record["request_index"]
            if index in seen:
                raise RecordError(
                    f"{path}:{lineno}: request_index {index} already read at line {seen[index]} "
                    "(a duplicated line would count that request twice)"
                )
            seen[index] = lineno
            problem = timeline_problem(record)
            if problem is not None:
                doubts.add(lineno, *problem)
            if rate is None:
                rate = (record["sample_rate"], lineno)
            elif record["sample_rate"] != rate[0]:
                doubts.add(lineno, "sample_rate", _other_rate(record["sample_rate"], *rate))
            yield record
            line = following
    doubts.say(say)
    indices = seen.keys()
    gap = incompleteness(path, indices)
    if gap is not None:
        if require_complete:
            raise RecordError(gap)
        say(gap)


# msgspec decodes a line to the same dict as `json.loads` and checks it against `Record`
# in C: the strict types check_record asks for (a bool is no int, an int no bool, a float
# no string), numbers finite (msgspec refuses NaN, Infinity and out-of-range numbers).
# `declared_only` decodes straight into `Record` in one pass instead (the check with it, at
# about the untyped decode's cost): the record is then the instance's field dict, a field
# the line leaves out at its declared default (None, or `connection_reused` False,
# `protocol` "http": what readers take an absent one for) and a field the schema does not
# declare dropped.
# The declared decode goes into `Record`'s twin whose defaults are UNSET, so the fields the
# line gave are known (`fill_absent`): their count is what proves the line repeats no key.
_DECODE = msgspec.json.Decoder().decode
_DECODE_DECLARED = msgspec.json.Decoder(presence_type(Record)).decode
_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(Record) if f.default is not dataclasses.MISSING
}
_TORN: Any = object()
_REPEATED = "given twice in the line (a decoder keeps the last value: what it said first is lost)"


def fast_record(line: bytes, declared_only: bool = False) -> dict[str, Any] | None:
    """The line's record when msgspec takes it as one of the declared schema (None: it did
    not, or the line is blank; `_checked_record` decides and says why)."""
    return _fast_decode(line, declared_only)[0]


def _fast_decode(line: bytes, declared_only: bool = False) -> tuple[dict[str, Any] | None, int]:
    """`fast_record`'s record and how many top-level keys of the line it kept."""
    try:
        if declared_only:
            record = vars(_DECODE_DECLARED(line))
            given = fill_absent(record, ALL_RECORD_FIELDS, _DEFAULTS)
        else:
            record = _DECODE(line)
            msgspec.convert(record, Record)
            given = len(record)
    except msgspec.MsgspecError:
        return None, 0
    if not 0 <= record["request_index"] <= MAX_REQUEST_INDEX:
        return None, 0
    return record, given


def _repeat(line: bytes, record: dict[str, Any], given: int) -> str | None:
    """A key the line gives twice (None: none). One byte count proves most lines free of
    repeats (`counted_keys`); the rest, and lines the fast decode did not take (`given`
    0), are decoded once more by the standard library to find one."""
    if given and counted_keys(line, record, given):
        return None
    return repeated_key(line)


def _other_rate(rate: int, first: int, where: int | str) -> str:
    at = f"line {where}" if isinstance(where, int) else where
    return f"{rate} Hz, but {at} has {first} Hz (one run has one rate: its figures would mix two)"


class _Doubts:
    """Records whose figures contradict their timeline: refused at the first (`strict`), or
    said once per field when the file is read, naming the first line and the count."""

    def __init__(self, path: Path, strict: bool) -> None:
        self.path, self.strict = path, strict
        self.first: dict[str, tuple[int, str]] = {}
        self.count: dict[str, int] = {}

    def add(self, lineno: int, field: str, why: str) -> None:
        if self.strict:
            raise RecordError(f"{self.path}:{lineno}: field {field}: {why}")
        self.first.setdefault(field, (lineno, why))
        self.count[field] = self.count.get(field, 0) + 1

    def say(self, say: Callable[[str], None]) -> None:
        for field, (lineno, why) in self.first.items():
            more = self.count[field] - 1
            also = f" ({more} more record{'s' if more > 1 else ''} like it)" if more else ""
            say(f"{self.path}:{lineno}: field {field}: {why}{also}")


def _checked_record(
    path: Path, lineno: int, raw: bytes, last: bool, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """The line read by the standard library and `check_record`: the record, None for a
    blank line, `_TORN` for a torn last line (warned); RecordError saying what is wrong."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{path}:{lineno}: not UTF-8 text") from None
    if not line.strip():
        return None
    try:
        record = json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise RecordError(f"{path}:{lineno}: {TOO_DEEP}") from None
    except ValueError as exc:
        if last and not line.endswith("\n"):
            say(f"{path}:{lineno}: torn last line skipped (a write cut short, e.g. SIGKILL)")
            return _TORN  # torn final write: everything before it is intact
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise RecordError(f"{path}:{lineno}: not valid JSON ({why})") from None
    problem = check_record(record)
    if problem is not None:
        raise RecordError(f"{path}:{lineno}: {problem}")
    return record


def read_rounds(
    paths: Sequence[str | os.PathLike[str]],
    keep: Callable[[dict[str, Any]], Any] | None = None,
    **kwargs: Any,
) -> list[list[Any]]:
    """The records of each file (`read_records`, same options), one list per round; the
    same file named twice (by any path to it) is refused, as it would double the point.
    `keep`: what to hold of each record as it is read (e.g. the fields a table needs),
    so memory grows with that, not with the records' timelines; it is given the declared
    fields alone (`declared_only`), which is all a reader that keeps some can name."""
    seen: dict[Path, str] = {}
    for p in paths:
        real = Path(p).resolve()
        if real in seen:
            raise RecordError(f"{p}: the same records file as {seen[real]}, given twice")
        seen[real] = str(p)
    rounds: list[list[Any]] = []
    rate: tuple[int, str] | None = None  # the first round's sample rate, its file
    for p in paths:
        one = []
        for r in read_records(p, declared_only=keep is not None, **kwargs):
            if not one and rate is None:
                rate = (r["sample_rate"], str(p))
            elif not one and r["sample_rate"] != rate[0]:  # a file is one rate: read_records
                why = f"{p}: field sample_rate: {_other_rate(r['sample_rate'], *rate)}"
                if kwargs.get("require_consistent"):
                    raise RecordError(why)
                (kwargs.get("warn") or _warn_stderr)(why)
            one.append(r if keep is None else keep(r))
        rounds.append(one)
    return rounds


def _missing_runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """The runs (first, last) of indices absent from 0..max(indices), from the indices seen
    alone (nothing sized by the largest index)."""
    runs: list[tuple[int, int]] = []
    expected = 0
    for i in sorted(set(indices)):
        if i > expected:
            runs.append((expected, i - 1))
        expected = i + 1
    return runs


def missing_indices(indices: Iterable[int]) -> list[int]:
    """Request indices absent from 0..max(indices): records lost between written ones."""
    return [i for a, b in _missing_runs(indices) for i in range(a, b + 1)]


def incompleteness(path: str | os.PathLike[str], indices: Iterable[int]) -> str | None:
    """`FILE: incomplete: ...` naming the missing request indices, or None when none is."""
    indices = list(indices)
    runs = _missing_runs(indices)
    if not runs:
        return None
    total = max(indices) + 1
    n_missing = sum(b - a + 1 for a, b in runs)
    return (
        f"{path}: incomplete: {n_missing} of {total} request indices missing "
        f"({_ranges(runs)}); a record write failed or was lost"
    )


def _ranges(runs: list[tuple[int, int]], limit: int = 8) -> str:
    """`3, 30-67, 90`, at most `limit` runs then `...`."""
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    return ", ".join(shown) + (", ..." if len(runs) > limit else "")


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RepeatedKey as exc:
        raise RecordError(f"{path}: field {exc.key}: {_REPEATED}") from None
    except RecursionError:
        raise RecordError(f"{path}: {TOO_DEEP}") from None
