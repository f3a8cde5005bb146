"""Admission rejections (issue 50): a server past its admission cap refuses requests before
any audio (sglang-omni's 503 queue full, Nari's 429 capacity / 503 budget, the local
server's 503 at its connection limit). Counted per point with how long a refusal took, so a
table shows whether a server sheds load cleanly (fast refusals, the admitted streams intact)
or lets every stream degrade. Pure, no I/O.

A rejection: a scored request that failed as `overloaded` (the server kind typed it,
thetalker.backends), or as `http_status` with status 429 or 503 (kinds that keep the plain
status). Nari's 503 "not ready" is typed `not_ready`: no rejection for load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ADMISSION_STATUSES", "is_rejection"]

ADMISSION_STATUSES = (429, 503)  # Too Many Requests, Service Unavailable


def is_rejection(record: Mapping[str, Any]) -> bool:
    """Whether a record is a request the server refused for load (see the module)."""
    error = record.get("error") or {}
    if error.get("type") == "overloaded":
        return True
    status = error.get("status", record.get("http_status"))
    return error.get("type") == "http_status" and status in ADMISSION_STATUSES
