"""active-rag: active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE) on local Hugging Face models.

Names are imported lazily, so ``import active_rag.evaluation`` or the CLI's light commands do not pay
for importing torch and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

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
    'RemoteLM': 'remote.lm',
    'AnswerCheck': 'methods.answer_check',
    'AnswerStage': 'methods.answer_stage',
    'RunSettings': 'settings',
    'AnswerStream': 'answer_stream',
    'AccumulateContext': 'methods.context',
    'CONTEXT_POLICIES': 'methods.context',
    'ContextPolicy': 'methods.context',
    'KeepNewestContext': 'methods.context',
    'ReadLinksContext': 'methods.context',
    'ReplaceContext': 'methods.context',
    'RerankContext': 'methods.context',
    'make_context': 'methods.context',
    'ActiveRAG': 'engine.loop',
    'merge_rankings': 'retrieval.rankings',
    'ActiveLM': 'decoding.model',
    'DecodingSession': 'decoding.model',
    'PromptUsage': 'decoding.model',
    'PrefixCache': 'decoding.prefix_cache',
    'DecodeScheduler': 'decoding.decode_scheduler',
    'BatchError': 'errors',
    'PRESETS': 'methods.presets',
    'PROMPTS': 'methods.prompts',
    'PromptTemplate': 'methods.prompts',
    'AttentionQuery': 'methods.queries',
    'FollowUpQuery': 'methods.queries',
    'FullContextQuery': 'methods.queries',
    'GeneratedAttentionQuery': 'methods.queries',
    'GeneratedQuestionsQuery': 'methods.queries',
    'InputQuery': 'methods.queries',
    'LastSentenceQuery': 'methods.queries',
    'LastTokensQuery': 'methods.queries',
    'MaskedSentenceQuery': 'methods.queries',
    'QUERIES': 'methods.queries',
    'QueryContext': 'methods.queries',
    'QueryFormulator': 'methods.queries',
    'QuestionEntityQuery': 'methods.queries',
    'SearchTagQuery': 'methods.queries',
    'make_query': 'methods.queries',
    'BM25Index': 'retrieval.bm25',
    'chunk_passages': 'retrieval.chunking',
    'chunk_text': 'retrieval.chunking',
    'ROUTERS': 'methods.routing',
    'TaAreRouter': 'methods.routing',
    'VanillaRouter': 'methods.routing',
    'make_router': 'methods.routing',
    'FixedLengthTrigger': 'methods.triggers',
    'FixedSentenceTrigger': 'methods.triggers',
    'FollowUpTrigger': 'methods.triggers',
    'LowConfidenceTrigger': 'methods.triggers',
    'NeverTrigger': 'methods.triggers',
    'OnceTrigger': 'methods.triggers',
    'RindTrigger': 'methods.triggers',
    'SearchTagTrigger': 'methods.triggers',
    'SegmentContext': 'methods.triggers',
    'TRIGGERS': 'methods.triggers',
    'Trigger': 'methods.triggers',
    'make_trigger': 'methods.triggers',
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


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
    from .methods.context import (
        CONTEXT_POLICIES,
        AccumulateContext,
        ContextPolicy,
        KeepNewestContext,
        ReadLinksContext,
        ReplaceContext,
        RerankContext,
        make_context,
    )
    from .methods.answer_check import AnswerCheck
    from .methods.answer_stage import AnswerStage
    from .settings import RunSettings
    from .answer_stream import AnswerStream
    from .engine.loop import ActiveRAG
    from .remote.lm import RemoteLM
    from .retrieval.rankings import merge_rankings
    from .decoding.decode_scheduler import DecodeScheduler
    from .errors import BatchError
    from .decoding.model import ActiveLM, DecodingSession, PromptUsage
    from .decoding.prefix_cache import PrefixCache
    from .methods.presets import PRESETS
    from .methods.prompts import PROMPTS, PromptTemplate
    from .methods.queries import (
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
    from .retrieval.chunking import chunk_passages, chunk_text
    from .retrieval.bm25 import BM25Index
    from .methods.routing import ROUTERS, TaAreRouter, VanillaRouter, make_router
    from .methods.triggers import (
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
