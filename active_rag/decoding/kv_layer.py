"""A key/value cache layer that grows in place: a decode step writes one position, it does not copy the cache.

transformers' ``DynamicLayer.update`` concatenates: every decode step allocates a new ``[batch, kv_heads, length,
head_dim]`` tensor per layer and copies the whole cache into it. For qwen2.5-coder-1.5b in float32 that is 57 KB a
token, so a sequence of 2,000 tokens copies 115 MB each step, 0.9 GB at batch 8 (read and written: about as many
bytes as the step's weights), and the allocator is left with blocks of every size between (an `eval` process held
14 GB resident for 1.1 GB of weights).

:class:`GrowingLayer` keeps each layer's keys and values in a buffer with room to spare (:func:`spare_room`: an
eighth of the length, at least :data:`MIN_SPARE` positions) and exposes the filled part as a view, as
``DynamicLayer`` exposes its tensor: ``keys``/``values`` are ``buffer[:, :, :length]``. A step writes its position
into the buffer; only when the buffer is full is a larger one allocated and the cache copied (amortised: a copy
every eighth of the length). Extra memory stays linear in the length (at most an eighth plus
:data:`MIN_SPARE` positions). A prompt of 2,000 tokens gets 256 positions to spare, as many as an answer of
``max_new_tokens=256`` writes, not 500 (a quarter, before: 14 MB a sequence of the 1.5B model in float32, also
held by the prefix cache's entries, which view the session's buffers).

Every other way the tensors change keeps its meaning:

- a crop or a roll-back shortens the view; the positions past it are written again by the next steps;
- tensors set from outside (a prefix-cache hit hands a session views of a shared entry; ``batch_select_indices``)
  are not the layer's buffer, so the next update copies them into a new buffer of its own and never writes into
  what it was given (:meth:`GrowingLayer.owns`);
- the prefix cache keeps views of the first positions of the session's buffer that computed a prompt
  (:meth:`GrowingLayer.share`), not copies: those positions are frozen, and a write below the frozen length (a
  crop into the prompt, then a step) first copies the cache into a new buffer of the layer's own, so a session
  never writes into what the prefix cache holds. A prompt's KV is then held once, not once by the session and
  once by the cache.

The buffers are made with ``new_empty`` of the incoming keys, so they live on the model's device and dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["MIN_SPARE", "GrowingLayer", "growing_cache", "is_full_attention_layer", "spare_room"]

MIN_SPARE = 256
"""Positions a buffer has to spare at least when it is (re)allocated."""


def spare_room(length: int) -> int:
    """Positions to allocate beyond ``length``: an eighth of it, at least :data:`MIN_SPARE`."""
    return max(MIN_SPARE, length // 8)


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose keys and values are views of buffers with room to spare (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._frozen = 0  # the buffer's first positions others hold views of (share): never written again
        # (keys, values, key buffer) as step_slot left them: the same objects still there need no ownership check
        self._slot: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def share(self, length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Views of the first ``length`` positions of this layer's own buffers, which are frozen from now on (a
        later write there goes to a new buffer); ``None`` when the layer does not own its tensors or holds fewer
        positions."""
        if not self.owns() or self.keys is None or self.keys.shape[-2] < length:
            return None
        assert self._key_buffer is not None and self._value_buffer is not None
        self._frozen = max(self._frozen, length)
        return self._key_buffer[:, :, :length], self._value_buffer[:, :, :length]

    def owns(self) -> bool:
        """Whether ``keys`` and ``values`` are the first positions of this layer's own buffers (not tensors set
        from outside, which must not be written)."""
        keys, values = self.keys, self.values
        kb, vb = self._key_buffer, self._value_buffer
        return (kb is not None and vb is not None and keys is not None and values is not None and keys.dim() == 4
                and keys.data_ptr() == kb.data_ptr() and values.data_ptr() == vb.data_ptr()
                and keys.stride() == kb.stride() and values.stride() == vb.stride()
                and keys.shape[:2] == kb.shape[:2] and values.shape[:2] == vb.shape[:2])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.keys is not None and self.keys.dim() == 4 and self.keys.shape[-2] > 0
        length = self.keys.shape[-2] if held else 0
        end = length + key_states.shape[-2]
        kb = self._key_buffer
        fits = (self.owns() and kb is not None and end <= kb.shape[-2] and kb.dtype == key_states.dtype
                and kb.shape[:2] == key_states.shape[:2] and length >= self._frozen)
        if not fits:
            self._reserve(length, end, key_states, value_states)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[:, :, length:end].copy_(key_states)
        self._value_buffer[:, :, length:end].copy_(value_states)
        self.keys = self._key_buffer[:, :, :end]
        self.values = self._value_buffer[:, :, :end]
        return self.keys, self.values

    def step_slot(self) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """Room for one more position that the caller writes itself (the kernels' ``decode_layers`` op,
        :mod:`active_rag.decoding.kernel_layers`): ``(key buffer, value buffer, position)``, with ``keys``/``values``
        already covering the position, as :meth:`update` would leave them after writing it (a new buffer first
        where :meth:`update` would make one). ``None``, with nothing changed, where the layer holds no keys yet."""
        keys, values, kb = self.keys, self.values, self._key_buffer
        last = self._slot
        if last is not None and keys is last[0] and values is last[1] and kb is last[2]:
            # the views the last call left, untouched since: still the layer's own buffer
            length = keys.shape[-2]  # type: ignore[union-attr]
            fits = kb is not None and length < kb.shape[-2] and length >= self._frozen
        else:
            if keys is None or values is None or keys.dim() != 4 or keys.shape[-2] == 0:
                return None
            length = keys.shape[-2]
            fits = self.owns() and kb is not None and length < kb.shape[-2] and length >= self._frozen
        end = length + 1
        if not fits:
            self._reserve(length, end, keys, values)  # type: ignore[arg-type]
        kb, vb = self._key_buffer, self._value_buffer
        assert kb is not None and vb is not None
        self.keys, self.values = kb[:, :, :end], vb[:, :, :end]
        self._slot = (self.keys, self.values, kb)
        return kb, vb, length

    def _reserve(self, length: int, end: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """New buffers for ``end`` positions and room to spare, holding the first ``length`` cached ones."""
        capacity = end + spare_room(end)
        kb = key_states.new_empty((key_states.shape[0], key_states.shape[1], capacity, key_states.shape[3]))
        vb = value_states.new_empty((value_states.shape[0], value_states.shape[1], capacity, value_states.shape[3]))
        if length:
            kb[:, :, :length].copy_(self.keys)
            vb[:, :, :length].copy_(self.values)
        self._key_buffer, self._value_buffer = kb, vb
        self._frozen = 0
        self._slot = None  # (its views would hold the old buffers)

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        self._frozen = 0
        self._slot = None
        super().reset()


def is_full_attention_layer(layer: Any) -> bool:
    """A layer of the plain layout (every position kept): transformers' ``DynamicLayer``, a :class:`GrowingLayer` or a
    class that says so (``full_attention = True``: a pool slot's layer), not a sliding-window or other subclass."""
    return type(layer) in (DynamicLayer, GrowingLayer) or getattr(type(layer), "full_attention", False) is True


def growing_cache(config: Any) -> Any:
    """transformers' ``DynamicCache`` for ``config`` with every plain layer a :class:`GrowingLayer` (sliding-window
    and other layers as transformers makes them)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if layers:
        cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in layers]
    elif getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = GrowingLayer
    return cache
