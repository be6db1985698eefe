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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from typing import Any

__all__ = ["trim_host_memory"]

_LOCK = threading.Lock()
_TRIM: list[Any] = []  # [function or None], resolved on the first call


def _malloc_trim() -> Any:
    if not _TRIM:
        with _LOCK:
            if not _TRIM:
                function = None
                if sys.platform.startswith("linux"):
                    try:
                        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                        function = getattr(libc, "malloc_trim", None)
                        if function is not None:
                            function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
                    except OSError:
                        function = None
                _TRIM.append(function)
    return _TRIM[0]


def trim_host_memory() -> bool:
    """Hand the C heap's free pages back to the machine; whether anything was handed back (``False`` also where
    there is no ``malloc_trim``)."""
    function = _malloc_trim()
    return bool(function(0)) if function is not None else False
