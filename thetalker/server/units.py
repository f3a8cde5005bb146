"""Text arriving in pieces into the units a WebSocket session synthesizes (`split_granularity`).

The rules of vllm-omni 0.30.0's `SpeechTextSplitter` (`speech_text_splitter.py`; the contract
tier compares the two): `none` keeps everything until the flush (`input.done`); `sentence`
closes a unit after `.`, `!` or `?`; `clause` also after `,` and `;` (and the CJK, Devanagari
and Arabic marks of each, which close a unit whatever follows them). An ASCII terminator
closes a unit only when whitespace follows (so `3.14`, `e.g.x` stay whole), and a terminator
at the end of what has arrived waits for the next piece (it may be `...` still growing). A
run of terminators and closing quotes or brackets stays with the unit it ends (`Wait..."`).
`.` after a known abbreviation (`Dr.`, `e.g.`) or a single letter (`J. R. R.`) closes
nothing, nor does one between digits. Units are stripped.
"""

from __future__ import annotations

__all__ = ["GRANULARITIES", "UnitSplitter"]

GRANULARITIES = ("none", "sentence", "clause")

_ASCII_CLAUSE = frozenset(".!?,;")
# Marks of other scripts (CJK, Devanagari danda, Arabic) are unambiguous: they close a unit
# as soon as the character after them is known, whitespace or not.
_SCRIPT_SENTENCE = frozenset("\u3002\uff01\uff1f\u2026\u0964\u0965\u061f")
_SENTENCE = frozenset(".!?") | _SCRIPT_SENTENCE
_CLAUSE = _SENTENCE | frozenset(",;") | frozenset("\uff0c\uff1b\u060c\u061b")
_CLOSING = frozenset("\"')]}\u201d\u2019\u00bb\u300f\u300d\uff09\u3011")
_RUN = _CLAUSE | _CLOSING
_ABBREVIATIONS = frozenset(
    {"dr", "mr", "mrs", "ms", "prof", "sr", "jr", "st", "mt", "fig", "no", "vs", "etc"}
    | {"approx", "dept", "inc", "ltd", "co", "al", "e.g", "i.e", "u.s", "u.k", "a.m", "p.m"}
)


def _token_before(buffer: str, index: int) -> str:
    start = index
    while start > 0 and (buffer[start - 1].isalnum() or buffer[start - 1] == "."):
        start -= 1
    return buffer[start:index]


def _closes(buffer: str, index: int) -> bool:
    """Whether the terminator at `index` may close a unit (not a decimal or abbreviation)."""
    ch = buffer[index]
    between = 0 < index < len(buffer) - 1
    if ch in ".," and between and buffer[index - 1].isdigit() and buffer[index + 1].isdigit():
        return False
    if ch == ".":
        token = _token_before(buffer, index)
        abbreviation = token.lower().strip(".") in _ABBREVIATIONS
        if token and ((len(token) == 1 and token.isalpha()) or abbreviation):
            return False
    return True


class UnitSplitter:
    """One session's splitter: `feed` the pieces, `flush` at `input.done`."""

    def __init__(self, granularity: str = "none") -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"split_granularity must be one of {', '.join(GRANULARITIES)}")
        self.granularity = granularity
        self._terminators = {"none": None, "sentence": _SENTENCE, "clause": _CLAUSE}[granularity]
        self.buffer = ""

    def feed(self, text: str) -> list[str]:
        self.buffer += text
        return self._split(flush=False)

    def flush(self) -> list[str]:
        return self._split(flush=True)

    def _split(self, flush: bool) -> list[str]:
        terminators = self._terminators
        buffer = self.buffer
        units: list[str] = []
        last = 0
        if terminators is not None:
            i = 0
            while i < len(buffer):
                if buffer[i] not in terminators or not _closes(buffer, i):
                    i += 1
                    continue
                end = i + 1
                while end < len(buffer) and buffer[end] in _RUN:
                    end += 1
                if end >= len(buffer) and not flush:
                    break  # the run may still grow: decide with the next piece
                ascii_mark = buffer[i] in _ASCII_CLAUSE
                if end < len(buffer) and ascii_mark and not buffer[end].isspace():
                    i = end
                    continue
                unit = buffer[last:end].strip()
                if unit:
                    units.append(unit)
                last = i = end
        rest = buffer[last:]
        if flush:
            if rest.strip():
                units.append(rest.strip())
            rest = ""
        self.buffer = rest
        return units
