"""active-rag: active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE) on local Hugging Face models.

Names are imported lazily, so ``import active_rag.evaluation`` or the CLI's light commands do not pay
for importing torch and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .omp_wait import default_wait_policy as _default_wait_policy

__version__ = "0.1.0"

_default_wait_policy()  # before torch loads: OpenMP's idle worker sleeps beside the decode kernels' threads (omp_wait.py)

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
    'AnswerCheck': 'answer.check',
    'AnswerStage': 'components.answer_stage',
    'RunSettings': 'components.settings',
    'AnswerStream': 'answer_stream',
    'AccumulateContext': 'components.context',
    'CONTEXT_POLICIES': 'components.context',
    'ContextPolicy': 'components.context',
    'KeepNewestContext': 'components.context',
    'ReadLinksContext': 'components.context',
    'ReplaceContext': 'components.context',
    'RerankContext': 'components.context',
    'make_context': 'components.context',
    'ActiveRAG': 'engine.loop',
    'merge_rankings': 'retrieval.rankings',
    'ActiveLM': 'decoding.model',
    'DecodingSession': 'decoding.model',
    'PromptUsage': 'decoding.model',
    'PrefixCache': 'decoding.prefix_cache',
    'DecodeScheduler': 'decoding.decode_scheduler',
    'BatchError': 'errors',
    'PRESETS': 'components.presets',
    'PROMPTS': 'components.prompts',
    'PromptTemplate': 'components.prompts',
    'AttentionQuery': 'components.queries',
    'FollowUpQuery': 'components.queries',
    'FullContextQuery': 'components.queries',
    'GeneratedAttentionQuery': 'components.queries',
    'GeneratedQuestionsQuery': 'components.queries',
    'InputQuery': 'components.queries',
    'LastSentenceQuery': 'components.queries',
    'LastTokensQuery': 'components.queries',
    'MaskedSentenceQuery': 'components.queries',
    'QUERIES': 'components.queries',
    'QueryContext': 'components.queries',
    'QueryFormulator': 'components.queries',
    'QuestionEntityQuery': 'components.queries',
    'SearchTagQuery': 'components.queries',
    'make_query': 'components.queries',
    'BM25Index': 'retrieval.bm25',
    'chunk_passages': 'retrieval.chunking',
    'chunk_text': 'retrieval.chunking',
    'ROUTERS': 'components.routing',
    'TaAreRouter': 'components.routing',
    'VanillaRouter': 'components.routing',
    'make_router': 'components.routing',
    'FixedLengthTrigger': 'components.triggers',
    'FixedSentenceTrigger': 'components.triggers',
    'FollowUpTrigger': 'components.triggers',
    'LowConfidenceTrigger': 'components.triggers',
    'NeverTrigger': 'components.triggers',
    'OnceTrigger': 'components.triggers',
    'RindTrigger': 'components.triggers',
    'SearchTagTrigger': 'components.triggers',
    'SegmentContext': 'components.triggers',
    'TRIGGERS': 'components.triggers',
    'Trigger': 'components.triggers',
    'make_trigger': 'components.triggers',
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
    from .components.context import (
        CONTEXT_POLICIES,
        AccumulateContext,
        ContextPolicy,
        KeepNewestContext,
        ReadLinksContext,
        ReplaceContext,
        RerankContext,
        make_context,
    )
    from .answer.check import AnswerCheck
    from .components.answer_stage import AnswerStage
    from .components.settings import RunSettings
    from .answer_stream import AnswerStream
    from .engine.loop import ActiveRAG
    from .remote.lm import RemoteLM
    from .retrieval.rankings import merge_rankings
    from .decoding.decode_scheduler import DecodeScheduler
    from .errors import BatchError
    from .decoding.model import ActiveLM, DecodingSession, PromptUsage
    from .decoding.prefix_cache import PrefixCache
    from .components.presets import PRESETS
    from .components.prompts import PROMPTS, PromptTemplate
    from .components.queries import (
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
    from .components.routing import ROUTERS, TaAreRouter, VanillaRouter, make_router
    from .components.triggers import (
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
