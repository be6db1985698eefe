"""The engine of one evaluated method (:func:`build_engine`), its settings key, and the BM25 index of a
dataset's corpus, built once and cached on disk (:func:`load_corpus_index`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from active_rag.errors import CorpusError, InvalidOptionError
from active_rag.evaluation.config import (
    _OWN_PROMPT_TRIGGERS,
    _REPLACEABLE_PROMPTS,
    _SELF_ASK_PHRASE,
    EVAL_TODAY,
    EvalConfig,
    MethodSpec,
    _trigger_name,
    eval_prompt_template,
)
from active_rag.evaluation.datasets import corpus_path, load_dataset
from active_rag.evaluation.prompts import RETRIEVALQA_TOP_N
from active_rag.components.prompts import PromptTemplate
from active_rag.stopping import has_completed_answer
from active_rag.types import Passage

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.engine import ActiveRAG
    from active_rag.decoding.model import ActiveLM

# ------------------------------------------------------------------------------------------------ engine


class _ContextsRetriever:
    """RetrievalQA: a question's own pre-retrieved contexts, the first :data:`RETRIEVALQA_TOP_N`, whatever the query."""

    def __init__(self, contexts: Sequence[Passage]) -> None:
        self.contexts = list(contexts)[:RETRIEVALQA_TOP_N]

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return list(self.contexts[: max(k, 1)])


class _TimedRetriever:
    """Wraps a retriever: counts calls and the seconds spent in them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def retrieve(self, query: str, k: int) -> list[Passage]:
        start = time.perf_counter()
        try:
            return self.inner.retrieve(query, k)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    @property
    def name_index(self) -> Any:
        """The wrapped retriever's name index (linked retrieval reads it instead of asking once per name)."""
        from active_rag.retrieval.name_index import name_index_of

        return name_index_of(self.inner)


def _router_options(config: EvalConfig, data_dir: Path | None) -> dict[str, Any]:
    """TA-ARE's similarity-selected [Yes] demonstrations (``ta_are_demos="similar"``): the pool is the dataset's
    questions that need retrieval (the asked question itself is never shown), ranked by MiniLM cosine (the
    paper uses SimCSE)."""
    if config.ta_are_demos != "similar" or config.router_name != "ta-are":
        return {}
    from active_rag.retrieval.embeddings import MiniLMEncoder
    from active_rag.components.routing import Demonstration

    pool = [Demonstration(e.question, True) for e in load_dataset(config.dataset, data_dir) if e.needs_retrieval]
    if not pool:
        raise ValueError(f"--ta-are-demos similar needs questions labelled as needing retrieval; {config.dataset} has none.")
    return {"pool": pool, "embed": MiniLMEncoder().encode}


def _answer_phrase(spec: MethodSpec, dataset: str) -> str | None:
    if dataset == "retrievalqa":
        return None
    return _SELF_ASK_PHRASE if _trigger_name(spec) == "follow-up" else "So the answer is"


def build_engine(
    spec: MethodSpec,
    lm: ActiveLM,
    retriever: Any,
    config: EvalConfig,
    router: Any = None,
) -> ActiveRAG:
    """The engine object for one method, with the eval prompt, stop rule, answer phrase and limits of ``config``."""
    from active_rag.engine import ActiveRAG
    from active_rag.components.presets import PRESETS
    from active_rag.components.triggers import make_trigger
    from active_rag.components.settings import engine_kwargs

    dataset = config.dataset
    template = eval_prompt_template(dataset)
    phrase = _answer_phrase(spec, dataset)
    common: dict[str, Any] = {
        "top_k": RETRIEVALQA_TOP_N if dataset == "retrievalqa" else config.top_k,
        "max_new_tokens": config.answer_tokens,
        "max_retrievals": config.max_retrievals,
        "prompt_mode": config.prompt_mode,
        "profile": config.profile_obj,
        "stop": has_completed_answer if phrase else None,
        "answer_phrase": phrase,
        "router": router if spec.router else None,
        "method": spec.name,
    }
    if spec.context is not None:
        common["context"] = spec.context
    if spec.answer_options:
        common["answer_options"] = True
    if spec.ask_same:
        common["ask_same"] = True
    if spec.preset is not None:
        preset = PRESETS[spec.preset]
        overrides: dict[str, Any] = {}
        if preset.prompt in _REPLACEABLE_PROMPTS:
            overrides["prompt"] = template
        if spec.trigger_kwargs:
            from active_rag.components.presets import preset_kwargs

            profiled = preset_kwargs(spec.preset, config.profile_obj)["trigger"]  # the profile's segment length
            overrides["trigger"] = make_trigger(preset.trigger, **{**dict(preset.trigger_kwargs), **dict(spec.trigger_kwargs),
                                                                  "max_tokens": profiled.max_tokens})
        if spec.initial_retrieval:
            overrides["initial_retrieval"] = True
        if spec.check_theta is not None:  # --sweep check_theta=...: the preset's answer check with that theta
            overrides["answer"] = dataclasses.replace(
                preset.answer, check=dataclasses.replace(preset.answer.check, theta=spec.check_theta))
        return ActiveRAG.from_preset(spec.preset, lm, retriever, **overrides, **common)
    trigger_name = str(spec.trigger)
    prompt: str | PromptTemplate = _OWN_PROMPT_TRIGGERS.get(trigger_name, template)
    return ActiveRAG(lm, retriever, **engine_kwargs({
        "trigger": make_trigger(trigger_name, **dict(spec.trigger_kwargs)),
        "query": str(spec.query),
        "prompt": prompt,
        "initial_retrieval": spec.initial_retrieval,
        **common,
    }))


#: Passages of the shared corpora (shared/data/README.md), which every committed row was answered over.
SHARED_CORPUS_PASSAGES = {"hotpotqa": 4858, "2wikimultihopqa": 3301, "strategyqa": 6120}


def _decode_kernel_layers(model: Any) -> Any:
    from active_rag.models.quantized import packed_layers

    module = getattr(model, "model", None)
    return packed_layers(module) if module is not None and hasattr(module, "modules") else ()


def _decodes_with_our_kernel(model: Any) -> bool:
    """Whether ``model``'s packed layers decode with active-rag's kernel (:mod:`active_rag.kernels`)."""
    return any(getattr(layer, "uses_kernel", False) for _, layer in _decode_kernel_layers(model))


#: the rules of :func:`~active_rag.answer.links.follow_links` that change only a folder's (chunked) corpus, named in
#: the keys of rows of methods that follow links over one: ``continuation`` (a link displaces the next chunk of a
#: document the question reads only when it bears on the question as much), ``premise`` (a name only a question's
#: premise states faces that rule too, :func:`~active_rag.answer.links.premise_names`), ``described`` (the pages of
#: what only a question's premise names leave the prompt once the page it describes is read,
#: :func:`~active_rag.answer.premise.premise_pages`), ``subject`` (a passage the reading mentions is scored without
#: the names of the documents the question names and reads, :func:`~active_rag.answer.links.follow_links`' ``subject``)
LINK_RULES = "continuation+premise+described+subject"
#: the link rules of rows written before, each with the rules of :data:`LINK_RULES` it lacks (a resume carries those
#: rows over or answers them again: :func:`active_rag.evaluation.settled.convert_row`)
EARLIER_LINK_RULES = {"continuation+premise+described": "subject", "continuation+premise": "described+subject",
                      "continuation": "premise+described+subject"}


def _engine_key(rag: ActiveRAG, config: EvalConfig, model_name: str, corpus_passages: int | None = None,
                link_rules: str = LINK_RULES) -> str:
    """A short hash of everything that changes a method's outputs, stored in each row to guard resumes.

    Rows over another corpus than the shared one (``--data-dir`` of a union corpus: ``corpus_passages``, the
    index's size) and rows with hidden titles get keys of their own, so that they never resume one another.
    ``link_rules``: the key of rows written with other rules of :data:`LINK_RULES` (:data:`EARLIER_LINK_RULES`),
    for a resume to carry them over."""
    desc = {
        **rag.describe(),
        "prompt_text": [rag.prompt.direct, rag.prompt.with_docs],
        "max_new_tokens": rag.max_new_tokens,
        "answer_phrase": rag.answer_phrase,
        "router": getattr(rag.router, "name", None),
        "model": model_name,
        "dataset": config.dataset,
    }
    weights = getattr(rag.model, "weights", "float32")
    if weights != "float32":  # float32 rows keep the keys they were written with
        desc["weights"] = weights
    if _decodes_with_our_kernel(rag.model):  # its int8 activations move logits within a stated bound: rows of their own
        desc["decode_kernel"] = "active-rag"  # (ACTIVE_RAG_DECODE_KERNEL=torch resumes the rows torch's kernels wrote)
        kinds = {getattr(layer, "kind", "") for _, layer in _decode_kernel_layers(rag.model)}
        if "int5" in kinds:
            desc["decode_kernel"] = "active-rag+int5"  # 5-bit layers (ACTIVE_RAG_INT5=off resumes the int8 ones' rows)
        if kinds & {"int4k", "int6k"}:  # a GGUF's Q4_K/Q6_K values (ACTIVE_RAG_KQUANTS=off resumes the earlier rows)
            desc["decode_kernel"] = f"{desc['decode_kernel']}+kquants"
        from active_rag.models.prefill_path import kernel_prefill

        if kernel_prefill():  # prompts prefilled with int8 activations too (ACTIVE_RAG_PREFILL=dense resumes the rest)
            desc["prefill"] = "kernel"
    if getattr(getattr(rag.model, "device", None), "type", "cpu") == "cpu":
        from active_rag.decoding.one_token_attention import kernel_attends
        from active_rag.decoding.step_summary import kernel_summarizes

        # the kernels' float32 ops of a CPU step round otherwise than torch's: rows of their own
        if kernel_attends():  # a step's attention (ACTIVE_RAG_DECODE_ATTENTION=grouped resumes the earlier rows)
            desc["decode_attention"] = "active-rag"
        if kernel_summarizes():  # a greedy step's log-probability and entropy (ACTIVE_RAG_STEP_SUMMARY=torch)
            desc["step_summary"] = "active-rag"
    today = rag.router.today_text() if getattr(rag.router, "today", None) is not None else None
    if today is not None and today != EVAL_TODAY:  # rows of the pinned default date keep the keys they were made with
        desc["today"] = today
    if corpus_passages is not None and corpus_passages != SHARED_CORPUS_PASSAGES.get(config.dataset):
        desc["corpus_passages"] = corpus_passages  # rows over the shared corpora keep the keys they were written with
    if config.hide_titles:
        desc["hide_titles"] = True
    folder = corpus_path(config.dataset, config.data_dir) if config.dataset == "pydocs" else None
    if folder is not None and folder.is_dir():  # a folder's passages change with the chunking rules, not only in number
        from active_rag.evaluation.pydocs import passages_digest

        desc["corpus_digest"] = passages_digest(folder)
        check = getattr(rag, "answer_check", None)
        if rag.follow_links or getattr(check, "query", None) in ("linked", "choose"):
            desc["link_rules"] = link_rules  # follow_links' rules that change only chunked corpora (LINK_RULES)
    if getattr(rag.router, "pool", None):  # TA-ARE's similarity-selected demonstrations (absent: fixed ones)
        desc["router_demos"] = {"similar": getattr(rag.router, "n_yes", None), "pool": len(rag.router.pool)}
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------------ index


def default_index_cache() -> Path:
    """``$ACTIVE_RAG_CACHE/indexes`` (else ``$XDG_CACHE_HOME/active-rag/indexes``, else ``~/.cache/active-rag/indexes``)."""
    explicit = os.environ.get("ACTIVE_RAG_CACHE")
    if explicit:
        return Path(explicit).expanduser() / "indexes"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg).expanduser() / "active-rag" if xdg else Path.home() / ".cache" / "active-rag"
    return root / "indexes"


def hidden_titles(passages: Sequence[Passage]) -> list[Passage]:
    """``passages`` with each title replaced by ``doc-<n>.txt``, ``n`` its position (from 0, as
    ``research/linked_recall.py`` numbers them): nothing of the passage's own name is indexed or shown
    (ids, texts and metadata stay)."""
    return [Passage(id=p.id, text=p.text, title=f"doc-{n}.txt", metadata=dict(p.metadata)) for n, p in enumerate(passages)]


def load_corpus_index(dataset: str, data_dir: Path | None = None, cache: Path | None = None,
                      hide_titles: bool = False) -> tuple[Any, Path, bool]:
    """The BM25 index of a dataset's corpus: loaded from ``cache/<dataset>-<hash>`` when built before (the
    hash covers the corpus path, mtime and size), else built and saved there. With ``hide_titles`` every
    passage is indexed with the title ``doc-<n>.txt`` (:func:`hidden_titles`; cached apart,
    ``<dataset>-notitles-<hash>``). Returns (index, folder, loaded)."""
    from active_rag.retrieval.bm25 import BM25Index, read_jsonl_passages

    path = corpus_path(dataset, data_dir)
    if path.is_dir():  # a folder of documents (pydocs): cut into passages as `--corpus DIR` cuts it, not cached here
        from active_rag.evaluation.pydocs import folder_index

        if hide_titles:
            raise InvalidOptionError(f"--hide-titles is for JSONL corpora; the {dataset} corpus is a folder whose "
                                     "titles are its file names: drop --hide-titles.")
        return folder_index(path), path, False
    if not path.is_file():
        raise CorpusError(f"The {dataset} corpus {str(path)!r} does not exist: check --data-dir.")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_mtime_ns}|{st.st_size}".encode()).hexdigest()[:12]
    folder = (cache or default_index_cache()) / (f"{dataset}-notitles-{key}" if hide_titles else f"{dataset}-{key}")
    if folder.is_dir():
        try:
            return BM25Index.load(folder), folder, True
        except CorpusError as exc:
            warnings.warn(f"Rebuilding the cached index {folder} ({exc}).", stacklevel=2)
            shutil.rmtree(folder, ignore_errors=True)
    index = (BM25Index.from_passages(hidden_titles(read_jsonl_passages(path))) if hide_titles
             else BM25Index.from_jsonl(path))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        index.save(tmp)
        os.replace(tmp, folder)
    except OSError:  # another process saved it first
        shutil.rmtree(tmp, ignore_errors=True)
    return index, folder, False
