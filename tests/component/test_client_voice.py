"""`thetalker-voice` register / list / delete against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripted_server import ScriptedServer
from thetalker.api.speech import normalize_base_url
from thetalker.cli.voice import main
from thetalker.data.wavio import write_wav


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


def test_the_original_form_without_a_subcommand_registers(
    scripted_server: ScriptedServer, tmp_path: Path, capsys
):
    # thetalker-voice --port 8091 --name thetalker_ref --ref-audio ref.wav --ref-text "..."
    ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)
    argv = ["--port", str(scripted_server.port), "--name", "thetalker_ref",
            "--ref-audio", str(ref), "--ref-text", "the words"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "thetalker_ref"
    assert scripted_server.voices["thetalker_ref"]["ref_text"] == "the words"


def test_register_takes_ref_audio_as_an_alias_of_audio(
    scripted_server: ScriptedServer, tmp_path: Path, capsys
):
    ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)
    base = ["--base-url", scripted_server.base_url + "/v1"]
    assert main([*base, "register", "Bob", "--ref-audio", str(ref)]) == 0
    assert scripted_server.voices["bob"]["file_size"] == ref.stat().st_size


def test_a_voice_name_is_one_url_encoded_path_segment(
    scripted_server: ScriptedServer, tmp_path: Path, capsys
):
    # Issue 16: `delete 'a?b'` once sent DELETE /v1/audio/voices/a?b and deleted voice `a`.
    ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)
    base = ["--base-url", scripted_server.base_url]
    for name in ("a", "a?b", "c/d"):
        assert main([*base, "register", name, "--audio", str(ref)]) == 0
    assert main([*base, "delete", "a?b"]) == 0
    assert main([*base, "delete", "c/d"]) == 0
    assert sorted(scripted_server.voices) == ["a"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--timeout", "-1", "list"], "--timeout: must be > 0 (got -1)"),
        (["--timeout", "0", "list"], "--timeout: must be > 0"),
        ([], "give a subcommand"),
        (["--name", "v"], "--ref-audio"),
        (["--name", "v", "--ref-audio", "x.wav", "list"], "not with list"),
        (["register", "v", "--audio", "/no/such.wav"], "--audio: no such file"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], needle: str, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_a_clip_outside_1_to_30_s_is_refused_before_any_request(tmp_path: Path, capsys):
    short = write_wav(tmp_path / "short.wav", b"\1\0" * 12000, 24000)  # 0.5 s
    with pytest.raises(SystemExit) as exc:
        main(["--port", "9", "--name", "v", "--ref-audio", str(short)])
    assert exc.value.code == 2
    assert "1 to 30 s" in capsys.readouterr().err


def test_an_unreachable_server_exits_1_with_one_line(tmp_path: Path, capsys):
    from thetalker.lifecycle.launch import free_port

    assert main(["--port", str(free_port()), "--timeout", "5", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("thetalker-voice: list voices: cannot reach http://127.0.0.1:")
    assert err.count("\n") == 1
