"""A KV cache of prompt prefixes: read the shared prompt once.

Every prompt of an evaluation starts with the same instruction and few-shot exemplars, and every
re-prompt after a retrieval repeats them. Prefill is limited by arithmetic, so the only way to make it
faster is to compute less: a new :class:`~active_rag.decoding.model.DecodingSession` starts from the longest
token-identical prefix whose keys and values are already known and prefills only the rest (the idea of
vLLM's automatic prefix caching and SGLang's RadixAttention, here for one process).

- Matching is token-exact on the longest common prefix, so a tokenizer that merges tokens across a
  boundary simply gets a shorter match; a prefix that differs in any token is never reused.
- Entries hold copies of the per-layer key/value tensors of one prompt (never views of a session's buffers,
  which :class:`~active_rag.decoding.kv_layer.GrowingLayer` writes in place). Sessions read them through views
  and copy them into buffers of their own before writing, so a session never changes what it started from.
- Memory is bounded: least-recently-used entries are evicted once the total exceeds ``max_bytes``. An
  entry whose tokens are a prefix of a new one is replaced by it.
- Thread-safe: one lock guards the table; tensors are never written after insertion.
- Entries belong to a ``namespace`` (:attr:`~active_rag.decoding.model.ActiveLM.cache_namespace`: the model object, its
  dtype and device): a cache shared by several models, dtypes or devices never hands one of them another's KV.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer ``(keys, values)``, each ``[1, kv_heads, length, head_dim]``."""

DEFAULT_PREFIX_CACHE_MB = 1024.0


def available_memory_bytes() -> int | None:
    """The machine's memory available now, in bytes (Linux: ``MemAvailable`` of ``/proc/meminfo``, else the free
    pages ``sysconf`` gives); ``None`` where neither says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def default_prefix_cache_mb(device: torch.device) -> float:
    """The cache's bound when none is given, in proportion to the machine: on the CPU (and MPS) an eighth of the
    memory available once the model is loaded (:func:`available_memory_bytes`), on a CUDA GPU a fifth of its free
    memory, at most :data:`DEFAULT_PREFIX_CACHE_MB` either way, so the decoding sequences' KV keeps room (a laptop
    with 4 GB free gets 512 MiB; where the memory available is unknown, the most)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return min(DEFAULT_PREFIX_CACHE_MB, free / 2**20 / 5)
    available = available_memory_bytes()
    return DEFAULT_PREFIX_CACHE_MB if available is None else min(DEFAULT_PREFIX_CACHE_MB, available / 2**20 / 8)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    if list(a[:n]) == list(b[:n]):
        return n
    x = torch.as_tensor(list(a[:n]), device="cpu")  # token ids: compared on the host
    y = torch.as_tensor(list(b[:n]), device="cpu")
    return int((x != y).int().argmax())


@dataclass
class _Entry:
    ids: tuple[int, ...]
    kv: KV
    nbytes: int
    namespace: Hashable = None

    @property
    def key(self) -> tuple[Hashable, tuple[int, ...]]:
        return (self.namespace, self.ids)


@dataclass(frozen=True)
class PrefixHit:
    """``length`` leading tokens whose keys/values are ``kv`` (views; sliced to ``length`` by the caller)."""

    length: int
    kv: KV


class PrefixCache:
    """LRU table of prompt prefixes and their KV tensors (see the module docstring).

    >>> cache = PrefixCache(max_bytes=512 * 2**20)  # doctest: +SKIP
    >>> hit = cache.lookup(prompt_ids)               # longest cached prefix, or None
    """

    def __init__(self, max_bytes: int, *, min_length: int = 1) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.min_length = min_length
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: Sequence[int], *, limit: int | None = None, namespace: Hashable = None) -> PrefixHit | None:
        """The longest cached prefix of ``ids`` (at most ``limit`` tokens) among the entries of ``namespace``, or
        ``None``."""
        limit = len(ids) if limit is None else min(limit, len(ids))
        best: _Entry | None = None
        best_len = 0
        with self._lock:
            for entry in self._entries.values():
                if entry.namespace != namespace:
                    continue
                n = common_prefix_length(entry.ids, ids[:limit])
                if n > best_len:
                    best, best_len = entry, n
            if best is None or best_len < self.min_length:
                self.misses += 1
                return None
            self._entries.move_to_end(best.key)
            self.hits += 1
            return PrefixHit(length=best_len, kv=best.kv)

    def insert(self, ids: Sequence[int], kv: KV, *, namespace: Hashable = None, shared: bool = False) -> None:
        """Remember the KV tensors of ``ids`` in ``namespace``: a copy of their first ``len(ids)`` positions, of
        exactly that size (the caller's tensors may be views of buffers it writes on, whose size would stay held);
        with ``shared``, the tensors themselves: views of buffers whose first ``len(ids)`` positions their owner
        never writes again (:meth:`~active_rag.decoding.kv_layer.GrowingLayer.share`), counted at their buffers'
        whole size."""
        key = tuple(int(i) for i in ids)
        if len(key) < self.min_length or not kv:
            return
        if shared:
            nbytes = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in kv)
        else:
            nbytes = sum((k[:, :, : len(key)].numel() * k.element_size()
                          + v[:, :, : len(key)].numel() * v.element_size()) for k, v in kv)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            for other in list(self._entries.values()):
                if other.namespace != namespace:
                    continue
                if len(other.ids) >= len(key) and other.ids[: len(key)] == key:
                    self._entries.move_to_end(other.key)  # a longer entry already covers these tokens
                    return
                if len(other.ids) < len(key) and key[: len(other.ids)] == other.ids:
                    self._drop(other)  # the new entry covers the shorter one
            kv = [(k[:, :, : len(key)], v[:, :, : len(key)]) if shared else
                  (k[:, :, : len(key)].clone(), v[:, :, : len(key)].clone()) for k, v in kv]
            entry = _Entry(key, kv, nbytes, namespace)
            self._entries[entry.key] = entry
            self._bytes += nbytes
            while self._bytes > self.max_bytes and self._entries:
                self._drop(next(iter(self._entries.values())))
                self.evictions += 1

    def _drop(self, entry: _Entry) -> None:
        del self._entries[entry.key]
        self._bytes -= entry.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def stats(self) -> dict[str, int | float]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "mb": round(self._bytes / 2**20, 2),
                "max_mb": round(self.max_bytes / 2**20, 2),
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
            }


__all__ = ["PrefixCache", "PrefixHit", "DEFAULT_PREFIX_CACHE_MB", "available_memory_bytes", "common_prefix_length",
           "default_prefix_cache_mb"]
