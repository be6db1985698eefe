"""The layers of a model converted from a GGUF file that keep the file's own k-quant values (beyond the papers).

:class:`GGUFLayers` reads the Q4_K and Q6_K tensors of the GGUF a model was converted from and, for a linear layer
converted from one of them, builds :class:`~active_rag.models.q4k_linear.Int4KLinear` or
:class:`~active_rag.models.q6k_linear.Int6KLinear` from the file's integers, but only when they give every value of the
converted weight bit for bit (in its row order: llama.cpp's converter permutes Llama's query and key rows). Any other
layer is left to :func:`~active_rag.models.weights.quantize_linear`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..kernels.layout import SUPER
from .q4k_linear import BLOCK_BYTES as Q4K_BYTES
from .q4k_linear import Int4KLinear, Q4KBlocks, q4k_blocks
from .q6k_linear import BLOCK_BYTES as Q6K_BYTES
from .q6k_linear import Int6KLinear, Q6KBlocks, q6k_blocks

__all__ = ["GGUFLayers", "gguf_tensor_names"]

_PROJECTIONS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down"}


def gguf_tensor_names(name: str) -> list[str]:
    """The GGUF tensor names a Llama-family linear layer's weight may have been converted from (llama.cpp's names;
    a tied output head is the token embedding), most likely first; none for other layers."""
    if name == "lm_head":
        return ["output.weight", "token_embd.weight"]
    match = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
    if match is None or match.group(2) not in _PROJECTIONS:
        return []
    return [f"blk.{match.group(1)}.{_PROJECTIONS[match.group(2)]}.weight"]


PERMUTED_ROWS = 16384
"""At most this many rows are matched one by one when a tensor's rows are not in the converted order (a projection's
permuted query or key rows; an output head of 150k rows is never permuted, and its rows' bytes would take a GB)."""


def _in_weight_order(blocks: Any, weight: torch.Tensor) -> Any:
    """``blocks`` (Q4KBlocks or Q6KBlocks) with their rows in ``weight``'s order, or ``None`` unless their values are
    ``weight``'s bit for bit."""
    dense = weight.detach().float().contiguous()
    values = blocks.weight()
    if values.shape != dense.shape:
        return None
    if torch.equal(values, dense):
        return blocks
    if dense.shape[0] > PERMUTED_ROWS:
        return None
    where = {row.numpy().tobytes(): i for i, row in enumerate(values)}
    order = [where.get(row.numpy().tobytes()) for row in dense]
    if any(i is None for i in order):
        return None
    return blocks.rows(torch.tensor(order, dtype=torch.long))


class GGUFLayers:
    """The Q4_K and Q6_K tensors of the GGUF file at ``path``, for the layers converted from them (:meth:`layer`)."""

    def __init__(self, path: Path) -> None:
        from gguf import GGMLQuantizationType, GGUFReader

        self.path = path
        self._types = {GGMLQuantizationType.Q4_K: (Q4K_BYTES, q4k_blocks), GGMLQuantizationType.Q6_K: (Q6K_BYTES, q6k_blocks)}
        self._tensors: dict[str, Any] = {t.name: t for t in GGUFReader(str(path)).tensors if t.tensor_type in self._types}

    def blocks(self, name: str, weight: torch.Tensor) -> Q4KBlocks | Q6KBlocks | None:
        """The k-quant values of layer ``name`` whose weight is ``weight`` ``[out, in]``, its rows in ``weight``'s
        order; ``None`` unless the file holds them and they give every value of ``weight`` bit for bit."""
        tensor = next((self._tensors[n] for n in gguf_tensor_names(name) if n in self._tensors), None)
        if tensor is None or weight.dim() != 2 or weight.shape[1] % SUPER:
            return None
        block_bytes, unpack = self._types[tensor.tensor_type]
        data = np.asarray(tensor.data)
        if data.shape != (weight.shape[0], weight.shape[1] // SUPER * block_bytes):
            return None
        return _in_weight_order(unpack(data), weight)

    def layer(self, name: str, linear: nn.Linear) -> Int4KLinear | Int6KLinear | None:
        """``linear`` as the file's k-quant layer when the file holds its weight so, exactly; else ``None``."""
        blocks = self.blocks(name, linear.weight)
        if isinstance(blocks, Q4KBlocks):
            return Int4KLinear.from_blocks(blocks, linear.bias)
        if isinstance(blocks, Q6KBlocks):
            return Int6KLinear.from_blocks(blocks, linear.bias)
        return None
