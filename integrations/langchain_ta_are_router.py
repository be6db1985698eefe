"""Recipe: a TA-ARE router in front of DRAGIN and a plain answer chain (ChatActiveHF).

    python integrations/langchain_ta_are_router.py

The model first decides, with TA-ARE's time-aware prompt (Zhang et al. 2024), whether the question
needs retrieval; "[Yes]" runs DRAGIN over the BM25 demo index, "[No]" answers directly with the chat
model. The route (decision and the model's raw output) is in every result and in the
``active_rag.route`` event.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

from active_rag import ActiveLM, BM25Index
from langchain_active_rag import ActiveRAG, BM25sRetriever, ChatActiveHF, TaAreRouter

DEFAULT_QUESTIONS = (
    "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?",
    "What is the capital of France?",
)


def as_question(value: Any) -> dict[str, str]:
    """Both a string and {"question": ...} become {"question": ...}."""
    return value if isinstance(value, dict) else {"question": value}


def build_router(
    lm: ActiveLM, *, retriever: Any = None, today: dt.date | str | None = None, max_new_tokens: int = 48, preset: str = "dragin"
) -> Runnable:
    chat = ChatActiveHF(lm=lm, max_tokens=max_new_tokens)
    retriever = retriever or BM25sRetriever.from_index(BM25Index.demo())
    dragin = ActiveRAG(lm, retriever, preset=preset, max_new_tokens=max_new_tokens)
    prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
    direct = RunnableLambda(as_question) | prompt | chat | StrOutputParser()
    return TaAreRouter(chat, retrieve=dragin, direct=direct, mode="ta-are", today=today)


def main(
    model: Any = None,
    questions: tuple[str, ...] | list[str] = DEFAULT_QUESTIONS,
    *,
    max_new_tokens: int = 48,
    preset: str = "dragin",
) -> list[dict[str, Any]]:
    """Route and answer each question; print and return the outputs."""
    lm = model if model is not None and not isinstance(model, str) else ActiveLM.load(model or "smollm2")
    router = build_router(lm, max_new_tokens=max_new_tokens, preset=preset)
    outputs = router.batch([{"question": q} for q in questions])
    for q, out in zip(questions, outputs, strict=True):
        route = out["route"]
        answer = out.get("answer", out.get("output"))
        where = f"DRAGIN, {len(out['trace'])} retrieval(s)" if route["retrieve"] else "direct"
        print(f"Q: {q}\n  route: {'retrieve' if route['retrieve'] else 'no retrieval'} "
              f"({route['router']} said {route['raw_output'].strip()!r}) -> {where}\n  A: {str(answer).strip()}")
    return outputs


if __name__ == "__main__":
    main()
