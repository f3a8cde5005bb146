"""What a test does when the tier it belongs to cannot run here.

On a user's machine a missing contract venv or Slurm cluster is a fact of that machine: the
test skips and `-rs` prints why. In CI (`CI=true`, as CI services set it) the tier is part of
what a green run promises, so the same reason fails the test instead of hiding in a skip.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["in_ci", "unavailable"]


def in_ci() -> bool:
    """True under CI (`CI` set to true/1/yes, any case)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail with it under CI (never returns).

    The skip is reported at the test's own location (`-rs` names the test, not this
    helper), as a `skipif` mark's is: pytest's Skipped with `_use_item_location`, the flag
    its own skip marks set (a keyword of Skipped since pytest 7)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a tier that cannot run fails the run)", pytrace=False)
    raise pytest.skip.Exception(reason, _use_item_location=True)
