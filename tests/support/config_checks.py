"""What the workflow checks at parse time, run in-process: the bad-input tests call the very
functions rules/common.smk calls, without a Snakemake start per case (a handful still go
through Snakemake end to end, and test_reliability_input.py checks this mirror against
rules/common.smk line by line)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml
from snakemake.utils import validate

from tests.support.paths import REPO
from thetalker.pipeline import config_checks as wfc

__all__ = ["COMMON_SMK_CHECKS", "parse_time_error"]

# The parse-time checks of rules/common.smk, in its order, as its lines read.
COMMON_SMK_CHECKS = (
    "wfc.check_config_size(config)",
    'validate(config, "../config/schema.yaml")',
    "wfc.check_config(config)",
    "wfc.check_inputs(config)",
    "wfc.check_quality(config)",
)


def parse_time_error(config: dict[str, Any], workdir: Path) -> str | None:
    """The message the workflow would stop with on `config` (None when it passes), checked
    in `workdir` (the folder relative paths are read from). The config goes through YAML
    first, as `--configfile` reads it."""
    config = yaml.safe_load(yaml.safe_dump(config, sort_keys=False))
    with contextlib.chdir(workdir):
        try:
            wfc.check_config_size(config)
            validate(config, str(REPO / "config" / "schema.yaml"))
            wfc.check_config(config)
            wfc.check_inputs(config)
            wfc.check_quality(config)
        except Exception as exc:  # the workflow stops on whatever a check raises
            return str(exc)
    return None
