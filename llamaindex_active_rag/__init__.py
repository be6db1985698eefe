"""LlamaIndex integration of active-rag: active retrieval-augmented generation as LlamaIndex components.

Everything delegates to the framework-neutral engine :mod:`active_rag` (methods, triggers, query
formulators, prompts and routers live there):

- :class:`ActiveRAGQueryEngine`: a query engine over ``ActiveLM`` + any LlamaIndex retriever.
- :class:`TaAreSelector`: the TA-ARE / vanilla retrieve-or-not decision for ``RouterQueryEngine``.
- :class:`ActiveRAGWorkflow`: route -> generate -> retrieve -> answer, streaming an event per decision.
- :class:`ActiveHFLLM`: the local model as a LlamaIndex LLM with per-token logprobs.
- :class:`MiniLMEmbedding`: all-MiniLM-L6-v2 (offline) as a LlamaIndex embedding.
- :class:`LlamaIndexRetrieverAdapter`: a LlamaIndex retriever as an engine retriever; :func:`attach_name_index` gives
  one whose nodes it cannot list (a vector index's docstore, a BM25 retriever's corpus) the name index linked
  retrieval reads; :func:`node_title` names a source node (its title, file name or id).
- :class:`ActiveRetrievalEvent`, :class:`ActiveRouteEvent`: instrumentation events.
"""

from .embeddings import MiniLMEmbedding
from .events import ActiveRetrievalEvent, ActiveRouteEvent
from .llm import ActiveHFLLM
from .query_engine import ActiveRAGQueryEngine
from .retriever import (
    LlamaIndexRetrieverAdapter,
    attach_name_index,
    demo_nodes,
    node_from_passage,
    node_title,
    nodes_from_passages,
    passage_from_node,
)
from .selector import TaAreSelector
from .workflow import (
    ActiveRAGWorkflow,
    AnswerEvent,
    GenerateEvent,
    RetrievalDecisionEvent,
    RetrievedEvent,
    RetrieveEvent,
    RouteEvent,
    TokenEvent,
)

__all__ = [
    "ActiveHFLLM",
    "ActiveRAGQueryEngine",
    "ActiveRAGWorkflow",
    "ActiveRetrievalEvent",
    "ActiveRouteEvent",
    "AnswerEvent",
    "GenerateEvent",
    "LlamaIndexRetrieverAdapter",
    "MiniLMEmbedding",
    "RetrievalDecisionEvent",
    "RetrieveEvent",
    "RetrievedEvent",
    "RouteEvent",
    "TaAreSelector",
    "TokenEvent",
    "attach_name_index",
    "demo_nodes",
    "node_from_passage",
    "node_title",
    "nodes_from_passages",
    "passage_from_node",
]
