"""`launcher: command`: any server, started from the system's command template.

The template is split like a shell line (no shell runs it) and each word formatted with
`{port}` (the free port chosen), `{host}`, `{model}` (the model id) and `{deploy}` (the deploy
file, when `use_deploy_file`). Since no shell runs it, shell syntax in it (`>`, `|`, `&&`,
`;`, `$VAR`, backquotes) would reach the server as literal words: refused, naming the word (a
template that wants a shell names one: `sh -c '...'`). Its words, and those of a script it
gives a shell, go through the secret check of `extra_args` (`words`).

The server runs in its own process group with its output in the job's server log and is
stopped like every other (SIGTERM to the group, SIGKILL after the grace period); ready when
`GET ready_path` (default `/health`) answers 200. The API it speaks is the system's `server`
(default vllm-omni's speech API).
"""

from __future__ import annotations

import contextlib
import re
import shlex

from thetalker.backends import vllm_omni
from thetalker.backends.base import Launch, Launcher
from thetalker.backends.inputs import LaunchSpec

__all__ = ["LAUNCHER", "PLACEHOLDERS", "TemplateError", "expand_template", "words"]

PLACEHOLDERS = ("port", "host", "model", "deploy")
# Shell syntax that only a shell would act on: an operator as a word of its own, or a
# variable, command substitution or redirection inside one.
_SHELL_WORDS = {"|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "2>", "2>&1", "&>", "|&"}
_SHELL_IN_WORD = re.compile(r"\$[A-Za-z_{(]|`|^[0-9]*>>?|^<|;$")


class TemplateError(ValueError):
    """A command template that cannot be expanded; the message names the placeholder."""


def expand_template(
    template: str, port: int, host: str, model: str, deploy: str | None
) -> list[str]:
    """The command line of `template`: shell-like words, each with its placeholders filled."""
    values = {"port": str(port), "host": host, "model": model, "deploy": deploy}
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise TemplateError(f"command: {exc}") from None
    if not words:
        raise TemplateError("command: empty")
    for word in words:
        if word in _SHELL_WORDS or _SHELL_IN_WORD.search(word):
            raise TemplateError(
                f"command: {word!r} is shell syntax, but no shell runs the template (the server "
                "would get it as an argument); name a shell to use one: sh -c '...'"
            )
    out = []
    for word in words:
        try:
            filled = word.format_map(_Strict(values))
        except (KeyError, ValueError, IndexError) as exc:
            raise TemplateError(f"command: {exc} in {word!r}") from None
        out.append(filled)
    return out


def words(template: str) -> list[str]:
    """Every word the template passes on, a script given to a shell (`sh -c '...'`) split
    into its own words too: what the secret check reads (none for a template that cannot be
    split, which `expand_template` refuses)."""
    try:
        top = shlex.split(template)
    except ValueError:
        return []
    out = list(top)
    for word in top:
        if any(c.isspace() for c in word):
            with contextlib.suppress(ValueError):
                out.extend(shlex.split(word))
    return out


class _Strict(dict):
    def __missing__(self, key: str) -> str:
        allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        raise KeyError(f"unknown placeholder {{{key}}} (known: {allowed})")

    def __getitem__(self, key: str) -> str:
        value = super().__getitem__(key) if key in self else self.__missing__(key)
        if value is None:
            raise KeyError("{deploy} needs use_deploy_file")
        return value


def command(spec: LaunchSpec, port: int) -> list[str]:
    if not spec.command:
        raise TemplateError("command: the command launcher needs a command template")
    deploy = str(spec.deploy_config) if spec.deploy_config is not None else None
    return expand_template(spec.command, port, spec.host, spec.model_id, deploy)


LAUNCHER = Launcher(
    name="command",
    summary="any server, started from a command template with {port}, {model}, {deploy}",
    launch=Launch(command=command, deploy_files=True, mps=True),
    api=vllm_omni.API.name,  # unless the system's `server` names another
    any_api=True,
    ready_path="/health",  # the system's `ready_path` overrides it
    system_keys={"command": True, "ready_path": False},
)
