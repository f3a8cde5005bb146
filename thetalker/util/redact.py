"""Secrets never reach a file: redaction of env, command lines and URLs, and their checks.

Everything the project records (provenance, the server record, a summary's base URL, the job
log) goes through these before it is written. What counts as secret:

- a variable whose name contains KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASS, AUTH or CREDENTIAL
  (``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``);
- the value after a secret-looking option on a command line (``--api-key X``,
  ``--api-key=X``, ``--hf-token X``; the same words as option names), and after any prefix
  argparse expands to a secret option (``--api X``, ``--hf=X``: ``SECRET_OPTIONS``);
- the password of a URL (``http://user:pw@host`` becomes ``http://user:<redacted>@host``).

The config names the variable that holds a secret (``systems.S.secret_env``), never its value;
``check_env_names`` refuses a secret-looking name in ``systems.S.env`` and ``check_args`` a
secret-looking option in ``extra_args``, so no value reaches Snakemake's params or logs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_WORDS",
    "SECRET_OPTIONS",
    "is_secret_name",
    "redact_env",
    "redact_command",
    "redact_url",
    "redact_config",
    "check_env_names",
    "check_args",
]

REDACTED = "<redacted>"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "AUTH", "CREDENTIAL")
_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# Longer words that hold a secret word but name no secret (TOKENIZERS_PARALLELISM,
# --max-num-batched-tokens, --tokenizer, --ssl-keyfile): left out before the search.
_HARMLESS = re.compile(r"TOKENIZERS?|TOKENS|AUTHORS?|PASSTHROUGH|BYPASS|KEYBOARD|KEYFILE", re.I)
_OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*$")
# A URL with user info anywhere in a string (a command-line value, a log line).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^/\s@]+)@")


def is_secret_name(name: str) -> bool:
    """Whether a variable or option name looks like it holds a secret."""
    return bool(_SECRET_NAME.search(_HARMLESS.sub("", str(name))))


# The secret options of the programs the project starts (the local server's and vllm's
# --api-key, vllm's --hf-token). argparse takes any unambiguous prefix of a long option
# (`--api X` is `--api-key X`), so a prefix of one of these is as secret as the option.
SECRET_OPTIONS = ("--api-key", "--hf-token", "--token", "--password")


def _is_secret_option(arg: str) -> bool:
    """``--api-key`` / ``--hf-token`` (the name part of ``--name=value``), and any prefix of a
    secret option argparse would expand to it (``--api``, ``--hf``)."""
    if not _OPTION.match(arg):
        return False
    if is_secret_name(arg.lstrip("-")):
        return True
    return arg.startswith("--") and len(arg) > 2 and any(o.startswith(arg) for o in SECRET_OPTIONS)


def redact_url(url: str | None) -> str | None:
    """``url`` with the password of its user info replaced (None stays None)."""
    if url is None:
        return None
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + "@", str(url))


def redact_env(env: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The variables, values of secret-looking names replaced (and passwords in URLs)."""
    if env is None:
        return None
    return {
        str(k): (REDACTED if is_secret_name(str(k)) else str(redact_url(str(v))))
        for k, v in env.items()
    }


def redact_command(command: Sequence[Any] | None) -> list[str] | None:
    """A command line with the value of every secret-looking option replaced."""
    if command is None:
        return None
    out: list[str] = []
    hide_next = False
    for raw in command:
        arg = str(raw)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        if _is_secret_option(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(str(redact_url(arg)))
    return out


def redact_config(value: Any) -> Any:
    """A JSON-like config (the bench job): every ``env`` mapping, ``*args``/``command`` list
    and URL string redacted, recursively. Other values are kept."""
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            key = str(key)
            if key == "env" and isinstance(item, Mapping):
                result[key] = redact_env(item)
            elif (key.endswith("args") or key == "command") and isinstance(item, list):
                result[key] = redact_command(item)
            elif is_secret_name(key) and isinstance(item, str):
                result[key] = REDACTED
            else:
                result[key] = redact_config(item)
        return result
    if isinstance(value, list):
        return [redact_config(item) for item in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def check_env_names(env: Mapping[str, Any], where: str) -> None:
    """Refuse a secret-looking name given a value in a config (``where``: the field)."""
    for name in env:
        if is_secret_name(str(name)):
            raise ValueError(
                f"{where}.{name}: looks like a secret; a config never holds a secret's value: "
                f"list {name} in secret_env and set it in the environment of the run"
            )


def check_args(args: Sequence[Any], where: str) -> None:
    """Refuse a secret-looking option (``--api-key X``) in a config's argument list."""
    for arg in args:
        name = str(arg).partition("=")[0]
        if _is_secret_option(name):
            raise ValueError(
                f"{where}: {name} would write a secret into the job's params and logs; "
                "pass it through the environment (vllm reads VLLM_API_KEY: list it in secret_env)"
            )
        if _URL_PASSWORD.search(str(arg)):
            raise ValueError(f"{where}: a URL with a password would be written to the logs")
