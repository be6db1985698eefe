"""Concurrent generations on one ActiveLM share batched forward passes (the decode scheduler); capture
state lives in per-call ContextVars. Threads generating at once get exactly the tokens of serial runs, and
their log-probs and attention rows up to the reduction order of batched matrix products (~1e-7)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from active_rag.decoding.attention import CAPTURE as _CAPTURE

PROMPTS = [
    "Who is Peter Schmeichel?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "Which Danish goalkeeper was voted the IFFHS World's Best Goalkeeper in 1992?",
    "Follow up: Who is he?",
]
N_TOKENS = 20


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The model is tiny: one intra-op thread per generation keeps the run fast on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def generate(lm, prompt: str, capture: bool, barrier: threading.Barrier | None = None):
    session = lm.session(lm.prompt_ids(prompt), capture_attention=capture)
    if barrier is not None:
        barrier.wait(timeout=30)  # all threads decode at the same time
    steps = list(session.generate(N_TOKENS))
    return steps, session.max_attention.clone()


def assert_same(a, b) -> None:
    (steps_a, amax_a), (steps_b, amax_b) = a, b
    assert [s.id for s in steps_a] == [s.id for s in steps_b]
    assert [s.text for s in steps_a] == [s.text for s in steps_b]
    assert [s.position for s in steps_a] == [s.position for s in steps_b]
    # a batch multiplies [B, hidden] matrices where a serial run multiplies [1, hidden]: same maths,
    # another summation order, so the floats agree to rounding and never change the chosen tokens
    assert [s.logprob for s in steps_a] == pytest.approx([s.logprob for s in steps_b], abs=1e-5)
    assert [s.entropy for s in steps_a] == pytest.approx([s.entropy for s in steps_b], abs=1e-5)
    for x, y in zip(steps_a, steps_b, strict=True):
        if x.attention is None or y.attention is None:
            assert x.attention is None and y.attention is None
        else:
            torch.testing.assert_close(x.attention, y.attention, atol=1e-6, rtol=0)
    torch.testing.assert_close(amax_a, amax_b, atol=1e-6, rtol=0)


def test_four_concurrent_generations_equal_serial_ones(tiny_lm) -> None:
    serial = [generate(tiny_lm, p, capture=True) for p in PROMPTS]
    assert len({tuple(s.id for s in steps) for steps, _ in serial}) == len(PROMPTS)  # really different runs
    assert all(len(steps) == N_TOKENS and steps[-1].attention is not None for steps, _ in serial)

    barrier = threading.Barrier(len(PROMPTS))
    scheduler = tiny_lm.scheduler
    calls, tokens = scheduler.forward_calls, scheduler.batched_tokens
    with ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
        futures = [pool.submit(generate, tiny_lm, p, True, barrier) for p in PROMPTS]
        concurrent = [f.result(timeout=120) for f in futures]
    for a, b in zip(serial, concurrent, strict=True):
        assert_same(a, b)
    # the four threads shared forward passes: far fewer calls than decode steps
    steps = scheduler.batched_tokens - tokens
    assert steps == len(PROMPTS) * (N_TOKENS + 1)  # + the last prompt token of each session
    assert scheduler.forward_calls - calls <= steps // 2
    assert _CAPTURE.get() is None  # nothing leaked into the calling context


def test_capture_on_and_off_generations_do_not_interfere(tiny_lm) -> None:
    jobs = [(p, capture) for p in PROMPTS[:2] for capture in (True, False)]
    serial = [generate(tiny_lm, p, c) for p, c in jobs]
    barrier = threading.Barrier(len(jobs))
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        concurrent = [f.result(timeout=120) for f in [pool.submit(generate, tiny_lm, p, c, barrier) for p, c in jobs]]
    for (p, c), a, b in zip(jobs, serial, concurrent, strict=True):
        assert_same(a, b)
        assert all((s.attention is not None) == c for s in b[0])


# -- async callers: cancelling stops decoding; concurrency is not the default executor's size (issue 25) ---
def test_a_cancelled_ainvoke_stops_decoding_at_the_next_step(tiny_model, tiny_tokenizer) -> None:
    import asyncio
    import threading

    from active_rag import ActiveLM, ActiveRAG
    from active_rag._aio import run_in_thread
    from active_rag.errors import RunCancelledError

    lm = ActiveLM(tiny_model, tiny_tokenizer, name="tiny")
    rag = ActiveRAG.from_preset("wo-rag", lm, None, max_new_tokens=1900)  # within the tiny model's 2048 positions
    steps: list[int] = []
    started, ended = threading.Event(), threading.Event()
    outcome: list[BaseException] = []
    original = lm.session

    def counting_session(ids, **kwargs):
        session = original(ids, **kwargs)
        inner = session.generate

        def generate(*args, **kw):
            try:
                for step in inner(*args, **kw):
                    steps.append(step.position)
                    started.set()
                    yield step
            except BaseException as exc:
                outcome.append(exc)
                raise
            finally:
                ended.set()

        session.generate = generate
        return session

    lm.session = counting_session

    async def main() -> None:
        task = asyncio.ensure_future(run_in_thread(rag.run, "Who is Peter?"))
        while not started.is_set() and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done(), task.exception()  # still decoding when cancelled
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    assert ended.wait(10)  # the worker stopped instead of decoding 1900 tokens for nobody
    assert 0 < len(steps) < 1000 and isinstance(outcome[0], RunCancelledError)


def test_async_concurrency_is_not_capped_by_the_default_executor() -> None:
    import asyncio
    import threading

    from active_rag._aio import aiter_in_thread, run_in_thread

    n = 24  # far more than a small machine's default executor (min(32, cores + 4) workers)
    barrier = threading.Barrier(2 * n, timeout=10)

    def meet() -> int:
        return barrier.wait()

    def stream():
        yield barrier.wait()

    async def one_stream() -> list[int]:
        return [i async for i in aiter_in_thread(stream)]

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*[run_in_thread(meet) for _ in range(n)],
                                              *[one_stream() for _ in range(n)]), timeout=20)

    asyncio.run(main())  # with a capped pool the barrier never fills: BrokenBarrierError after 10 s
