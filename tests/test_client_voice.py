"""`thetalker-voice` register / list / delete against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripted_server import ScriptedServer
from thetalker.voice_cli import main, normalize_base_url
from thetalker.wavio import write_wav


def test_register_list_delete(scripted_server: ScriptedServer, tmp_path: Path, capsys):
    ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)
    base = ["--base-url", scripted_server.base_url]
    assert main([*base, "register", "Alice", "--audio", str(ref), "--ref-text", "hi"]) == 0
    voice = json.loads(capsys.readouterr().out)
    assert voice["name"] == "Alice" and voice["ref_text"] == "hi"
    assert scripted_server.voices["alice"]["file_size"] == ref.stat().st_size

    assert main([*base, "list"]) == 0
    assert "Alice" in json.loads(capsys.readouterr().out)["voices"]

    assert main([*base, "delete", "alice"]) == 0
    assert scripted_server.voices == {}
    capsys.readouterr()
    assert main([*base, "delete", "alice"]) == 1  # 404 now
    err = capsys.readouterr().err
    assert "HTTP 404" in err and "not found" in err


def test_register_refuses_a_non_wav(tmp_path: Path, capsys):
    bad = tmp_path / "x.wav"
    bad.write_bytes(b"not audio")
    with pytest.raises(SystemExit) as exc:
        main(["register", "v", "--audio", str(bad)])
    assert exc.value.code == 2
    assert "not a RIFF/WAVE header" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"])
def test_base_url_loses_trailing_v1(url: str):
    assert normalize_base_url(url) == "http://h:1"
