"""A sequence's key/value cache held in one slot of a fixed pool, so that a captured decode step can address it.

A CUDA graph replays kernels on fixed addresses and shapes. The sessions' own caches
(:class:`~active_rag.decoding.kv_layer.GrowingLayer`) are buffers of their own, of every length, reallocated as they
grow: no graph can read them. :class:`SlotPool` holds, per layer, one ``[slots, kv_heads, capacity, head_dim]`` key
tensor and one value tensor on the model's device, allocated once; a sequence that decodes through the graphed step
(:mod:`active_rag.decoding.graph_step`) is *bound* to a slot: its keys and values are copied there once and its cache's
layers become :class:`SlotLayer` objects whose ``keys``/``values`` are views of that slot's first positions, as a
``GrowingLayer``'s are views of its own buffer. Everything else that reads or changes a cache keeps its meaning:

- a prefill (a re-prompt after a retrieval), a batch through ``model(...)`` and a crop or a roll-back go through the
  layer as before (``GrowingLayer.update`` writes into the slot in place while the slot has room);
- the graphed step writes one position per bound sequence inside the graph and moves the sequence's length in one
  integer (:attr:`SlotBinding.length`), not in every layer: a layer reads that length until anything else touches
  it (:meth:`SlotBinding.settle`);
- a write past the slot's capacity, a tensor set from outside (a prefix-cache hit) or a reset moves the whole
  sequence out of the slot into buffers of its own (:meth:`SlotBinding.evict`) and hands the slot back;
- the prefix cache never keeps views of a slot (:meth:`SlotLayer.share` gives none, so it keeps a copy): a slot is
  given to another sequence once its own is gone (the cache object collected) or evicted, and nothing else may
  still read it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from .kv_layer import GrowingLayer

__all__ = ["SlotBinding", "SlotLayer", "SlotPool"]


def _is_prefix_view(tensor: torch.Tensor, buffer: torch.Tensor) -> bool:
    """Whether ``tensor`` is ``buffer[:, :, :n]`` for some ``n``."""
    return (tensor.dim() == 4 and tensor.data_ptr() == buffer.data_ptr() and tensor.stride() == buffer.stride()
            and tensor.shape[:2] == buffer.shape[:2] and tensor.shape[3] == buffer.shape[3]
            and tensor.shape[2] <= buffer.shape[2])


class SlotLayer(GrowingLayer):
    """A cache layer whose keys and values are views of a pool slot while bound (see the module docstring); unbound,
    a :class:`~active_rag.decoding.kv_layer.GrowingLayer`."""

    full_attention = True
    """Every position kept (the prefix cache and the lean step treat it as a plain layer)."""

    def __init__(self, binding: SlotBinding | None = None, index: int = 0) -> None:
        self._binding: SlotBinding | None = None
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._length = 0
        super().__init__()
        if binding is not None:
            self._binding = binding
            pool = binding.pool
            self._key_buffer = pool.keys[index][binding.slot: binding.slot + 1]
            self._value_buffer = pool.values[index][binding.slot: binding.slot + 1]
            self.device = pool.device
            self.is_initialized = True

    @property
    def bound(self) -> bool:
        return self._binding is not None

    def _filled(self) -> int:
        binding = self._binding
        assert binding is not None
        return binding.length if binding.graph else self._length

    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        if self._binding is not None:
            assert self._key_buffer is not None
            return self._key_buffer[:, :, : self._filled()]
        return self._keys

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:
        self._set(tensor, values=False)

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        if self._binding is not None:
            assert self._value_buffer is not None
            return self._value_buffer[:, :, : self._filled()]
        return self._values

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._set(tensor, values=True)

    def _set(self, tensor: torch.Tensor | None, *, values: bool) -> None:
        binding = self._binding
        if binding is not None:
            binding.settle()
            buffer = self._value_buffer if values else self._key_buffer
            assert buffer is not None
            if tensor is not None and _is_prefix_view(tensor, buffer):
                self._length = tensor.shape[2]
                return
            binding.evict()  # a tensor from outside: the sequence leaves the slot first
        if values:
            self._values = tensor
        else:
            self._keys = tensor

    def share(self, length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """No views of a slot for the prefix cache (it keeps a copy): the slot is reused once the sequence is gone."""
        return None if self._binding is not None else super().share(length)

    def _reserve(self, length: int, end: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if self._binding is not None:
            self._binding.evict()
        super()._reserve(length, end, key_states, value_states)

    def _leave(self) -> None:
        """Copy this layer's filled positions out of the slot into buffers of its own (called by ``evict``)."""
        keys, values = self.keys, self.values
        assert keys is not None and values is not None
        n = keys.shape[2]
        self._binding = None
        capacity = n + max(64, n // 8)
        kb = keys.new_empty((keys.shape[0], keys.shape[1], capacity, keys.shape[3]))
        vb = values.new_empty((values.shape[0], values.shape[1], capacity, values.shape[3]))
        kb[:, :, :n].copy_(keys)
        vb[:, :, :n].copy_(values)
        self._key_buffer, self._value_buffer = kb, vb
        self._frozen = 0
        self._keys, self._values = kb[:, :, :n], vb[:, :, :n]

    def reset(self) -> None:
        if self._binding is not None:
            self._binding.evict()
        super().reset()


class SlotBinding:
    """One sequence bound to one slot: its layers and its length while the graphed step moves it."""

    def __init__(self, pool: SlotPool, slot: int, length: int) -> None:
        self.pool, self.slot, self.length = pool, slot, length
        self.graph = False
        """``True`` while the graphed step holds the length (:attr:`length`) for every layer."""
        self.layers: list[SlotLayer] = []
        self.released = False

    def settle(self) -> None:
        """Hand the length back to every layer (before anything but the graphed step reads or writes one)."""
        if self.graph:
            self.graph = False
            for layer in self.layers:
                layer._length = self.length

    def advance(self, length: int) -> None:
        """The graphed step wrote position ``length - 1``: the sequence holds ``length`` positions now."""
        self.length = length
        self.graph = True

    def filled(self) -> int | None:
        """Positions every layer holds, or ``None`` when the layers disagree (a forward failed part-way)."""
        if self.graph:
            return self.length
        lengths = {layer._length for layer in self.layers}
        return lengths.pop() if len(lengths) == 1 else None

    def evict(self) -> None:
        """Move the sequence out of the slot (each layer into buffers of its own) and hand the slot back."""
        if self.released:
            return
        self.settle()
        for layer in self.layers:
            if layer._binding is self:
                layer._leave()
        self.pool.release(self)


class SlotPool:
    """``slots`` sequences of up to ``capacity`` positions each, per layer, on ``device`` in ``dtype``."""

    def __init__(self, *, layers: int, slots: int, capacity: int, kv_heads: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        if slots < 1 or capacity < 2:
            raise ValueError(f"a slot pool needs at least 1 slot and 2 positions, got {slots} and {capacity}")
        self.slots, self.capacity, self.device, self.dtype = slots, capacity, torch.device(device), dtype
        shape = (slots, kv_heads, capacity, head_dim)
        with torch.inference_mode():
            self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
            self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self._free = list(range(slots))
        self._owners: dict[int, SlotBinding] = {}
        self._lock = threading.Lock()
        self.binds = 0
        self.released = 0

    @property
    def in_use(self) -> int:
        return len(self._owners)

    def binding(self, cache: Any) -> SlotBinding | None:
        """The binding of ``cache`` to this pool, or ``None``."""
        layers = getattr(cache, "layers", None)
        first = layers[0] if layers else None
        binding = getattr(first, "_binding", None)
        if binding is None or binding.pool is not self or binding.released:
            return None
        if any(getattr(layer, "_binding", None) is not binding for layer in layers):
            return None
        return binding

    def bind(self, cache: Any, length: int) -> SlotBinding | None:
        """Bind ``cache`` (a ``DynamicCache`` of plain layers holding ``length`` positions each, on this pool's
        device and dtype) to a free slot, copying its keys and values there; its existing binding when it has
        one. ``None`` when no slot is free or the cache does not fit (it then stays as it is)."""
        binding = self.binding(cache)
        if binding is not None:
            return binding if binding.filled() == length and length < self.capacity else None
        layers = getattr(cache, "layers", None)
        if not layers or len(layers) != len(self.keys) or length >= self.capacity:
            return None
        for layer in layers:
            if type(layer) not in (GrowingLayer, SlotLayer) or getattr(layer, "_binding", None) is not None:
                return None
            keys = layer.keys
            if length and (keys is None or keys.dim() != 4 or keys.shape[0] != 1 or keys.shape[2] != length
                           or keys.dtype != self.dtype or keys.device != self.device
                           or keys.shape[1] != self.keys[0].shape[1] or keys.shape[3] != self.keys[0].shape[3]):
                return None
        with self._lock:
            if not self._free:
                return None
            slot = self._free.pop(0)
            binding = SlotBinding(self, slot, length)
            self._owners[slot] = binding
        for index, layer in enumerate(layers):
            if length:
                self.keys[index][slot, :, :length].copy_(layer.keys[0])
                self.values[index][slot, :, :length].copy_(layer.values[0])
            bound = SlotLayer(binding, index)
            bound._length = length
            binding.layers.append(bound)
            layers[index] = bound
        weakref.finalize(cache, self.release, binding)  # the cache collected: the slot is free again
        self.binds += 1
        return binding

    def release(self, binding: SlotBinding) -> None:
        """Hand ``binding``'s slot back (once)."""
        with self._lock:
            if binding.released:
                return
            binding.released = True
            if self._owners.get(binding.slot) is binding:
                del self._owners[binding.slot]
                self._free.append(binding.slot)
                self._free.sort()
            self.released += 1
