"""Give the C heap's free pages back to the machine after a prefill (glibc's ``malloc_trim``).

A prefill allocates a prompt's activations, layer after layer (12 MB a hidden state for 2,000 tokens of the 1.5B
model), beside the KV tensors that outlive it. glibc serves allocations under its mmap threshold (which grows to
32 MB once such a block is freed) from its heap, and a freed block between two live ones stays resident: in an
``eval`` of the 1.5B model at batch 8 the process's peak resident set was 5.9 GB for about 4.2 GB live
(``MALLOC_MMAP_THRESHOLD_=1048576``, every block of a megabyte or more mapped on its own, peaked at 4.2 GB but
cost 13% of the time: each prefill faults its activations in again). :func:`trim_host_memory` asks glibc to hand
the free pages of its heaps back (``malloc_trim(0)``: the top of each heap and, since glibc 2.8, whole free pages
inside it) once a prefill is done, when the activations have just been freed; elsewhere (macOS, musl, Windows) it
does nothing.

Within a prefill the same blocks come back layer after layer (a 470-token chunk of the 1.5B model: 34 MB for the
MLP's gate and up outputs, 17 MB for its product), and glibc's defaults hand them back between layers: a block
over the mmap threshold (at most 32 MB) is unmapped when freed, and a free top of the heap over the trim threshold
is trimmed, so the next layer faults the same pages in again (a page fault a 4 KB page, inside the kernels' and
SiLU's time). :func:`hold_prefill_heap`, called before the first CPU prefill, raises both thresholds
(:data:`HELD_BYTES`), so those blocks stay in the heap for the prefill and :func:`trim_host_memory` hands them back
after it as before. Measured on a 2-core EPYC without AMX (``results/bench/prefill-heap/``): a 939-token prefill of
the 1.5B model 104-123 -> 135-140 tokens a second, the same peak resident set. ``ACTIVE_RAG_HEAP=glibc`` keeps
glibc's own thresholds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from typing import Any

from ..errors import InvalidOptionError

__all__ = ["HEAP_VARIABLE", "HELD_BYTES", "hold_prefill_heap", "trim_host_memory"]

HEAP_VARIABLE = "ACTIVE_RAG_HEAP"
"""Environment variable: ``hold`` (the default: :func:`hold_prefill_heap` raises glibc's thresholds) or ``glibc``
(glibc's own thresholds)."""
HELD_BYTES = 1 << 30
"""The mmap and trim thresholds :func:`hold_prefill_heap` sets: blocks under 1 GiB come from the heap, and only
:func:`trim_host_memory` (after each prefill) trims it."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h

_LOCK = threading.Lock()
_TRIM: list[Any] = []  # [function or None], resolved on the first call
_HELD: list[bool] = []  # [whether the thresholds were raised], set on the first call


def _libc_function(name: str, argtypes: list[Any]) -> Any:
    """glibc's function ``name`` (``restype`` int), or None off Linux or where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    function = getattr(libc, name, None)
    if function is not None:
        function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


def _malloc_trim() -> Any:
    if not _TRIM:
        with _LOCK:
            if not _TRIM:
                _TRIM.append(_libc_function("malloc_trim", [ctypes.c_size_t]))
    return _TRIM[0]


def heap_policy() -> str:
    """:data:`HEAP_VARIABLE`'s value: ``hold`` (the default) or ``glibc``; for any other value
    :class:`~active_rag.errors.InvalidOptionError` (a ``ValueError``, exit code 2 from the CLI) naming the variable."""
    choice = os.environ.get(HEAP_VARIABLE, "").strip().lower() or "hold"
    if choice not in ("hold", "glibc"):
        raise InvalidOptionError(f"{HEAP_VARIABLE} must be hold or glibc, got {choice!r}")
    return choice


def hold_prefill_heap() -> bool:
    """Raise glibc's mmap and trim thresholds to :data:`HELD_BYTES` once in the process (the module docstring), unless
    :data:`HEAP_VARIABLE` is ``glibc``; whether they are raised (``False`` where there is no ``mallopt``)."""
    if not _HELD:
        with _LOCK:
            if not _HELD:
                held = False
                if heap_policy() == "hold":
                    mallopt = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])
                    if mallopt is not None:
                        held = bool(mallopt(_M_MMAP_THRESHOLD, HELD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, HELD_BYTES))
                _HELD.append(held)
    return _HELD[0]


def trim_host_memory() -> bool:
    """Hand the C heap's free pages back to the machine; whether anything was handed back (``False`` also where
    there is no ``malloc_trim``)."""
    function = _malloc_trim()
    return bool(function(0)) if function is not None else False
