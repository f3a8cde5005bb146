"""Runs the `sgl_kernel` CPU stand-in (tests/engine/sgl_kernel_cpu) in the SGLang-Omni venv,
where torch is, on the cases of a JSON file; writes what it returned as JSON. The references
the answers are checked against live in test_sgl_kernel_standin.py, in plain Python.

    <venv>/bin/python standin_probe.py CASES.json ANSWERS.json   (PYTHONPATH: the stand-in)
"""

from __future__ import annotations

import json
import sys

import sgl_kernel
import torch


def murmur(case: dict) -> list[list[int]]:
    seed = torch.tensor(case["seed"], dtype=torch.uint64)  # as sglang's sampler passes it
    positions = torch.tensor(case["positions"], dtype=torch.int64)
    cols = torch.tensor(case["cols"], dtype=torch.int64)
    # Through the torch op, as sglang/kernels/ops/sampling/murmur_hash.py calls it.
    out = torch.ops.sgl_kernel.murmur_hash32_cpu.default(seed, positions, cols)
    assert out.dtype == torch.uint32 and out.shape == (len(case["seed"]), len(case["cols"]))
    return out.to(torch.int64).tolist()


def assign(case: dict) -> list[list[int]]:
    pool = torch.tensor(case["pool"], dtype=torch.int32)  # ReqToTokenPool's req_to_token
    sgl_kernel.assign_req_to_token_pool_cpu(
        torch.tensor(case["rows"], dtype=torch.int64),
        pool,
        torch.tensor(case["starts"], dtype=torch.int64),
        torch.tensor(case["ends"], dtype=torch.int64),
        torch.tensor(case["out_cache_loc"], dtype=torch.int64),
        pool.shape[1],
    )
    return pool.tolist()


def other(case: dict) -> dict:
    try:
        getattr(sgl_kernel, case["name"])(torch.zeros(1))
    except NotImplementedError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None, "message": ""}


def main(cases_path: str, answers_path: str) -> None:
    with open(cases_path) as handle:
        cases = json.load(handle)
    ops = {"murmur": murmur, "assign": assign, "other": other}
    answers = [ops[case["op"]](case) for case in cases]
    with open(answers_path, "w") as out:
        json.dump({"module": sgl_kernel.__file__, "answers": answers}, out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
