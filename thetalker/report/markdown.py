"""One Markdown table cell from any text: what a server, a config or a user wrote lands in a
table as that text, never as table structure or HTML.

A server's `/version` answer, a system's name, an error message: each is shown as written.
A line break would end the row and a `|` would split it, and a Markdown viewer that passes
inline HTML would run a `<script>` (issue 45): so a cell is one line, its `|` escaped, and
`&`, `<`, `>` written as HTML entities (shown as the characters themselves).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["md_cell"]

_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_PIPE = re.compile(r"(?<!\\)\|")  # a `|` not already escaped


def md_cell(value: Any) -> str:
    """`value`'s text as one Markdown table cell (line breaks as spaces, `|` escaped, HTML's
    `&`, `<`, `>` as entities)."""
    one_line = " ".join(str(value).splitlines())
    return _PIPE.sub(r"\\|", one_line.translate(_ENTITIES))
