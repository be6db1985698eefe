"""active-rag: active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE) on local Hugging Face models.

Names are imported lazily, so ``import active_rag.evaluation`` or the CLI's light commands do not pay
for importing torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    'ActiveRAGError': 'errors',
    'AttentionCaptureError': 'errors',
    'ContextOverflowError': 'errors',
    'CorpusError': 'errors',
    'DecodeOutOfMemoryError': 'errors',
    'EmptyQuestionError': 'errors',
    'IndexPathError': 'errors',
    'InvalidOptionError': 'errors',
    'ModelLoadError': 'errors',
    'QuestionTypeError': 'errors',
    'ModelIntegrityError': 'errors',
    'ModelNotInstalledError': 'errors',
    'NonFiniteLogitsError': 'errors',
    'RetrieverError': 'errors',
    'RunCancelledError': 'errors',
    'UnknownNameError': 'errors',
    'EndpointError': 'errors',
    'EndpointHTTPError': 'errors',
    'EndpointTimeoutError': 'errors',
    'EndpointUnreachableError': 'errors',
    'NeedsLocalModelError': 'errors',
    'NoLogprobsError': 'errors',
    'RemoteLM': 'remote',
    'AnswerCheck': 'answer_check',
    'AnswerStream': 'answer_stream',
    'AccumulateContext': 'context',
    'CONTEXT_POLICIES': 'context',
    'ContextPolicy': 'context',
    'KeepNewestContext': 'context',
    'ReplaceContext': 'context',
    'RerankContext': 'context',
    'make_context': 'context',
    'ActiveRAG': 'loop',
    'merge_rankings': 'rankings',
    'ActiveLM': 'model',
    'DecodingSession': 'model',
    'PromptUsage': 'model',
    'PrefixCache': 'prefix_cache',
    'DecodeScheduler': 'decode_scheduler',
    'BatchError': 'errors',
    'PRESETS': 'presets',
    'PROMPTS': 'prompts',
    'PromptTemplate': 'prompts',
    'AttentionQuery': 'queries',
    'FollowUpQuery': 'queries',
    'FullContextQuery': 'queries',
    'GeneratedAttentionQuery': 'queries',
    'GeneratedQuestionsQuery': 'queries',
    'InputQuery': 'queries',
    'LastSentenceQuery': 'queries',
    'LastTokensQuery': 'queries',
    'MaskedSentenceQuery': 'queries',
    'QUERIES': 'queries',
    'QueryContext': 'queries',
    'QueryFormulator': 'queries',
    'QuestionEntityQuery': 'queries',
    'SearchTagQuery': 'queries',
    'make_query': 'queries',
    'BM25Index': 'retrieval',
    'chunk_passages': 'chunking',
    'chunk_text': 'chunking',
    'ROUTERS': 'routing',
    'TaAreRouter': 'routing',
    'VanillaRouter': 'routing',
    'make_router': 'routing',
    'FixedLengthTrigger': 'triggers',
    'FixedSentenceTrigger': 'triggers',
    'FollowUpTrigger': 'triggers',
    'LowConfidenceTrigger': 'triggers',
    'NeverTrigger': 'triggers',
    'OnceTrigger': 'triggers',
    'RindTrigger': 'triggers',
    'SearchTagTrigger': 'triggers',
    'SegmentContext': 'triggers',
    'TRIGGERS': 'triggers',
    'Trigger': 'triggers',
    'make_trigger': 'triggers',
    'ActiveRAGResult': 'types',
    'Passage': 'types',
    'Retrieval': 'types',
    'Retriever': 'types',
    'RouteDecision': 'types',
    'TokenEvent': 'types',
    'TokenStep': 'types',
    'TriggerDecision': 'types',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'active_rag' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # pragma: no cover
    from .errors import (
        ActiveRAGError,
        AttentionCaptureError,
        ContextOverflowError,
        CorpusError,
        DecodeOutOfMemoryError,
        EmptyQuestionError,
        EndpointError,
        EndpointHTTPError,
        EndpointTimeoutError,
        EndpointUnreachableError,
        IndexPathError,
        InvalidOptionError,
        ModelIntegrityError,
        ModelLoadError,
        ModelNotInstalledError,
        NeedsLocalModelError,
        NoLogprobsError,
        NonFiniteLogitsError,
        QuestionTypeError,
        RetrieverError,
        RunCancelledError,
        UnknownNameError,
    )
    from .context import (
        CONTEXT_POLICIES,
        AccumulateContext,
        ContextPolicy,
        KeepNewestContext,
        ReplaceContext,
        RerankContext,
        make_context,
    )
    from .answer_check import AnswerCheck
    from .answer_stream import AnswerStream
    from .loop import ActiveRAG
    from .remote import RemoteLM
    from .rankings import merge_rankings
    from .decode_scheduler import DecodeScheduler
    from .errors import BatchError
    from .model import ActiveLM, DecodingSession, PromptUsage
    from .prefix_cache import PrefixCache
    from .presets import PRESETS
    from .prompts import PROMPTS, PromptTemplate
    from .queries import (
        QUERIES,
        AttentionQuery,
        FollowUpQuery,
        FullContextQuery,
        GeneratedAttentionQuery,
        GeneratedQuestionsQuery,
        InputQuery,
        LastSentenceQuery,
        LastTokensQuery,
        MaskedSentenceQuery,
        QueryContext,
        QueryFormulator,
        QuestionEntityQuery,
        SearchTagQuery,
        make_query,
    )
    from .chunking import chunk_passages, chunk_text
    from .retrieval import BM25Index
    from .routing import ROUTERS, TaAreRouter, VanillaRouter, make_router
    from .triggers import (
        TRIGGERS,
        FixedLengthTrigger,
        FixedSentenceTrigger,
        FollowUpTrigger,
        LowConfidenceTrigger,
        NeverTrigger,
        OnceTrigger,
        RindTrigger,
        SearchTagTrigger,
        SegmentContext,
        Trigger,
        make_trigger,
    )
    from .types import (
        ActiveRAGResult,
        Passage,
        Retrieval,
        Retriever,
        RouteDecision,
        TokenEvent,
        TokenStep,
        TriggerDecision,
    )
