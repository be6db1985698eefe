"""LangChain's ``batch``/``abatch`` and concurrent ``ainvoke`` calls on one model share forward passes through
the engine's decode scheduler, with the answers of one-at-a-time calls."""

from __future__ import annotations

import asyncio

from active_rag import ActiveLM
from langchain_active_rag import ActiveRAG

QUESTIONS = [
    "Who is Peter Schmeichel?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "Which Danish goalkeeper was voted the IFFHS World's Best Goalkeeper in 1992?",
    "Is Kasper Schmeichel a goalkeeper?",
]


def _shared(lm: ActiveLM, run) -> tuple[list[str], int, int]:
    calls, tokens = lm.scheduler.forward_calls, lm.scheduler.batched_tokens
    answers = run()
    return answers, lm.scheduler.forward_calls - calls, lm.scheduler.batched_tokens - tokens


def test_batch_and_concurrent_ainvoke_share_forward_passes(tiny_model, tiny_tokenizer, bm25_retriever) -> None:
    lm = ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False)
    rag = ActiveRAG(lm, bm25_retriever, preset="sr-rag", max_new_tokens=16)
    serial = [rag.invoke(q)["answer"] for q in QUESTIONS]

    batched, calls, steps = _shared(lm, lambda: [o["answer"] for o in rag.batch(QUESTIONS, config={"max_concurrency": 4})])
    assert batched == serial
    assert calls <= steps / 2  # four questions per forward pass most of the time

    async def gather() -> list[str]:
        outs = await asyncio.gather(*(rag.ainvoke(q) for q in QUESTIONS))
        return [o["answer"] for o in outs]

    # each ainvoke decodes in its own thread: under a loaded CPU a thread can start a few steps late and decode
    # them alone, so the async paths are held to "mostly shared" (serial decoding would make calls == steps)
    concurrent, calls, steps = _shared(lm, lambda: asyncio.run(gather()))
    assert concurrent == serial
    assert calls <= 0.75 * steps

    abatched, calls, steps = _shared(lm, lambda: [o["answer"] for o in asyncio.run(rag.abatch(QUESTIONS))])
    assert abatched == serial
    assert calls <= 0.75 * steps
