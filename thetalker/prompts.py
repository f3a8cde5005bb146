"""Prompt sets: a JSONL of `{"sample_id", "text", ...}` and the seeded order they are sent in.

The order depends on the seed alone, so two servers benchmarked back to back with the same
seed get the same prompts in the same order.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Prompt", "PromptError", "load_prompts", "ordered_prompts"]


@dataclass(frozen=True)
class Prompt:
    sample_id: str
    text: str


class PromptError(ValueError):
    """A prompts file that cannot be used; the message is `file:line: what is wrong`."""


def load_prompts(path: str | os.PathLike[str]) -> list[Prompt]:
    """Every prompt of a JSONL file, in file order; blank lines are skipped.

    Each line is an object with a non-empty string `sample_id` and a non-empty string
    `text`; other keys are ignored. Raises PromptError naming the file and line.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PromptError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PromptError(f"{path}: not UTF-8 text") from None
    prompts: list[Prompt] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise PromptError(f"{where}: expected a JSON object")
        sample_id = item.get("sample_id")
        if sample_id is None:
            raise PromptError(f"{where}: missing 'sample_id'")
        if not isinstance(sample_id, str | int) or not str(sample_id).strip():
            raise PromptError(f"{where}: 'sample_id' must be a non-empty string")
        text = item.get("text")
        if text is None:
            raise PromptError(f"{where}: missing 'text'")
        if not isinstance(text, str) or not text.strip():
            raise PromptError(f"{where}: 'text' must be a non-empty string")
        prompts.append(Prompt(str(sample_id), text))
    if not prompts:
        raise PromptError(f"{path}: no prompts (the file is empty)")
    return prompts


def ordered_prompts(prompts: Sequence[Prompt], n: int, seed: int | str) -> list[Prompt]:
    """`n` prompts: the set shuffled by `seed`, cycled through in that order when `n` is
    larger than the set. The same seed gives the same order on every machine."""
    if n <= 0:
        return []
    if not prompts:
        raise PromptError("no prompts to choose from")
    order = list(prompts)
    random.Random(f"thetalker.prompts:{seed}").shuffle(order)
    return [order[i % len(order)] for i in range(n)]
