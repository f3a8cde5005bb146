"""A system's server keys (thetalker.backends in the config): what each launcher needs and
refuses, one line naming the field, before anything runs."""

from __future__ import annotations

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
    with pytest.raises(wfc.ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        wfc.check_config(config)
