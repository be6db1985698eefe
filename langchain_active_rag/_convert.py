"""Conversions between LangChain objects and the engine's plain types (no logic of the methods here)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document

from active_rag import ActiveLM, Passage

#: Metadata keys written on Documents made from engine passages.
_PASSAGE_KEYS = ("id", "title", "score")


def document_id(doc: Document) -> str:
    """The passage id of a Document: ``doc.id``, else ``metadata["id"]``, else a stable hash of the content."""
    if doc.id:
        return str(doc.id)
    meta_id = (doc.metadata or {}).get("id")
    if meta_id is not None and str(meta_id):
        return str(meta_id)
    return "sha1-" + hashlib.sha1(doc.page_content.encode("utf-8")).hexdigest()[:16]


def document_to_passage(doc: Document, *, pid: str | None = None) -> Passage:
    """An engine :class:`~active_rag.Passage` for a Document (title from ``metadata["title"]``)."""
    if not isinstance(doc, Document):
        raise TypeError(
            f"The retriever returned a {type(doc).__name__}, not a langchain_core.documents.Document: a LangChain "
            "retriever must return a list of Documents."
        )
    meta = dict(doc.metadata or {})
    title = meta.get("title")
    score = meta.get("score")
    return Passage(
        id=pid or document_id(doc),
        text=doc.page_content,
        title=str(title) if title is not None else "",
        score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
        metadata=meta,
    )


def passage_to_document(passage: Passage) -> Document:
    """A Document for an engine passage: ``id`` set, and id/title/score copied into the metadata."""
    meta = {k: v for k, v in passage.metadata.items() if k not in _PASSAGE_KEYS}
    meta.update(id=passage.id, title=passage.title)
    if passage.score is not None:
        meta["score"] = passage.score
    return Document(page_content=passage.text, id=passage.id, metadata=meta)


def question_of(value: Any) -> Any:
    """The question in a runnable input: a string, or the ``"question"`` key of a mapping.

    Returns the raw value (possibly empty) so the engine raises its own ``EmptyQuestionError``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "question" in value:
            return value["question"]
        raise ValueError(
            f"The input mapping has no 'question' key (keys: {sorted(map(str, value))}): pass a string or "
            "{'question': '...'}."
        )
    raise TypeError(f"Expected a question string or {{'question': ...}}, got {type(value).__name__}.")


def resolve_lm(model: Any, weights: str = "auto", tokenizer: Any = None) -> Any:
    """An :class:`~active_rag.ActiveLM` from an ActiveLM, a ``ChatActiveHF`` or a registry name / path (loaded
    with ``weights``); or the :class:`~active_rag.remote.lm.RemoteLM` of a chat model served by an OpenAI-compatible
    endpoint (``ChatOpenAI(base_url=..., logprobs=True)``, ``ChatOllama``), with ``tokenizer`` (the
    served model's tokenizer or registry name) when given."""
    from active_rag.remote.lm import RemoteLM
    from active_rag.remote.clients import is_remote_client, remote_from_client

    if isinstance(model, (ActiveLM, RemoteLM)):
        return model
    if getattr(model, "active_lm", None) is None and not isinstance(model, str) and is_remote_client(model):
        return remote_from_client(model, tokenizer)
    active_lm = getattr(model, "active_lm", None)
    if isinstance(active_lm, ActiveLM):
        return active_lm
    if isinstance(model, str):
        from .chat_models import load_active_lm

        return load_active_lm(model, weights)
    raise TypeError(
        f"Expected an active_rag.ActiveLM, a ChatActiveHF, a model name or a served chat model (ChatOpenAI(base_url=..., "
        f"logprobs=True)), got {type(model).__name__}: build one with ActiveLM.load('smollm2') or ActiveLM(hf_model, hf_tokenizer)."
    )
