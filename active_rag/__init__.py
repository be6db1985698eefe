"""active-rag: active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE) on local Hugging Face models."""

from .errors import (
    ActiveRAGError,
    AttentionCaptureError,
    ContextOverflowError,
    CorpusError,
    EmptyQuestionError,
    ModelIntegrityError,
    ModelNotInstalledError,
    RetrieverError,
    UnknownNameError,
)
from .loop import ActiveRAG, merge_rankings
from .model import ActiveLM, DecodingSession
from .presets import PRESETS
from .prompts import PROMPTS, PromptTemplate
from .queries import (
    QUERIES,
    AttentionQuery,
    FollowUpQuery,
    FullContextQuery,
    GeneratedQuestionsQuery,
    InputQuery,
    LastSentenceQuery,
    LastTokensQuery,
    MaskedSentenceQuery,
    QueryContext,
    QueryFormulator,
    SearchTagQuery,
    make_query,
)
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

__version__ = "0.1.0"

__all__ = [name for name in dir() if not name.startswith("_")]
