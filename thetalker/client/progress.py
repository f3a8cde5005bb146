"""Progress during a load point."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ProgressFn"]

ProgressFn = Callable[[int, int, int], None]  # (scored done, scored total, failed so far)
