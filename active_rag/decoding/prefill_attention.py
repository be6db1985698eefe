"""A prompt's attention after a cached prefix: its queries in chunks, each over the key blocks it can see, with the
same outputs bit for bit (beyond the papers).

A prompt read after a cached prefix (the instruction and examples every question shares, then the question's
passages) is the longest call an evaluation makes. transformers' ``sdpa`` attention gives such a call an explicit
causal mask (the keys are the prefix and the prompt, the queries only the prompt) and ``repeat_kv``'s copies of the
key/value heads, and torch's CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu``) then computes every
key block for every query, the masked half of the prompt's own triangle included. It walks the keys in blocks of
:data:`KEY_BLOCK` with an online softmax: a block that is wholly masked for a query leaves that query's running
maximum, sum and output exactly as they were (its weights are exactly zero), and the queries are independent rows.
So :func:`prefill_attention` runs the prompt's queries in chunks that end where a key block ends: each chunk over the
keys up to the first block boundary past its last query's own position, the same blocks in the same order minus
those wholly masked for it, with the key/value heads shared in the call (``enable_gqa``) instead of copied. The
outputs are the model's call's bit for bit (checked once per process and dtype by :func:`exact`, which turns the
path off where another torch splits its keys otherwise), so the engine's tokens, scores and evaluation keys do not
change.

Measured on a 2-core Zen 4 (float32, 2 threads, ``results/bench/prefill-attention/``): a layer of
qwen2.5-coder-1.5b's shape, 720 prompt tokens after 629 cached, 0.83x the model call's time (0.73-0.89x over five
prompt shapes), of the 0.5B's 0.77-0.92x; the 0.5B's whole forward of that prompt 0.81x; ``sr-rag-choose`` on the
1.5B about 3% faster a question, the same predictions. :func:`applies`
says where it runs: a float32 or bfloat16 call of more than one query on the CPU with a boolean mask over exactly the
call's keys, of a family whose attention is plain scaled dot-product over ``repeat_kv``'s heads (:data:`FAMILIES`),
through ``sdpa``, without dropout; :func:`prefill_attention` falls back (``None``) where the mask lets a query see a
key past its chunk (not a causal prompt). :data:`VARIABLE` ``=sdpa`` keeps the model's own call.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

from .one_token_attention import FAMILIES

__all__ = ["KEY_BLOCK", "VARIABLE", "applies", "chunks", "describe", "exact", "prefill_attention"]

VARIABLE = "ACTIVE_RAG_PREFILL_ATTENTION"
"""Environment variable: ``sdpa`` keeps the model's own attention call for every prompt."""

KEY_BLOCK = 512
"""Keys a block of torch's CPU flash kernel walks at a time (its ``kv_split_size``, measured in torch 2.13; :func:`exact`
checks the torch at hand)."""

_DTYPES = (torch.float32, torch.bfloat16)
_EXACT: dict[tuple[torch.dtype, int], bool] = {}


def enabled() -> bool:
    """Whether :data:`VARIABLE` leaves the chunked call on (it is unless set to ``sdpa``)."""
    return os.environ.get(VARIABLE, "").strip().lower() not in ("sdpa", "model", "off", "0", "false", "no")


def describe(dtype: torch.dtype = torch.float32, dim: int = 64) -> str:
    """How a prompt after a cached prefix attends on the CPU, for ``active-rag doctor``."""
    if not enabled():
        return f"the model's sdpa ({VARIABLE}={os.environ.get(VARIABLE)})"
    if not exact(dtype, dim):
        return f"the model's sdpa (this torch's key blocks are not {KEY_BLOCK} keys)"
    return f"sdpa in chunks at its {KEY_BLOCK}-key blocks (the same outputs)"


def chunks(prefix: int, rows: int, block: int | None = None) -> list[tuple[int, int, int]]:
    """``(first, end, keys)`` for each chunk of ``rows`` queries after ``prefix`` cached keys: queries ``first`` to
    ``end - 1`` over keys ``0`` to ``keys - 1``, ``keys`` the end of the key block (of ``block`` keys,
    :data:`KEY_BLOCK` by default) holding query ``first``'s own position (or the last key), ``end`` the first query
    whose position is past it."""
    block = KEY_BLOCK if block is None else block
    total, out, first = prefix + rows, [], 0
    while first < rows:
        keys = min((prefix + first) // block * block + block, total)
        end = min(keys - prefix, rows)
        out.append((first, end, keys))
        first = end
    return out


def applies(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
            kwargs: dict[str, Any]) -> bool:
    """Whether the layer ``module``'s attention of this call runs as :func:`prefill_attention` (module docstring)."""
    return (
        query.shape[2] > 1
        and key.shape[2] > KEY_BLOCK
        and mask is not None
        and mask.dtype == torch.bool
        and mask.dim() == 4
        and mask.shape[-2] == query.shape[2]
        and mask.shape[-1] == key.shape[2]
        and query.device.type == "cpu"
        and query.dtype in _DTYPES
        and key.dtype == query.dtype
        and query.shape[1] % key.shape[1] == 0
        and type(module).__name__ in FAMILIES
        and getattr(module, "_active_rag_inner", None) == "sdpa"
        and not kwargs.get("dropout")
        and kwargs.get("position_bias") is None
        and enabled()
        and len(chunks(key.shape[2] - query.shape[2], query.shape[2])) > 1
        and exact(query.dtype, query.shape[-1])
    )


def _chunked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
             scaling: float | None, pieces: list[tuple[int, int, int]]) -> torch.Tensor:
    """``[batch, heads, rows, dim]``: each piece's queries over its keys."""
    return torch.cat([F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, :k], value[:, :, :k],
                                                     attn_mask=mask[:, :, a:b, :k], scale=scaling, enable_gqa=True)
                      for a, b, k in pieces], dim=2)


def exact(dtype: torch.dtype, dim: int) -> bool:
    """Whether chunks ending at :data:`KEY_BLOCK` boundaries give this torch's masked call over ``repeat_kv``'s heads
    bit for bit in ``dtype`` at head size ``dim`` (tried once on random values: 96 queries after 480 keys, so a chunk
    ends at key 512)."""
    known = _EXACT.get((dtype, dim))
    if known is None:
        generator = torch.Generator().manual_seed(0)
        prefix, rows = KEY_BLOCK - 32, 96

        def random(heads: int, length: int) -> torch.Tensor:
            return torch.randn(1, heads, length, dim, generator=generator).to(dtype)

        query, key, value = random(4, rows), random(2, prefix + rows), random(2, prefix + rows)
        mask = torch.ones(rows, prefix + rows, dtype=torch.bool).tril(prefix)[None, None]
        try:
            from transformers.models.llama.modeling_llama import repeat_kv  # what the model's sdpa call gives the heads

            whole = F.scaled_dot_product_attention(query, repeat_kv(key, 2), repeat_kv(value, 2), attn_mask=mask)
            known = torch.equal(whole, _chunked(query, key, value, mask, None, chunks(prefix, rows)))
        except (RuntimeError, TypeError, ImportError):  # a torch without enable_gqa or the masked CPU kernel
            known = False
        _EXACT[(dtype, dim)] = known
    return known


def prefill_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                      scaling: float | None = None) -> torch.Tensor | None:
    """The model's ``sdpa`` attention of a prompt after ``key.shape[2] - query.shape[2]`` cached keys, in chunks
    (module docstring): ``query`` ``[batch, heads, rows, dim]``, ``key`` and ``value`` ``[batch, kv_heads, keys,
    dim]``, ``mask`` boolean ``[batch or 1, 1, rows, keys]`` (true: attend) -> ``[batch, rows, heads, dim]`` (the
    layout transformers' attention functions return); ``None`` where the mask lets a query see a key past its chunk's
    (then only the whole call is the same attention)."""
    pieces = chunks(key.shape[2] - query.shape[2], query.shape[2])
    if any(bool(mask[:, :, a:b, k:].any()) for a, b, k in pieces):
        return None
    return _chunked(query, key, value, mask, scaling, pieces).transpose(1, 2).contiguous()
