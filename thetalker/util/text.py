"""Split a long text into sentences a TTS server can speak one request at a time.

A sentence ends at `.`, `!`, `?` or an ellipsis (plus any closing quotes or brackets)
that is followed by whitespace and then by something that is not a lower-case letter,
or at a blank line. Abbreviations (`Mr.`, `Dr.`, `e.g.`, `U.S.`, initials) and decimals
(`3.14`) do not end one. A sentence longer than `max_chars` is cut at its last clause
boundary (comma, semicolon, colon, dash) that fits, else at its last space, else hard at
the limit. Guarantees: no part is empty, none is longer than `max_chars`, and the parts
joined back together are the text modulo whitespace.

A missed boundary only makes a part longer (still bounded by the cut), while a false one
splits a sentence mid-phrase and changes its prosody, so doubtful cases do not split.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_CHARS", "ABBREVIATIONS", "split_sentences"]

# About 15 to 20 s of speech: long enough for any normal sentence, short enough for
# servers with a 4096-token budget per request.
DEFAULT_MAX_CHARS = 300

# Lower-case, without the final period. Dotted initialisms (e.g., i.e., U.S., J.) are
# recognised by shape instead (see `_DOTTED_LETTERS`).
ABBREVIATIONS = frozenset(
    {
        "mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "ft", "rev", "hon",
        "gen", "col", "capt", "lt", "sgt", "gov", "sen", "rep", "pres", "vs", "etc", "al",
        "approx", "dept", "univ", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr",
        "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "cf", "ca", "viz", "esp",
    }
)  # fmt: skip

# Abbreviations that are also ordinary words ("I said no."): only before a number.
_NUMBER_ABBREVIATIONS = frozenset({"no", "nos", "vol", "p", "pp", "fig", "ch", "art", "sec"})

# A terminator run, then closing quotes/brackets, then whitespace or the end.
_SENTENCE_END = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]\u00bb]*)(?=\s|$)")
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
_DOTTED_LETTERS = re.compile(r"(?:[^\W\d_]\.)+")
# Clause boundaries: punctuation followed by whitespace; a spaced hyphen counts as a dash.
_CLAUSE_END = re.compile(r"(?:[,;:\u2014\u2013]|\s-)(?=\s)|[\u2014\u2013]")
_OPENERS = "\"'\u201c\u2018([\u00ab"


def split_sentences(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """The sentences of `text`, stripped, none empty, none longer than `max_chars`."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    parts: list[str] = []
    for sentence in _sentences(text):
        parts.extend(_cut_long(sentence, max_chars))
    return parts


def _sentences(text: str) -> list[str]:
    ends = {m.end() for m in _SENTENCE_END.finditer(text) if _ends_sentence(text, m)}
    breaks = {m.start() for m in _PARAGRAPH_BREAK.finditer(text)}
    cuts = sorted(ends | breaks)
    pieces: list[str] = []
    start = 0
    for cut in [*cuts, len(text)]:
        piece = text[start:cut].strip()
        if piece:
            pieces.append(piece)
        start = cut
    return pieces


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    rest = text[match.end() :].lstrip()
    if not rest:
        return True
    following = rest[0]
    if following.islower():
        return False  # "e.g. the", "Why?" she asked, "wait... no"
    terminator, closers = match.group(1), match.group(2)
    if terminator != "." or closers:
        return True
    word = _word_before(text, match.start())
    if _DOTTED_LETTERS.fullmatch(word + "."):
        return False  # initials and dotted initialisms: J. R. R., U.S., e.g.
    bare = word.lower()
    if bare in ABBREVIATIONS:
        return False
    return not (bare in _NUMBER_ABBREVIATIONS and following.isdigit())


def _word_before(text: str, end: int) -> str:
    """The token ending at `end` (exclusive), without opening quotes or brackets."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:end].lstrip(_OPENERS)


def _cut_long(sentence: str, max_chars: int) -> list[str]:
    parts = []
    rest = sentence
    while len(rest) > max_chars:
        cut = _cut_point(rest, max_chars)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts


def _cut_point(text: str, max_chars: int) -> int:
    """Where to cut `text` (stripped, longer than max_chars): 1 <= cut <= max_chars."""
    window = text[: max_chars + 1]  # a boundary right at the limit still fits
    clause_cuts = [m.end() for m in _CLAUSE_END.finditer(window) if m.end() <= max_chars]
    space_cuts = [i for i, ch in enumerate(window) if ch.isspace() and 0 < i <= max_chars]
    # A clause boundary in the first third would leave a tiny part: prefer a later space.
    if clause_cuts and clause_cuts[-1] >= max_chars // 3:
        return clause_cuts[-1]
    if space_cuts:
        return space_cuts[-1]
    if clause_cuts:
        return clause_cuts[-1]
    return max_chars
