"""LangChain integration of active-rag: active retrieval-augmented generation as LangChain components.

Everything delegates to the framework-neutral engine :mod:`active_rag`:

- :class:`ActiveRAG`: the active retrieval loop (DRAGIN, FLARE, FL-RAG, ...) as a Runnable over any
  LangChain retriever; streams AddableDict chunks that add up to its output, reports the generation as
  chat-model runs and dispatches ``active_rag.*`` custom events.
- :class:`TaAreRouter`: TA-ARE (or vanilla) routing between a retrieval chain and a direct chain.
- :class:`TriggerRunnable`, :class:`QueryRunnable`: triggers and query formulators as LCEL components.
- :class:`ChatActiveHF`: a chat model over :class:`active_rag.ActiveLM` (logprobs, token streaming).
- :class:`BM25sRetriever`: the engine's bm25s index as a retriever.
- :class:`MiniLMEmbeddings`: offline all-MiniLM-L6-v2 embeddings (for Chroma and other vector stores).
- :func:`attach_name_index`: the name index of a retriever's Documents, for one whose documents the adapter cannot
  list (Chroma, in-memory stores and BM25 retrievers get theirs without it).

With the ``langgraph`` extra, :mod:`langchain_active_rag.graph` builds the same methods as a LangGraph graph (route,
generate, retrieve and answer nodes; streaming, checkpointers, a human before each retrieval); it is imported on its
own (``from langchain_active_rag.graph import build_graph``), not from here.
"""

from .adapter import RetrieverAdapter, attach_name_index
from .chain import ActiveRAG, ActiveRAGInput, ActiveRAGOutput, paired_query
from .chat_models import ChatActiveHF
from .components import QueryRunnable, TriggerRunnable
from .embeddings import MiniLMEmbeddings
from .events import DECISION_EVENT, RETRIEVAL_EVENT, ROUTE_EVENT, TOKEN_EVENT
from .retrievers import BM25sRetriever
from .router import TaAreRouter

__all__ = [
    "ActiveRAG",
    "ActiveRAGInput",
    "ActiveRAGOutput",
    "BM25sRetriever",
    "ChatActiveHF",
    "MiniLMEmbeddings",
    "QueryRunnable",
    "DECISION_EVENT",
    "RETRIEVAL_EVENT",
    "ROUTE_EVENT",
    "TOKEN_EVENT",
    "RetrieverAdapter",
    "TaAreRouter",
    "TriggerRunnable",
    "attach_name_index",
    "paired_query",
]
