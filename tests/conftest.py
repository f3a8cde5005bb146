"""Shared fixtures. Keep each one generic: other parts of the project add theirs here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scripted_server import Script, ScriptedServer, start_scripted_server


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """A scripted speech server on 127.0.0.1 (free port, own thread), stopped after the test.

    Default script: one 4800-byte chunk (0.1 s at 24 kHz). Configure it in the test:
    `scripted_server.default = Script(...)`, `scripted_server.add_script("name", Script(...))`
    (a request whose input starts with "name" follows it), `scripted_server.sample_rate = N`.
    """
    with start_scripted_server(Script()) as server:
        yield server
