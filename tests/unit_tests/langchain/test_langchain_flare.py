"""LangChain's own FlareChain (langchain-classic) on a local model: ChatActiveHF(...).bind(logprobs=True)
gives it the OpenAI-shaped token log-probabilities it reads, offline."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser

from langchain_active_rag import ChatActiveHF

flare = pytest.importorskip("langchain_classic.chains.flare.base", reason="langchain-classic is in the dev extra")
prompts = pytest.importorskip("langchain_classic.chains.flare.prompts")


class ChatRuns(BaseCallbackHandler):
    def __init__(self) -> None:
        self.ends: list[Any] = []

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(response.generations[0][0].message)


def flare_chain(chat: ChatActiveHF, retriever: Any, **kwargs: Any) -> Any:
    """FlareChain wired as ``FlareChain.from_llm`` does for ChatOpenAI, with a local chat model."""
    return flare.FlareChain(
        question_generator_chain=prompts.QUESTION_GENERATOR_PROMPT | chat | StrOutputParser(),
        response_chain=prompts.PROMPT | chat.bind(logprobs=True),
        retriever=retriever,
        **kwargs,
    )


def test_flare_chain_runs_on_chat_active_hf(tiny_lm, lc_retriever):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=8)
    chain = flare_chain(chat, lc_retriever, max_iter=2, min_prob=0.2)
    runs = ChatRuns()
    out = chain.invoke({"user_input": "Who is the father of Kasper Schmeichel?"}, {"callbacks": [runs]})
    assert isinstance(out["response"], str) and out["response"].strip()
    # a random model is unsure of every token: FLARE found low-confidence spans, asked the model for
    # questions about them, and retrieved with those questions
    assert lc_retriever.queries and all(isinstance(q, str) for q in lc_retriever.queries)
    generated = [m.content for m in runs.ends if "logprobs" not in m.response_metadata]
    assert lc_retriever.queries == [q for q in generated if q][: len(lc_retriever.queries)]
    scored = [m for m in runs.ends if "logprobs" in m.response_metadata]
    assert scored and all(
        "".join(e["token"] for e in m.response_metadata["logprobs"]["content"]) == m.content for m in scored
    )
