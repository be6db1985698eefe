"""Batched active decoding (issue 10): ``run_batch``/``stream_batch`` and concurrent callers share one
batched forward per decoding step, and give the serial runs' tokens and retrieval traces."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from active_rag import ActiveLM, ActiveRAG, Passage
from active_rag.errors import BatchError, InvalidOptionError, RetrieverError
from active_rag.components.presets import PRESETS
from active_rag.types import ActiveRAGResult, Retrieval, TokenEvent

QUESTIONS = [
    "Who is Peter Schmeichel?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "Which Danish goalkeeper was voted the IFFHS World's Best Goalkeeper in 1992?",
    "Follow up: Who is he?",
    "Is Kasper Schmeichel a goalkeeper?",
]


class HashRetriever:
    """Deterministic passages from the query text (the same under any thread interleaving)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.lock = threading.Lock()
        self.calls = 0

    def retrieve(self, query: str, k: int) -> list[Passage]:
        with self.lock:
            self.calls += 1
        if self.fail_on is not None and self.fail_on in query:
            raise ConnectionError("search server unreachable")
        h = sum(map(ord, query))
        return [Passage(id=f"d{(h + i) % 7}", title=f"T{(h + i) % 7}", text=f"Passage {(h + i) % 7}: {query[:30]}") for i in range(k)]


class TogetherRetriever(HashRetriever):
    """HashRetriever that holds each question's first retrieval until ``parties`` questions have asked, so that
    they are in flight together whatever the threads' start-up timing (the passages are HashRetriever's)."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties)
        self.asked: set[str] = set()

    def retrieve(self, query: str, k: int) -> list[Passage]:
        with self.lock:
            first = query not in self.asked
            self.asked.add(query)
        if first:
            self.barrier.wait(timeout=30)
        return super().retrieve(query, k)


def finish_early(text: str) -> bool:
    """Stops some answers early (depends on the text only), so sequences leave the batch at different steps."""
    return len(text) > 12 + sum(map(ord, text[:4])) % 40


def trace(result: ActiveRAGResult):
    return (
        result.answer,
        [t.id for t in result.tokens],
        [(r.position, r.query, [p.id for p in r.passages]) for r in result.retrievals],
        [d.fire for d in result.decisions],
    )


@pytest.fixture(scope="module")
def lm(tiny_model, tiny_tokenizer) -> ActiveLM:
    torch.set_num_threads(1)
    return ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_batched_equals_serial_for_every_preset(lm, preset) -> None:
    """Five questions with batch size 3: some retrieve, some stop early, the waiting ones join."""
    # no forced answer phrase: the random model writes no sentence, so every answer would end as the same forced one
    make = lambda: ActiveRAG.from_preset(preset, lm, HashRetriever(), max_new_tokens=32, stop=finish_early,  # noqa: E731
                                         answer_phrase=None)
    serial = [trace(make().run(q)) for q in QUESTIONS]
    calls = lm.scheduler.forward_calls
    batched = make().run_batch(QUESTIONS, batch_size=3)
    assert [trace(r) for r in batched] == serial
    steps = sum(len(s[1]) for s in serial)
    if PRESETS[preset].context == "replace":
        # forward passes were shared (with "accumulate" this random model, which retrieves at every check,
        # spends its time prefilling prompts of six passages, so its sequences seldom decode at the same step)
        assert lm.scheduler.forward_calls - calls < steps
    if preset in ("dragin", "flare", "fl-rag"):
        assert any(s[2] for s in serial)  # these runs really retrieve
    if preset != "flare-instruct":  # (its long instruction makes the tiny model write the same for all)
        assert len({len(s[1]) for s in serial}) > 1  # sequences finish at different steps


def test_stream_batch_interleaves_and_keeps_each_questions_order(lm) -> None:
    # every question's first event is its retrieval with the question, held until all three have asked
    rag = ActiveRAG.from_preset("fl-rag", lm, TogetherRetriever(3), max_new_tokens=24)
    per_question: dict[int, list[object]] = {}
    order: list[int] = []
    for index, event in rag.stream_batch(QUESTIONS[:3], batch_size=3):
        per_question.setdefault(index, []).append(event)
        order.append(index)
    assert set(per_question) == {0, 1, 2}
    assert len(set(order[:12])) > 1  # questions advance together, not one after the other
    for index, events in per_question.items():
        assert isinstance(events[-1], ActiveRAGResult)
        serial = list(ActiveRAG.from_preset("fl-rag", lm, HashRetriever(), max_new_tokens=24).stream(QUESTIONS[index]))
        kinds = lambda evs: [(type(e).__name__, getattr(e, "text", None), getattr(e, "query", None)) for e in evs]  # noqa: E731
        assert kinds(events) == kinds(serial)


def test_a_failing_retriever_fails_its_question_alone(lm) -> None:
    rag = ActiveRAG.from_preset("sr-rag", lm, HashRetriever(fail_on="Derrickson"), max_new_tokens=16)
    results = rag.run_batch(QUESTIONS, batch_size=4, return_exceptions=True)
    assert isinstance(results[1], RetrieverError) and "search server unreachable" in str(results[1])
    assert all(isinstance(r, ActiveRAGResult) and r.answer for i, r in enumerate(results) if i != 1)
    with pytest.raises(BatchError) as info:
        rag.run_batch(QUESTIONS, batch_size=4)
    assert [i for i, _ in info.value.failures] == [1]
    assert "1 of 5 questions failed" in str(info.value)
    assert isinstance(info.value.results[0], ActiveRAGResult)


def test_concurrent_async_callers_share_forward_passes(lm) -> None:
    rag = ActiveRAG.from_preset("wo-rag", lm, max_new_tokens=20)
    serial = [trace(rag.run(q)) for q in QUESTIONS[:4]]
    calls, tokens = lm.scheduler.forward_calls, lm.scheduler.batched_tokens

    async def main() -> list[ActiveRAGResult]:
        return await asyncio.gather(*(asyncio.to_thread(rag.run, q) for q in QUESTIONS[:4]))

    results = asyncio.run(main())
    assert [trace(r) for r in results] == serial
    steps = lm.scheduler.batched_tokens - tokens
    assert lm.scheduler.forward_calls - calls <= steps / 2  # mostly batches of 3-4
    assert lm.scheduler.max_batch_seen >= 3


def test_cancelling_a_streaming_caller_frees_its_slot(lm) -> None:
    rag = ActiveRAG.from_preset("fl-rag", lm, HashRetriever(), max_new_tokens=200)
    stream = rag.stream(QUESTIONS[0])
    for event in stream:
        if isinstance(event, TokenEvent) and event.position >= 3:
            break
    stream.close()
    assert lm.scheduler.active == 0
    # a batch closed early stops every question at its next event: slots and worker threads are freed
    batch = rag.stream_batch(QUESTIONS, batch_size=3)
    seen = 0
    for _, event in batch:
        seen += isinstance(event, TokenEvent)
        if seen >= 6:
            break
    batch.close()
    for _ in range(200):
        workers = [t for t in threading.enumerate() if t.name.startswith("active-rag")]
        if lm.scheduler.active == 0 and not workers:
            break
        threading.Event().wait(0.05)
    assert lm.scheduler.active == 0 and not workers
    # and the model serves the next caller at once
    assert rag.run(QUESTIONS[1]).answer


def test_retrievals_stream_before_the_tokens_they_enable_in_a_batch(lm) -> None:
    rag = ActiveRAG.from_preset("sr-rag", lm, HashRetriever(), max_new_tokens=8)
    first_kind: dict[int, str] = {}
    for index, event in rag.stream_batch(QUESTIONS[:2], batch_size=2):
        if isinstance(event, (Retrieval, TokenEvent)):
            first_kind.setdefault(index, type(event).__name__)
    assert first_kind == {0: "Retrieval", 1: "Retrieval"}


@pytest.mark.parametrize("bad", [0, -2, 1.5, "8"])
def test_bad_batch_size_is_a_clear_error(lm, bad) -> None:
    rag = ActiveRAG.from_preset("wo-rag", lm, max_new_tokens=4)
    with pytest.raises(InvalidOptionError, match="batch_size"):
        rag.run_batch(QUESTIONS, batch_size=bad)


def test_choice_questions_batched_equal_serial_with_answer_options(lm) -> None:
    """The options constraint is per question: in a batch, each choice question gets its own options."""
    questions = ["Who is older, Annie Morton or Terry Richardson?", "Which came first, Glow or Sleep, My Love?",
                 "Who directed Glow?", "Was David Fennario or Peter Falck born first?"]
    make = lambda: ActiveRAG.from_preset("sr-rag", lm, HashRetriever(), max_new_tokens=24,  # noqa: E731
                                         answer_phrase="So the answer is", answer_options=True)
    serial = [trace(make().run(q)) for q in questions]
    assert [trace(r) for r in make().run_batch(questions, batch_size=3)] == serial
    assert serial[0][0].endswith(("Annie Morton.", "Terry Richardson.", "Annie Morton", "Terry Richardson"))
    assert serial[3][0].endswith(("David Fennario.", "Peter Falck.", "David Fennario", "Peter Falck"))
