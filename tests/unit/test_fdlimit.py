"""The open-file limit: raised for the streams when the hard limit allows, refused in one line
when it does not (each case in a subprocess with its own lowered limits)."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

from tests.support.paths import REPO
from thetalker.util.fdlimit import fds_needed, is_fd_exhaustion

CHILD = textwrap.dedent(
    """
    import resource, socket, sys
    soft, hard, streams = map(int, sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    from thetalker.util.fdlimit import FdLimitError, ensure_fd_limit
    try:
        limit = ensure_fd_limit(streams)
    except FdLimitError as exc:
        print("refused:", exc)
        sys.exit(2)
    socks = [socket.socket() for _ in range(streams)]  # one socket per stream really opens
    print("ok", limit, resource.getrlimit(resource.RLIMIT_NOFILE)[0], len(socks))
    """
)


def run_child(soft: int, hard: int, streams: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(soft), str(hard), str(streams)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_soft_limit_is_raised_when_the_hard_limit_allows():
    streams = 600
    done = run_child(256, 2048, streams)
    assert done.returncode == 0, done.stdout + done.stderr
    _, limit, soft, opened = done.stdout.split()
    assert int(limit) == int(soft) == 2048 >= fds_needed(streams)
    assert int(opened) == streams


def test_without_raising_the_streams_would_not_fit():
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("limit = ensure_fd_limit(streams)", "limit = 0")]
        + ["256", "2048", "600"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Too many open files" in done.stderr


def test_a_hard_limit_too_low_is_refused_naming_the_concurrency_and_the_limit():
    done = run_child(256, 512, 1000)
    assert done.returncode == 2
    line = done.stdout.strip()
    assert line.startswith("refused: concurrency 1000 needs about 1128 open files")
    assert "hard limit is 512 (soft 256)" in line and "\n" not in line


def test_enough_already_changes_nothing():
    done = run_child(1024, 2048, 100)
    assert done.returncode == 0 and done.stdout.split()[1:3] == ["1024", "1024"]


def test_fd_exhaustion_is_told_from_other_errors():
    emfile = OSError(errno.EMFILE, "Too many open files")
    wrapped = ConnectionError("cannot connect")
    wrapped.__cause__ = emfile
    assert is_fd_exhaustion(emfile) and is_fd_exhaustion(wrapped)
    assert not is_fd_exhaustion(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    import aiohttp

    connector = aiohttp.ClientConnectorError(None, emfile)  # as aiohttp raises it
    assert is_fd_exhaustion(connector)


def test_thetalker_bench_refuses_up_front_under_a_low_hard_limit(tmp_path):
    """The whole client: one line naming the concurrency and the limit, nothing sent."""
    script = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        from thetalker.cli.bench import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", script, "--texts-jsonl", "prompts/seed_tts_eval_en_100.jsonl"]
        + ["--concurrency", "1000", "--requests", "1000", "--speaker", "ryan"]
        + ["--base-url", "http://127.0.0.1:9", "--out-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "concurrency 1000 needs about 1128 open files" in lines[0]
    assert "hard limit is 512" in lines[0]
    assert not (out / "records.jsonl").exists()
