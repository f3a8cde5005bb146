"""The sentence splitter: a table of hard inputs, then the guarantees as properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thetalker.util.text import DEFAULT_MAX_CHARS, split_sentences

HARD_INPUTS = [
    pytest.param(
        "Mr. Smith met Dr. Jones. They talked.",
        ["Mr. Smith met Dr. Jones.", "They talked."],
        id="titles",
    ),
    pytest.param(
        "Pi is about 3.14 today. It was 2.72 yesterday.",
        ["Pi is about 3.14 today.", "It was 2.72 yesterday."],
        id="decimals",
    ),
    pytest.param(
        "The U.S. Army moved. Fruit, e.g. apples, is sweet. Others i.e. pears too.",
        ["The U.S. Army moved.", "Fruit, e.g. apples, is sweet.", "Others i.e. pears too."],
        id="dotted-initialisms",
    ),
    pytest.param(
        "J. R. R. Tolkien wrote it. See No. 5 now.",
        ["J. R. R. Tolkien wrote it.", "See No. 5 now."],
        id="initials-and-number-abbreviation",
    ),
    pytest.param("I said no. Then I left.", ["I said no.", "Then I left."], id="no-is-a-word"),
    pytest.param(
        '"Why?" she asked. "Because," he said, "it is late." Then he left.',
        ['"Why?" she asked.', '"Because," he said, "it is late."', "Then he left."],
        id="straight-quotes",
    ),
    pytest.param(
        "\u201cStop!\u201d he cried. \u2018Now.\u2019 She went.",
        ["\u201cStop!\u201d he cried.", "\u2018Now.\u2019", "She went."],
        id="curly-quotes",
    ),
    pytest.param(
        "Wait... no. Well... Maybe later\u2026 I think so?! Yes.",
        ["Wait... no.", "Well...", "Maybe later\u2026", "I think so?!", "Yes."],
        id="ellipses-and-runs",
    ),
    pytest.param("(It was late.) We left.", ["(It was late.)", "We left."], id="closing-bracket"),
    pytest.param(
        "Chapter One\n\nIt was a dark night", ["Chapter One", "It was a dark night"], id="heading"
    ),
    pytest.param("   \n\t ", [], id="only-whitespace"),
    pytest.param("No terminator at all", ["No terminator at all"], id="no-terminator"),
]


@pytest.mark.parametrize(("text", "expected"), HARD_INPUTS)
def test_hard_inputs_split_where_a_reader_would(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_long_sentence_is_cut_at_the_last_clause_boundary_that_fits() -> None:
    text = "one two three, four five six; seven eight nine ten eleven twelve."
    assert split_sentences(text, max_chars=40) == [
        "one two three, four five six;",
        "seven eight nine ten eleven twelve.",
    ]


def test_long_sentence_cut_at_a_spaced_dash() -> None:
    text = "alpha beta gamma delta - epsilon zeta eta theta iota."
    assert split_sentences(text, max_chars=30) == [
        "alpha beta gamma delta -",
        "epsilon zeta eta theta iota.",
    ]


def test_long_sentence_without_clause_boundary_is_cut_at_a_space() -> None:
    text = "aaaa bbbb cccc dddd eeee ffff gggg"
    assert split_sentences(text, max_chars=12) == ["aaaa bbbb", "cccc dddd", "eeee ffff", "gggg"]


def test_thousands_separator_is_not_a_clause_boundary() -> None:
    text = "We counted 3,000,000 stars and then more stars again"
    parts = split_sentences(text, max_chars=30)
    assert all("3,000,000" in p for p in parts if "3," in p)


def test_one_word_longer_than_the_limit_is_cut_hard() -> None:
    assert split_sentences("x" * 25, max_chars=10) == ["x" * 10, "x" * 10, "x" * 5]


def test_default_limit_keeps_normal_sentences_whole() -> None:
    sentence = "A sentence of perfectly ordinary length, with a clause or two. "
    assert len(split_sentences(sentence * 10)) == 10
    assert DEFAULT_MAX_CHARS >= 200


def test_non_positive_limit_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        split_sentences("Hello.", max_chars=0)


def _without_whitespace(text: str) -> str:
    return "".join(text.split())


# Text biased toward the characters the splitter reacts to.
_TRICKY = st.sampled_from(list(" .!?,;:-\u2014\u2026\"'\u201d()\n") + ["Mr.", "e.g.", "3.14"])
_TEXT = st.lists(st.one_of(_TRICKY, st.text(min_size=1, max_size=12)), min_size=0, max_size=60).map(
    "".join
)


@settings(max_examples=300)
@given(text=_TEXT, max_chars=st.integers(min_value=1, max_value=80))
def test_parts_rejoin_to_the_text_none_empty_none_over_the_limit(text: str, max_chars: int) -> None:
    parts = split_sentences(text, max_chars=max_chars)
    assert _without_whitespace("".join(parts)) == _without_whitespace(text)
    assert all(p.strip() for p in parts)
    assert all(p == p.strip() for p in parts)
    assert all(len(p) <= max_chars for p in parts)


@settings(max_examples=100)
@given(words=st.lists(st.from_regex(r"[A-Za-z]{1,8}", fullmatch=True), min_size=1, max_size=40))
def test_plain_sentences_come_back_one_part_each(words: list[str]) -> None:
    sentences = [f"{w.capitalize()} spoke well." for w in words]
    assert split_sentences(" ".join(sentences)) == sentences
