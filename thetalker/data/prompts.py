"""Prompt sets: a JSONL of `{"sample_id", "text", ...}` and the seeded order they are sent in.

The order depends on the seed alone, so two servers benchmarked back to back with the same
seed get the same prompts in the same order.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from thetalker.util.checks import json_object

__all__ = ["MAX_PROMPT_CHARS", "Prompt", "PromptError", "load_prompts", "ordered_prompts"]


@dataclass(frozen=True)
class Prompt:
    sample_id: str
    text: str


class PromptError(ValueError):
    """A prompts file that cannot be used; the message is `file:line: what is wrong`."""


# Longest prompt text: the local server's MAX_INPUT_CHARS (vllm-omni bounds its own input by
# tokens); a longer line is a mistake, refused here rather than answered 413 by every request.
MAX_PROMPT_CHARS = 20_000
# Characters no id may hold (C0/C1 controls, DEL): they break logs, file names and tables.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def load_prompts(path: str | os.PathLike[str]) -> list[Prompt]:
    """Every prompt of a JSONL file, in file order; blank lines are skipped.

    Each line is an object with a non-empty string `sample_id` (no control characters,
    unique in the file) and a non-empty string `text` of at most MAX_PROMPT_CHARS characters
    (no NUL, no lone surrogate); other keys are ignored. Raises PromptError naming the file
    and line (for a duplicate id, also the line that has it first).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PromptError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        line = 1 + path.read_bytes()[: exc.start].count(b"\n")
        raise PromptError(f"{path}:{line}: not UTF-8 text") from None
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        if len(line) > 4 * MAX_PROMPT_CHARS:  # not even parsed: a runaway line
            raise PromptError(
                f"{where}: line of {len(line)} characters; a prompt's text is at most "
                f"{MAX_PROMPT_CHARS} (MAX_PROMPT_CHARS)"
            )
        item = json_object(line, where, PromptError)
        sample_id = _check_id(item.get("sample_id"), where)
        if sample_id in first_line:
            raise PromptError(
                f"{where}: duplicate sample_id {sample_id!r} (first at line "
                f"{first_line[sample_id]}); ids must be unique"
            )
        first_line[sample_id] = lineno
        prompts.append(Prompt(sample_id, _check_text(item.get("text"), where)))
    if not prompts:
        raise PromptError(f"{path}: no prompts (the file is empty)")
    return prompts


def _check_id(sample_id: object, where: str) -> str:
    if sample_id is None:
        raise PromptError(f"{where}: missing 'sample_id'")
    if isinstance(sample_id, bool) or not isinstance(sample_id, str | int):
        raise PromptError(f"{where}: 'sample_id' must be a non-empty string")
    sample_id = str(sample_id)
    if not sample_id.strip():
        raise PromptError(f"{where}: 'sample_id' must be a non-empty string")
    if _CONTROL.search(sample_id) or _SURROGATE.search(sample_id):
        raise PromptError(f"{where}: 'sample_id' {sample_id!r} holds a control character")
    return sample_id


def _check_text(text: object, where: str) -> str:
    if text is None:
        raise PromptError(f"{where}: missing 'text'")
    if not isinstance(text, str) or not text.strip():
        raise PromptError(f"{where}: 'text' must be a non-empty string")
    if len(text) > MAX_PROMPT_CHARS:
        raise PromptError(
            f"{where}: 'text' has {len(text)} characters; at most {MAX_PROMPT_CHARS} "
            "(MAX_PROMPT_CHARS)"
        )
    if "\x00" in text or _SURROGATE.search(text):
        raise PromptError(f"{where}: 'text' holds a NUL or a lone surrogate (not speakable text)")
    return text


def ordered_prompts(prompts: Sequence[Prompt], n: int, seed: int | str) -> list[Prompt]:
    """`n` prompts: the set shuffled by `seed`, cycled through in that order when `n` is
    larger than the set. The same seed gives the same order on every machine."""
    if n <= 0:
        return []
    if not prompts:
        raise PromptError("no prompts to choose from")
    order = list(prompts)
    random.Random(f"thetalker.data.prompts:{seed}").shuffle(order)
    return [order[i % len(order)] for i in range(n)]
