"""GPU memory bounded (issue 25): the decode scheduler admits steps by their KV bytes and queues the rest, and an
out-of-memory error in a batched forward fails only the sequences that run out of memory alone, with
:class:`~active_rag.errors.DecodeOutOfMemoryError`, never changing the other sequences' tokens. The faults are
injected in the forward of tiny random Llamas built here."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from active_rag import ActiveLM, DecodeOutOfMemoryError
from active_rag.decoding.admission import (
    DEFAULT_KV_BUDGET_MB,
    admit,
    batch_cost,
    default_kv_budget_bytes,
    is_out_of_memory,
    kv_bytes_per_token,
)
from active_rag.decoding.attention import RAGGED
from active_rag.errors import ActiveRAGError
from tests.unit_tests.test_model import _shared_conftest as _conftest  # tests/conftest.py, loaded by path


PROMPTS = ["Who is Peter?", "Is Kasper a goalkeeper?", "Ed Wood was an American filmmaker. Who was he?", "Hi"]
LONG = "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993. " * 3 + "Who is his son?"


@pytest.fixture(scope="module")
def lm(tiny_tokenizer: Any) -> ActiveLM:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=7, layers=3)
    return ActiveLM(model, tiny_tokenizer, name="tiny-admission", prefix_cache=False)


def _serial(lm: ActiveLM, ids: list[int], n: int) -> list[int]:
    return [s.id for s in lm.session(ids).generate(n)]


def _together(lm: ActiveLM, prompts: Sequence[list[int]], n: int, fault: _OutOfMemory | None = None) -> list[list[int] | BaseException]:
    """Decode every prompt at once from its own thread (the scheduler batches their steps); ``fault`` is armed once
    the prompts are read."""
    sessions = [lm.session(ids) for ids in prompts]
    if fault is not None:
        fault.armed = True
    results: list[list[int] | BaseException] = [[] for _ in sessions]
    start = threading.Barrier(len(sessions))

    def work(i: int) -> None:
        start.wait()
        try:
            results[i] = [s.id for s in sessions[i].generate(n)]
        except BaseException as exc:  # noqa: BLE001 - collected for the assertions
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a decoding thread hung"
    for s in sessions:  # every layer of every cache holds the same positions: nothing half-appended
        assert len({layer.keys.shape[-2] for layer in s._cache.layers}) == 1
    return results


# -- the estimate and the admission rule -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_bytes_per_token_is_what_the_cache_holds(tiny_tokenizer: Any, dtype: torch.dtype) -> None:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=1, layers=3).to(dtype)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny", prefix_cache=False, batching=False)
    ids = lm.prompt_ids("Who is Peter Schmeichel?")
    session = lm.session(ids)
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in session._cache.layers)
    per_token = kv_bytes_per_token(model)
    assert per_token == 3 * 2 * 16 * 2 * (4 if dtype == torch.float32 else 2)  # layers x kv heads x head dim x 2 x bytes
    assert held == per_token * len(ids)


def test_admit_takes_the_first_steps_whose_padded_kv_fits() -> None:
    assert admit([10, 10, 10, 10], 100, budget=3_000, max_batch=64) == 3
    assert admit([10, 10, 10, 10], 100, budget=10**9, max_batch=2) == 2
    assert admit([50, 10, 10], 100, budget=1_000, max_batch=64) == 1  # larger than the budget alone: runs alone
    assert admit([10, 40, 10], 100, budget=7_000, max_batch=64) == 1  # padded: 2 x 40 tokens do not fit
    assert admit([10, 10], 0, budget=0, max_batch=64) == 2  # no estimate: by count only
    assert batch_cost([10, 40, 10], 100) == 12_000


def test_default_budget_is_documented_on_the_cpu_and_half_the_free_memory_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_kv_budget_bytes(torch.device("cpu")) == int(DEFAULT_KV_BUDGET_MB * 2**20)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * 2**30, 80 * 2**30))
    assert default_kv_budget_bytes(torch.device("cuda:0")) == 4 * 2**30


def test_out_of_memory_errors_are_recognised() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert not is_out_of_memory(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only the device's own error types
    error = DecodeOutOfMemoryError("x")
    assert isinstance(error, ActiveRAGError) and isinstance(error, MemoryError)


def test_steps_beyond_the_budget_wait_for_the_next_forward_and_decode_the_same(
        lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = [lm.prompt_ids(p) for p in PROMPTS]
    clean = [_serial(lm, ids, 8) for ids in prompts]
    scheduler = lm.scheduler
    assert scheduler is not None
    per_token = scheduler.kv_bytes_per_token
    budget = 2 * (max(len(ids) for ids in prompts) + 8) * per_token  # about two sequences a forward
    held_back = scheduler.held_back
    costs: list[tuple[int, int]] = []  # (batch size, padded KV bytes) of every forward
    forward = scheduler._forward

    def spy(batch: list[Any]) -> None:
        costs.append((len(batch), batch_cost([r.position + 1 for r in batch], per_token)))
        forward(batch)

    monkeypatch.setattr(scheduler, "_forward", spy)
    monkeypatch.setattr(scheduler, "kv_budget_bytes", budget)
    results = _together(lm, prompts, 8)
    assert results == clean
    assert all(cost <= budget for size, cost in costs if size > 1)
    assert max(size for size, _ in costs) >= 2 and len(costs) > 7  # batched, but never all four at once
    assert max(size for size, _ in costs) < 4 and scheduler.held_back > held_back


# -- out of memory in a batched forward ------------------------------------------------------------------------
class _OutOfMemory:
    """Raises ``make(message)`` in the pre-hook of layer 1 (layer 0 has appended the step's keys/values) of a batched
    forward for which ``when(sequence lengths)`` holds."""

    def __init__(self, model: Any, when: Callable[[list[int]], bool], make: Callable[[str], BaseException]) -> None:
        self.when, self.make, self.raised, self.armed = when, make, 0, False
        self.handle = model.model.layers[1].register_forward_pre_hook(self._hook)

    def _hook(self, *args: Any) -> None:
        batch = RAGGED.get()
        if batch is None or not self.armed:
            return
        lengths = [cache.get_seq_length() for cache in batch.caches]
        if self.when(lengths):
            self.raised += 1
            raise self.make("injected: CUDA out of memory. Tried to allocate 20.00 GiB")


@pytest.mark.parametrize("make", [torch.OutOfMemoryError, RuntimeError], ids=["OutOfMemoryError", "RuntimeError"])
def test_out_of_memory_fails_only_the_sequence_that_causes_it(
        lm: ActiveLM, make: Callable[[str], BaseException], monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = [lm.prompt_ids(p) for p in PROMPTS[:3]] + [lm.prompt_ids(LONG)]
    threshold = max(len(ids) for ids in prompts[:3]) + 20
    assert len(prompts[3]) > threshold
    clean = [_serial(lm, ids, 8) for ids in prompts[:3]]
    scheduler = lm.scheduler
    assert scheduler is not None
    failures = scheduler.oom_failures
    monkeypatch.setattr(scheduler, "kv_budget_bytes", default_kv_budget_bytes(torch.device("cpu")))
    fault = _OutOfMemory(lm.model, lambda lengths: max(lengths) > threshold, make)  # the long sequence does not fit
    try:
        results = _together(lm, prompts, 8, fault)
    finally:
        fault.handle.remove()
    assert results[:3] == clean  # the others: every token as decoded alone
    error = results[3]
    assert isinstance(error, DecodeOutOfMemoryError) and isinstance(error.__cause__, make)  # type: ignore[arg-type]
    assert "ran out of memory" in str(error) and "even alone" in str(error) and "other sequences" in str(error)
    assert fault.raised >= 1 and scheduler.oom_failures == failures + 1


def test_an_out_of_memory_that_no_sequence_causes_alone_is_retried_in_halves(
        lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = [lm.prompt_ids(p) for p in PROMPTS]
    clean = [_serial(lm, ids, 6) for ids in prompts]
    scheduler = lm.scheduler
    assert scheduler is not None
    retries, failures = scheduler.oom_retries, scheduler.oom_failures
    monkeypatch.setattr(scheduler, "kv_budget_bytes", default_kv_budget_bytes(torch.device("cpu")))
    fault = _OutOfMemory(lm.model, lambda lengths: len(lengths) >= 3, torch.OutOfMemoryError)  # too many at once
    try:
        results = _together(lm, prompts, 6, fault)
    finally:
        fault.handle.remove()
    assert results == clean
    assert scheduler.oom_retries > retries and scheduler.oom_failures == failures
    # the budget dropped to half the failed forward's KV: later forwards stopped hitting the wall at every step
    assert fault.raised <= 2 and scheduler.kv_budget_bytes < default_kv_budget_bytes(torch.device("cpu"))


def test_any_other_fault_still_fails_the_whole_forward(lm: ActiveLM) -> None:
    prompts = [lm.prompt_ids(p) for p in PROMPTS[:2]]
    fault = _OutOfMemory(lm.model, lambda lengths: True, lambda m: RuntimeError("CUDA error: an illegal memory access"))
    try:
        results = _together(lm, prompts, 3, fault)
    finally:
        fault.handle.remove()
    assert all(isinstance(r, RuntimeError) and not isinstance(r, DecodeOutOfMemoryError) for r in results)
