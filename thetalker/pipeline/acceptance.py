"""Whether a scored concurrency point is acceptable: one rule for every caller.

`thetalker-bench` (one point, exit status 1) and the workflow's serve-and-sweep job (every
point of a model, the job fails) both ask `point_failure`, so a point means the same thing
everywhere: something succeeded, and the scored error rate is at most the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["point_failure"]


def point_failure(summary: Mapping[str, Any], max_error_rate: float) -> str | None:
    """Why the point's `summary.json` fails it, in one line, or None when it is acceptable."""
    if not summary.get("n_ok"):
        return "no scored request succeeded"
    error_rate = summary.get("error_rate") or 0.0
    if error_rate > max_error_rate:
        return f"error rate {error_rate:.3f} above max_error_rate {max_error_rate}"
    return None
