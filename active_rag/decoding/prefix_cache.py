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
- What prompts share is kept on its own: when a new prompt shares a prefix of at least :data:`STEM_MIN` tokens with
  an entry but neither holds the other (two questions after the same instruction and exemplars), the cache also
  keeps a copy of just that prefix, a *stem*, which a longer entry never replaces and which a lookup prefers at an
  equal match. The whole prompts then age out under a small bound while the part every question reuses stays: on
  pydocs (`sr-rag-choose`, one prompt a question) the prompts share their first 629 tokens and nothing else, so the
  CPU's default bound (:data:`CPU_PREFIX_CACHE_MB`) is 512 MiB, not 1024.
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
"""The most the default bound takes on a GPU."""

CPU_PREFIX_CACHE_MB = 512.0
"""The most the default bound takes on the CPU (and MPS), where the cache's bytes are the process's resident set:
the stems keep what prompts share, so a larger bound mostly holds whole prompts nothing reads again. Measured on
pydocs at batch 8 (``docs/speed.md``, "Memory"): the 1.5B model's `sr-rag-choose` peaked at 4.10 GB with 1024 MiB,
3.86 GB with 512 and 3.70 GB with 256 (2.5% fewer prompt tokens from the cache at both); the 0.5B model's
`look-again-choose`, whose look re-reads its first prompt, read as many from the cache with 512 as with 1024
(21,409 and 21,412 of 40,395) but 8% fewer with 256."""

STEM_MIN = 64
"""The fewest tokens a shared prefix needs to be kept as a stem of its own."""


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
    memory available once the model is loaded (:func:`available_memory_bytes`), at most :data:`CPU_PREFIX_CACHE_MB`;
    on a CUDA GPU a fifth of its free memory, at most :data:`DEFAULT_PREFIX_CACHE_MB`; so the decoding sequences'
    KV keeps room (a machine with 1 GB available gets 128 MiB; where the memory available is unknown, the most)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return min(DEFAULT_PREFIX_CACHE_MB, free / 2**20 / 5)
    available = available_memory_bytes()
    return CPU_PREFIX_CACHE_MB if available is None else min(CPU_PREFIX_CACHE_MB, available / 2**20 / 8)


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
    stem: bool = False  # a prefix other prompts share, kept on its own (see the module docstring)

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
                # at an equal match the shorter entry (a stem): it is the one kept for this, keep it recent
                if n > best_len or (best is not None and n == best_len and len(entry.ids) < len(best.ids)):
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
        whole size. The longest prefix ``ids`` share with another entry that neither holds whole is kept as a stem
        (a copy of its size; see the module docstring)."""
        key = tuple(int(i) for i in ids)
        if len(key) < self.min_length or not kv:
            return
        if shared:
            nbytes = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in kv)
        else:
            nbytes = _nbytes([(k[:, :, : len(key)], v[:, :, : len(key)]) for k, v in kv])
        if nbytes > self.max_bytes:
            return
        with self._lock:
            stem = 0  # the longest prefix shared with an entry that neither holds whole
            for other in list(self._entries.values()):
                if other.namespace != namespace:
                    continue
                if len(other.ids) >= len(key) and other.ids[: len(key)] == key:
                    self._entries.move_to_end(other.key)  # a longer entry already covers these tokens
                    return
                if len(other.ids) < len(key) and key[: len(other.ids)] == other.ids:
                    if not other.stem:
                        self._drop(other)  # the new entry covers the shorter one
                    continue
                stem = max(stem, common_prefix_length(other.ids, key))
            if stem >= max(STEM_MIN, self.min_length) and (namespace, key[:stem]) not in self._entries:
                stem_kv = [(k[:, :, :stem].clone(), v[:, :, :stem].clone()) for k, v in kv]
                self._add(_Entry(key[:stem], stem_kv, _nbytes(stem_kv), namespace, stem=True))
            kv = [(k[:, :, : len(key)], v[:, :, : len(key)]) if shared else
                  (k[:, :, : len(key)].clone(), v[:, :, : len(key)].clone()) for k, v in kv]
            self._add(_Entry(key, kv, nbytes, namespace))

    def _add(self, entry: _Entry) -> None:
        """Hold ``entry`` (the most recent) and evict the least recently used beyond the bound."""
        if entry.nbytes > self.max_bytes:
            return
        self._entries[entry.key] = entry
        self._bytes += entry.nbytes
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
                "stems": sum(1 for e in self._entries.values() if e.stem),
                "mb": round(self._bytes / 2**20, 2),
                "max_mb": round(self.max_bytes / 2**20, 2),
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
            }


def _nbytes(kv: KV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


__all__ = ["CPU_PREFIX_CACHE_MB", "DEFAULT_PREFIX_CACHE_MB", "PrefixCache", "PrefixHit", "STEM_MIN",
           "available_memory_bytes", "common_prefix_length", "default_prefix_cache_mb"]
