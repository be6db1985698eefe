"""active-rag: active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE) on local Hugging Face models.

Names are imported lazily, so ``import active_rag.evaluation`` or the CLI's light commands do not pay
for importing torch and transformers.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from typing import TYPE_CHECKING, Any

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
    'ActiveRAG': 'loop',
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


# The modules that lived directly in active_rag/ before its subpackages (models/, decoding/, methods/, retrieval/,
# remote/, cli/, viz/): their old paths still import, as the very module they moved to (``import active_rag.context``
# gives ``active_rag.methods.context``). ``active_rag.retrieval``, ``.remote``, ``.viz`` and ``.cli`` are packages
# of the same names that re-export the old modules' public names.
_MOVED: dict[str, str] = {
    'loading': 'models.loading',
    'gguf_files': 'models.gguf_files',
    'model_cache': 'models.model_cache',
    'model_specs': 'models.model_specs',
    'registry': 'models.registry',
    'installing': 'models.installing',
    'weights': 'models.weights',
    'quantized': 'models.quantized',
    'devices': 'models.devices',
    'device_audit': 'models.device_audit',
    'model': 'decoding.model',
    'decode_scheduler': 'decoding.decode_scheduler',
    'ragged_attention': 'decoding.ragged_attention',
    'admission': 'decoding.admission',
    'prefix_cache': 'decoding.prefix_cache',
    'attention': 'decoding.attention',
    'context_window': 'decoding.context_window',
    'constrained': 'decoding.constrained',
    'stopping': 'decoding.stopping',
    'many_questions': 'decoding.many_questions',
    'triggers': 'methods.triggers',
    'thresholds': 'methods.thresholds',
    'calibration': 'methods.calibration',
    'queries': 'methods.queries',
    'context': 'methods.context',
    'linked': 'methods.linked',
    'read_choice': 'methods.read_choice',
    'answer_check': 'methods.answer_check',
    'answer_options': 'methods.answer_options',
    'answer_span': 'methods.answer_span',
    'answering': 'methods.answering',
    'retrieving': 'methods.retrieving',
    'routing': 'methods.routing',
    'profiles': 'methods.profiles',
    'prompts': 'methods.prompts',
    'prompt_layout': 'methods.prompt_layout',
    'presets': 'methods.presets',
    'rankings': 'retrieval.rankings',
    'chunking': 'retrieval.chunking',
    'name_index': 'retrieval.name_index',
    'embeddings': 'retrieval.embeddings',
    'remote_clients': 'remote.clients',
    'remote_http': 'remote.http',
    'remote_parse': 'remote.parse',
    'remote_vocab': 'remote.vocab',
    'cli_calibrate': 'cli.calibrate',
    'cli_output': 'cli.output',
    'doctor': 'cli.doctor',
    'ask_defaults': 'cli.ask_defaults',
    'viz_trace': 'viz.trace',
}


class _MovedModules:
    """The finder (and loader) of the old paths, asked last: a module or package that exists is found first."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        # the import system returns what sys.modules holds under the name once this returns: the moved module
        moved = _MOVED[module.__name__.rpartition(".")[2]]
        sys.modules[module.__name__] = importlib.import_module(f"{__name__}.{moved}")


if not any(type(finder).__name__ == "_MovedModules" for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


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
    from .loop import ActiveRAG
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
