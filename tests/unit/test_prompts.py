"""Prompt loading (one-line errors naming file:line) and the seeded order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO
from thetalker.data.prompts import Prompt, PromptError, load_prompts, ordered_prompts


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def test_loads_the_shipped_prompt_sets() -> None:
    prompts = load_prompts(REPO / "prompts" / "seed_tts_eval_en_100.jsonl")
    assert len(prompts) == 100
    assert prompts[0] == Prompt("seed_000", "Not a thing.")
    assert len({p.sample_id for p in prompts}) == 100


def test_blank_lines_and_extra_keys_are_fine(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"sample_id": "a", "text": "Hi.", "group": "x"}\n\n{"sample_id": 7, "text": "Yo"}\n',
    )
    assert load_prompts(path) == [Prompt("a", "Hi."), Prompt("7", "Yo")]


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ('{"sample_id": "a", "text": "ok"}\n{"sample_id": "b", "text": \n', 2, "not valid JSON"),
        ('{"sample_id": "a"}\n', 1, "missing 'text'"),
        ('{"sample_id": "a", "text": "  "}\n', 1, "'text' must be a non-empty string"),
        ('{"sample_id": "a", "text": 3}\n', 1, "'text' must be a non-empty string"),
        ('\n{"text": "hello"}\n', 2, "missing 'sample_id'"),
        ('["a", "b"]\n', 1, "expected a JSON object"),
    ],
)
def test_bad_lines_name_file_and_line(
    tmp_path: Path, content: str, line: int, message: str
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(PromptError) as err:
        load_prompts(path)
    text = str(err.value)
    assert text.startswith(f"{path}:{line}: ")
    assert message in text
    assert "\n" not in text


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n\n")
    with pytest.raises(PromptError, match=r"p\.jsonl: no prompts"):
        load_prompts(path)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="nope.jsonl: cannot read"):
        load_prompts(tmp_path / "nope.jsonl")


PROMPTS = [Prompt(f"s{i}", f"text {i}") for i in range(10)]


def test_order_is_fixed_by_the_seed() -> None:
    a = ordered_prompts(PROMPTS, 10, seed=42)
    assert a == ordered_prompts(list(PROMPTS), 10, seed=42)
    assert sorted(a, key=lambda p: int(p.sample_id[1:])) == PROMPTS  # a permutation
    assert a != PROMPTS  # shuffled (fixed seed: not identity)
    assert ordered_prompts(PROMPTS, 10, seed=43) != a


def test_more_requests_than_prompts_cycle_the_shuffled_order() -> None:
    order = ordered_prompts(PROMPTS, 10, seed=1)
    assert ordered_prompts(PROMPTS, 25, seed=1) == order + order + order[:5]
    assert ordered_prompts(PROMPTS, 3, seed=1) == order[:3]
    assert ordered_prompts(PROMPTS, 0, seed=1) == []
