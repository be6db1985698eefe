"""The C heap's free pages go back to the machine after a prefill (``active_rag.decoding.host_memory``)."""

from __future__ import annotations

import sys

import pytest

from active_rag import ActiveLM
from active_rag.decoding import host_memory, model as model_module


def _resident_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or host_memory._malloc_trim() is None,
                    reason="glibc's malloc_trim (Linux)")
def test_free_heap_pages_between_live_blocks_go_back() -> None:
    """Blocks under the mmap threshold come from the heap: freeing every other one leaves their pages resident
    (a live block keeps the heap's top) until the trim hands them back."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    blocks = [libc.malloc(1 << 20) for _ in range(256)]  # 256 MiB in 1 MiB blocks, each touched
    try:
        for b in blocks:
            ctypes.memset(b, 1, 1 << 20)
        for b in blocks[:-1:2]:
            libc.free(b)
        before = _resident_kb()
        assert host_memory.trim_host_memory()
        assert before - _resident_kb() > 64 * 1024  # most of the 127 MiB freed went back
    finally:
        for b in blocks[1::2]:
            libc.free(b)


def test_a_prefill_on_the_cpu_trims_the_heap_and_a_decode_step_does_not(tiny_model, tiny_tokenizer,
                                                                        monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(model_module, "trim_host_memory", lambda: calls.append(1) or True)
    lm = ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False)
    session = lm.session(list(range(5, 40)))
    assert calls == [1]  # the prompt's prefill
    session.generate(3)
    assert calls == [1]  # one-token steps allocate no activations worth trimming
