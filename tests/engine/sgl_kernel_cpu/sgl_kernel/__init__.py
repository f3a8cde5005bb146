"""A test-only, pure-torch stand-in for the CPU ops of `sgl_kernel` that SGLang 0.5.22's CPU
platform calls (SGLANG_USE_CPU_ENGINE=1), for the SGLang-Omni engine tier (tests/engine).

Why: PyPI's `sglang-kernel` is the CUDA build (it does not import without libcuda), and the
CPU build of `sgl_kernel` is not on PyPI. SGLang's CPU path reaches exactly two of its ops:

- `assign_req_to_token_pool_cpu` (sglang/srt/mem_cache/allocation.py, imported at module
  load, called at every KV allocation): the triton kernel `assign_req_to_token_pool`'s slot
  assignment, done serially;
- `torch.ops.sgl_kernel.murmur_hash32_cpu` (sglang/kernels/ops/sampling/murmur_hash.py,
  reached from the seeded sampler): the triton kernel `murmur_hash32_kernel`'s MurmurHash3,
  in int64 arithmetic (every product split so that none overflows).

Any other name looked up here is a function that raises NotImplementedError naming the op,
so a CPU path that ever calls one fails loudly instead of computing something else. Put on
the engine's PYTHONPATH by the tier's deploy env (tests/engine/conftest_sglang.py), never
installed into the venv: the contract tier's server does not see it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["assign_req_to_token_pool_cpu", "murmur_hash32_cpu", "STANDIN"]

STANDIN = "thetalker-tests"  # how a test tells this package from a real sgl_kernel
MASK32 = 0xFFFFFFFF


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Row i of the batch: req_to_token[req_pool_indices[i], start[i]:end[i]] takes the next
    end[i] - start[i] entries of out_cache_loc, after those of rows 0..i-1 (the triton
    kernel's `out_offset`, the sum of the earlier rows' lengths)."""
    assert req_to_token.shape[1] == pool_len, (req_to_token.shape, pool_len)
    offset = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a * c) mod 2**32 for a in [0, 2**32) as int64, without a product past 2**63."""
    lo = a * (c & 0xFFFF)
    hi = ((a * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK32


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & MASK32


def _mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    k = _mul32(k, 0xCC9E2D51)
    k = _rotl32(k, 15)
    k = _mul32(k, 0x1B873593)
    h = h ^ k
    h = _rotl32(h, 13)
    return (_mul32(h, 5) + 0xE6546B64) & MASK32


def _fmix(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def _as_int64(t: torch.Tensor) -> torch.Tensor:
    # uint64 (the sampler's seeds) has few CPU ops in torch: reinterpret its bits instead.
    return t.view(torch.int64) if t.dtype == torch.uint64 else t.to(torch.int64)


def murmur_hash32_cpu(
    seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor
) -> torch.Tensor:
    """(n, m) uint32: MurmurHash3 of the 16 bytes seed_low, seed_high, position, column, per
    row's seed and position and per column index, as murmur_hash32_kernel computes it."""
    seed64 = _as_int64(seed)
    h = torch.zeros_like(seed64)
    h = _mix(h, seed64 & MASK32)
    h = _mix(h, (seed64 >> 32) & MASK32)  # arithmetic shift: the mask keeps the high word
    h = _mix(h, _as_int64(positions) & MASK32)
    h = _mix(h[:, None], (_as_int64(col_indices) & MASK32)[None, :])
    return _fmix(h ^ 16).to(torch.uint32)


_LIB = torch.library.Library("sgl_kernel", "DEF")
_LIB.define("murmur_hash32_cpu(Tensor seed, Tensor positions, Tensor col_indices) -> Tensor")
_LIB.impl("murmur_hash32_cpu", murmur_hash32_cpu, "CPU")


def _not_provided(name: str) -> Callable[..., Any]:
    def op(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(
            f"sgl_kernel.{name}: not provided by TheTalker's CPU stand-in "
            "(tests/engine/sgl_kernel_cpu), which has only assign_req_to_token_pool_cpu and "
            "murmur_hash32_cpu"
        )

    op.__name__ = name
    return op


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    return _not_provided(name)
