"""Text into bounded sentences, and sentences into pieces cut at word boundaries.

A request is synthesized piece by piece (`ChunkPlan`): a short first piece of the stream
(`initial_chunk_words`, so first audio comes early, as vllm-omni's `initial_codec_chunk_frames`),
then pieces of `chunk_words` words (vllm-omni's `codec_chunk_frames`); 0 means whole sentences.
No piece is shorter than `min_chunk_words` words: a short remainder joins the piece before it,
because a very short piece is spoken with its own sentence-final prosody.

Sentences are bounded (`MAX_SENTENCE_CHARS`): an over-long one is cut at word boundaries, and a
word longer than the bound at the character bound, so the model's memory (quadratic in the
length of what it is given at once) stays bounded whatever arrives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_SENTENCE_CHARS",
    "ChunkPlan",
    "split_sentences",
    "bound_sentence",
    "piece_sizes",
]

# 20,000 characters is about 20 minutes of speech; vllm-omni bounds its input by tokens.
MAX_INPUT_CHARS = 20_000
# Piper's peak memory grows with what one call synthesizes: about 0.1 GB at 300 characters,
# 0.8 GB at 1,000 (issue 16). Sentences are cut to this bound before synthesis.
MAX_SENTENCE_CHARS = 300

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ChunkPlan:
    """How a stream is cut: words in its first piece, in every later piece, at least per piece.

    `chunk_words=0` synthesizes whole sentences (the server's stock behaviour);
    `initial_chunk_words=0` gives the first piece the size of the others.
    """

    initial_chunk_words: int = 0
    chunk_words: int = 0
    min_chunk_words: int = 1

    @property
    def whole_sentences(self) -> bool:
        return self.chunk_words == 0 and self.initial_chunk_words == 0


def bound_sentence(sentence: str, limit: int = MAX_SENTENCE_CHARS) -> list[str]:
    """`sentence` cut into parts of at most `limit` characters, at spaces where it can be."""
    sentence = sentence.strip()
    parts: list[str] = []
    while len(sentence) > limit:
        cut = sentence.rfind(" ", 0, limit + 1)
        if cut <= 0:
            cut = limit  # one word longer than the limit: cut it at the character bound
        parts.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        parts.append(sentence)
    return [p for p in parts if p]


def split_sentences(text: str, limit: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Sentences of `text` (split after . ! ?), each at most `limit` characters."""
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        out.extend(bound_sentence(sentence, limit))
    return out


def piece_sizes(n_words: int, plan: ChunkPlan, first_of_stream: bool) -> list[int]:
    """Word counts of the pieces of a sentence of `n_words` words (they sum to `n_words`)."""
    if n_words <= 0:
        return []
    if plan.whole_sentences:
        return [n_words]
    minimum = max(1, plan.min_chunk_words)
    rest = plan.chunk_words if plan.chunk_words > 0 else n_words
    first = plan.initial_chunk_words if first_of_stream and plan.initial_chunk_words else rest
    sizes: list[int] = []
    left = n_words
    size = max(first, minimum)
    while left > 0:
        take = min(size, left)
        sizes.append(take)
        left -= take
        size = max(rest, minimum)
    if len(sizes) > 1 and sizes[-1] < minimum:
        last = sizes.pop()
        sizes[-1] += last
    return sizes


def group_words(words: Sequence[str], sizes: Sequence[int]) -> Iterator[list[str]]:
    """`words` in consecutive groups of the given sizes."""
    start = 0
    for size in sizes:
        yield list(words[start : start + size])
        start += size
