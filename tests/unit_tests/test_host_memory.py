"""The C heap's free pages go back to the machine after a prefill (``active_rag.decoding.host_memory``)."""

from __future__ import annotations

import sys

import pytest

from active_rag import ActiveLM
from active_rag.decoding import host_memory, model as model_module
from active_rag.errors import InvalidOptionError


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


@pytest.mark.skipif(not sys.platform.startswith("linux") or host_memory._malloc_trim() is None,
                    reason="glibc's malloc_trim and mallopt (Linux)")
def test_a_held_heap_keeps_a_freed_prefill_block_until_the_trim(monkeypatch) -> None:
    """With glibc's defaults a block over 32 MB is mapped on its own and unmapped when freed (the next layer faults
    it in again); held, it stays in the heap until the trim after the prefill hands it back."""
    import ctypes

    monkeypatch.delenv(host_memory.HEAP_VARIABLE, raising=False)
    monkeypatch.setattr(host_memory, "_HELD", [])
    assert host_memory.hold_prefill_heap()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    size = 48 << 20
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    touched = _resident_kb()
    libc.free(block)
    assert touched - _resident_kb() < 16 * 1024  # still resident: the next layer's block reuses these pages
    assert host_memory.trim_host_memory()
    assert touched - _resident_kb() > 32 * 1024  # handed back after the prefill


def test_heap_policy_glibc_leaves_glibc_thresholds_and_a_bad_value_names_the_variable(monkeypatch) -> None:
    calls: list[tuple[str, list[object]]] = []
    monkeypatch.setattr(host_memory, "_libc_function", lambda name, argtypes: calls.append((name, argtypes)))
    monkeypatch.setattr(host_memory, "_HELD", [])
    monkeypatch.setenv(host_memory.HEAP_VARIABLE, "glibc")
    assert host_memory.hold_prefill_heap() is False
    assert calls == []  # mallopt never looked up
    monkeypatch.setattr(host_memory, "_HELD", [])
    monkeypatch.setenv(host_memory.HEAP_VARIABLE, "large")
    with pytest.raises(InvalidOptionError, match="ACTIVE_RAG_HEAP must be hold or glibc"):
        host_memory.hold_prefill_heap()


def test_a_cpu_prefill_holds_the_heap_before_its_forward_and_a_decode_step_does_not(tiny_model, tiny_tokenizer,
                                                                                      monkeypatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(model_module, "hold_prefill_heap", lambda: events.append("hold") or True)
    monkeypatch.setattr(model_module, "trim_host_memory", lambda: events.append("trim") or True)
    lm = ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False)
    session = lm.session(list(range(5, 40)))
    assert events == ["hold", "trim"]
    session.generate(3)
    assert events == ["hold", "trim"]
