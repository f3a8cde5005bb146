"""A system's server keys (thetalker.backends in the config): what each launcher needs and
refuses, one line naming the field, before anything runs."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.paths import REPO


@pytest.mark.parametrize(
    ("system", "message"),
    [
        ({"launcher": "nari"}, "systems.x.profile: required for launcher nari"),
        ({"launcher": "nari", "profile": "ttfa", "models": ["nope"]}, "unknown model 'nope'"),
        ({"launcher": "external"}, "systems.x.base_url: required"),
        (
            {"launcher": "external", "base_url": "http://u:pw@127.0.0.1:1"},
            "no credentials in the URL",
        ),
        ({"launcher": "command", "command": "srv --port 1"}, "needs {port}"),
        ({"launcher": "command", "command": "srv {port} {gpu}"}, "unknown placeholder {gpu}"),
        # Its words pass the secret check of extra_args, a shell's script included; shell
        # syntax, which no shell would act on, is refused naming the word.
        (
            {"launcher": "command", "command": "srv --port {port} --api-key s3cret"},
            "systems.x.command: --api-key would write a secret",
        ),
        (
            {"launcher": "command", "command": "sh -c 'exec srv --port {port} --api-key=s3'"},
            "systems.x.command: --api-key would write a secret",
        ),
        (
            {"launcher": "command", "command": "srv --port {port} > srv.log"},
            "systems.x.command: '>' is shell syntax, but no shell runs the template",
        ),
        (
            {"launcher": "command", "command": "srv --port {port} --model $MODEL"},
            "'$MODEL' is shell syntax",
        ),
        (
            {"launcher": "command", "command": "srv --port {port} 2>&1"},
            "'2>&1' is shell syntax",
        ),
        ({"launcher": "vllm-omni", "server": "nari"}, "speaks its own API"),
        ({"launcher": "nari", "profile": "ttfa", "use_deploy_file": True}, "takes no deploy file"),
    ],
)
def test_bad_server_fields_fail_naming_them(system: dict, message: str):
    from snakemake.utils import validate

    from thetalker.pipeline import config_checks as wfc

    config = yaml.safe_load((REPO / "tests" / "configs" / "servers.yaml").read_text())
    config["systems"] = {"x": system}
    config["report"]["ratio"] = ["x", "x"]
    validate(config, str(REPO / "config" / "schema.yaml"))
    with pytest.raises(wfc.ConfigError, match=re.escape(message)):
        wfc.check_config(config)
