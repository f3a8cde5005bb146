"""The `sgl_kernel` CPU stand-in (tests/engine/sgl_kernel_cpu), op by op, against references
written here in plain Python: MurmurHash3 (x86, 32-bit) over bytes, checked itself against
published test vectors; the triton kernel's slot assignment done row by row. The stand-in
runs in the SGLang-Omni venv (torch), through `standin_probe.py`."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

from tests.engine.sglang.conftest import STANDIN

PROBE = Path(__file__).with_name("standin_probe.py")
M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 (Austin Appleby's reference), one byte string."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & M32
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = _rotl((k * c1) & M32, 15) * c2 & M32
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32
    tail = data[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= _rotl((k * c1) & M32, 15) * c2 & M32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def kernel_hash(seed: int, position: int, col: int) -> int:
    """What murmur_hash32_kernel computes: the 16 bytes seed (u64), position, column (u32)."""
    return murmur3_32(struct.pack("<QII", seed, position & M32, col & M32))


def assign_reference(case: dict) -> list[list[int]]:
    """Row i writes the next end[i] - start[i] slots of out_cache_loc into its pool row."""
    pool = [list(row) for row in case["pool"]]
    taken = 0
    for row, start, end in zip(case["rows"], case["starts"], case["ends"], strict=True):
        for j in range(start, end):
            pool[row][j] = case["out_cache_loc"][taken]
            taken += 1
    return pool


def probe(venv: Path, cases: list[dict], tmp: Path) -> list:
    q, a = tmp / "cases.json", tmp / "answers.json"
    q.write_text(json.dumps(cases))
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(PROBE), str(q), str(a)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(STANDIN)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(a.read_text())
    assert Path(answer["module"]).is_relative_to(STANDIN), answer["module"]
    return answer["answers"]


def test_the_reference_hash_meets_murmur3s_published_vectors():
    assert murmur3_32(b"", 0) == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"test", 0) == 0xBA6BD213
    assert murmur3_32(b"Hello, world!", 1234) == 0xFAF6CDB3
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog", 0) == 0x2E4FF723


def test_murmur_hash32_cpu_is_bit_exact(engine_tier, tmp_path):
    rng = random.Random(7)
    # Seeds over the whole u64 range (the high bit set included), positions past 2**32.
    seeds = [0, 1, 2**63 + 5, 2**64 - 1] + [rng.getrandbits(64) for _ in range(4)]
    positions = [0, 7, 2**32 + 3, 123456] + [rng.getrandbits(33) for _ in range(4)]
    cols = list(range(40)) + [3071, 151935, 2**31 - 1]
    case = {"op": "murmur", "seed": seeds, "positions": positions, "cols": cols}
    (got,) = probe(engine_tier, [case], tmp_path)
    want = [[kernel_hash(s, p, c) for c in cols] for s, p in zip(seeds, positions, strict=True)]
    assert got == want


def test_assign_req_to_token_pool_cpu_assigns_as_the_kernel(engine_tier, tmp_path):
    # Three requests of a batch, out of order in the pool, one extending nothing; the slots
    # they take from out_cache_loc follow the batch order.
    case = {
        "op": "assign",
        "pool": [[-1] * 12 for _ in range(5)],
        "rows": [3, 0, 4, 1],
        "starts": [2, 0, 5, 7],
        "ends": [6, 3, 5, 12],
        "out_cache_loc": list(range(100, 112)),
    }
    (got,) = probe(engine_tier, [case], tmp_path)
    assert got == assign_reference(case)
    assert got[2] == [-1] * 12 and got[4] == [-1] * 12  # untouched rows stay as they were


@pytest.mark.parametrize("name", ["rmsnorm", "fused_add_rmsnorm"])
def test_any_other_op_fails_naming_itself(engine_tier, tmp_path, name):
    (got,) = probe(engine_tier, [{"op": "other", "name": name}], tmp_path)
    assert got["error"] == "NotImplementedError"
    assert got["message"].startswith(f"sgl_kernel.{name}: not provided by TheTalker's CPU")
