"""Where things are, written once for every test."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
STANDINS = TESTS / "standins"
CONFIGS = TESTS / "configs"
SUPPORT = TESTS / "support"
