"""The point summary written to summary.json: metrics' figures plus how the run went."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import Counter
from typing import Any

import aiohttp

from thetalker import metrics
from thetalker.client.options import BenchOptions
from thetalker.data.records import SCHEMA_VERSION
from thetalker.util.redact import redact_url

__all__ = ["point_summary", "options_dict"]


def options_dict(opts: BenchOptions) -> dict[str, Any]:
    options = {
        k: (os.fspath(v) if isinstance(v, os.PathLike) else v)
        for k, v in dataclasses.asdict(opts).items()
    }
    options["base_url"] = redact_url(options["base_url"])  # http://user:pw@host: no pw
    return options


def point_summary(
    records: list[dict[str, Any]],
    opts: BenchOptions,
    sample_rate: int,
    rate_source: str,
    complete: bool,
    max_in_flight: int,
) -> dict[str, Any]:
    open_loop = opts.request_rate is not None
    summary = metrics.summarize_point(records, None if open_loop else opts.concurrency).to_dict()
    scored = [r for r in records if not r["warmup"]]
    lags = [
        r["schedule_lag_s"]
        for r in scored
        if r.get("schedule_lag_s") is not None and not metrics.is_dropped(r)  # never sent
    ]
    summary.update(
        {
            "schema_version": SCHEMA_VERSION,
            "complete": complete,
            "sample_rate": sample_rate,
            "sample_rate_source": rate_source,
            "request_rate": opts.request_rate,
            "max_in_flight": max_in_flight,
            "n_warmup": sum(1 for r in records if r["warmup"]),
            "errors_by_type": dict(Counter(r["error"]["type"] for r in scored if r["error"])),
            "schedule_lag_s": (
                {**metrics.percentiles(lags), "max": max(lags) if lags else None}
                if open_loop
                else None
            ),
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "aiohttp_version": aiohttp.__version__,
            "options": options_dict(opts),
            "audible_onset": opts.onset.to_dict(),  # the settings the records' onsets used
            # The agent mode's first audio and lags (thetalker.metrics.summarize_agent).
            "agent": metrics.summarize_agent(records) if opts.protocol == "websocket" else None,
        }
    )
    return summary
