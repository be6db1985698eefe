"""``active-rag eval``: run the papers' methods on a question set and score them, resumably.

Every method is the engine's (:class:`active_rag.ActiveRAG`, its presets, triggers, query formulators and
routers); this module only wires a dataset to it, scores the outputs and writes the results:

* Prompts: DRAGIN appendix F few-shot chain-of-thought exemplars (HotpotQA, 2WikiMultihopQA, StrategyQA) and
  the RetrievalQA templates, exactly as :func:`~active_rag.evaluation.prompts.build_eval_prompt` writes them,
  as an engine :class:`~active_rag.prompts.PromptTemplate` (:func:`eval_prompt_template`). The engine wraps the
  prompt in the model's chat template. self-ask and FLARE-instruct keep their own prompts (their triggers
  read the ``Follow up:`` / ``[Search(...)]`` formats those prompts teach).
* Answers, the DRAGIN way (appendix B): generation stops once an answer sentence is complete
  (:func:`~active_rag.evaluation.answers.has_completed_answer`, case-insensitive), output is capped at
  ``max_new_tokens``, the engine appends "So the answer is" when the model did not write it and lets the
  model finish (``answer_phrase``), and :func:`~active_rag.evaluation.answers.extract_answer` reads the answer.
* Retrieval: BM25 (:class:`active_rag.BM25Index`) over the dataset's corpus, built once and cached on disk.
  RetrievalQA (Zhang et al. 2024) uses each question's own pre-retrieved contexts, the first 5 as its
  authors did, whatever the query; a router (TA-ARE or vanilla) decides whether to use them.
* Scores: SQuAD EM/F1/precision/recall (HotpotQA, 2Wiki), yes/no accuracy (StrategyQA), RetrievalQA
  ``match`` with its accent-folded variant, retrieve-decision metrics, retrievals per question, generated
  tokens, wall time, and the share of retrievals whose top-k holds a gold paragraph.

Per-question rows are appended to ``OUT/<dataset>/<model>/<method>.jsonl`` as each question finishes, so a
run can be resumed (finished question ids are skipped) and inspected while it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from active_rag.errors import ActiveRAGError, CorpusError, UnknownNameError
from active_rag.evaluation.answers import extract_answer, has_completed_answer, retrievalqa_decision
from active_rag.evaluation.datasets import DATASETS, Example, corpus_path, default_data_dir, load_dataset
from active_rag.evaluation.metrics import (
    aggregate,
    decision_metrics,
    match,
    match_accent_folded,
    qa_scores,
    strategyqa_accuracy,
)
from active_rag.evaluation.prompts import (
    CONTEXT_FOOTER,
    EXEMPLARS,
    INSTRUCTIONS,
    RETRIEVALQA_SYSTEM_PROMPT,
    RETRIEVALQA_TOP_N,
    build_eval_prompt,
    format_dragin_context,
    format_retrievalqa_evidence,
)
from active_rag.prompts import PromptTemplate
from active_rag.types import ActiveRAGResult, Passage

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.loop import ActiveRAG
    from active_rag.model import ActiveLM

__all__ = [
    "DEFAULT_EVAL_MODEL",
    "PRIMARY_METRICS",
    "EvalConfig",
    "EvalPromptTemplate",
    "EvalReport",
    "EvalWorker",
    "MethodSpec",
    "build_engine",
    "build_methods",
    "default_index_cache",
    "eval_output_dir",
    "eval_prompt_template",
    "finish_eval",
    "format_results_table",
    "load_corpus_index",
    "method_path",
    "plan_eval",
    "resolve_data_dir",
    "run_eval",
    "score_example",
    "summarize_rows",
]

#: SmolLM2-135M scores near zero on multi-hop QA; the 0.5B Qwen coder model is the smallest usable one.
DEFAULT_EVAL_MODEL = "qwen2.5-coder-0.5b"

#: The headline metrics of each dataset (keys of the per-method summary).
PRIMARY_METRICS: dict[str, tuple[str, ...]] = {
    "hotpotqa": ("em", "f1"),
    "2wikimultihopqa": ("em", "f1"),
    "strategyqa": ("accuracy",),
    "retrievalqa": ("match", "match_folded"),
}

_DEFAULT_METHODS_RETRIEVALQA = ("wo-rag", "sr-rag")
# Presets whose own prompt is replaced by the dataset's few-shot prompt (DRAGIN §4.2 uses one prompt for all
# baselines); self-ask and flare-instruct keep theirs, their triggers depend on the formats they teach.
_REPLACEABLE_PROMPTS = ("dragin", "flare")
_OWN_PROMPT_TRIGGERS = {"search-tag": "flare-instruct", "follow-up": "self-ask"}
_SELF_ASK_PHRASE = "So the final answer is"  # Press et al.'s exemplars end with "So the final answer is: X"


# ------------------------------------------------------------------------------------------------ prompts


@dataclass(frozen=True)
class EvalPromptTemplate(PromptTemplate):
    """A :class:`~active_rag.prompts.PromptTemplate` whose documents are formatted as the papers' eval prompts do:
    ``"Context:\\n[1] title text\\n..."`` (DRAGIN appendix F, whitespace collapsed) or RetrievalQA's
    ``"[1] title\\ntext"`` over the first 5 passages."""

    dataset: str = "hotpotqa"

    def context(self, passages: Sequence[Passage]) -> str:
        """The documents block of the chat-turns and completion prompt modes, as ``build_eval_prompt`` writes it."""
        if not passages:
            return ""
        if self.dataset == "retrievalqa":
            return self.documents(passages) + "\n"
        return self.documents(passages) + CONTEXT_FOOTER + "\n"

    def documents(self, passages: Sequence[Passage]) -> str:
        if self.dataset == "retrievalqa":
            return format_retrievalqa_evidence(list(passages))
        return format_dragin_context(list(passages))


_Q_MARK = "\ue010EVALQ\ue010"
_D_MARK = "\ue010EVALD\ue010"


def _as_format_template(text: str, documents: str | None = None) -> str:
    escaped = text.replace("{", "{{").replace("}", "}}")
    if documents is not None:
        doc_escaped = documents.replace("{", "{{").replace("}", "}}")
        if escaped.count(doc_escaped) != 1:  # pragma: no cover - guards a change in prompts.py
            raise RuntimeError("build_eval_prompt no longer places the documents block where expected.")
        escaped = escaped.replace(doc_escaped, "{documents}")
    if escaped.count(_Q_MARK) != 1:  # pragma: no cover
        raise RuntimeError("build_eval_prompt no longer holds the question exactly once.")
    return escaped.replace(_Q_MARK, "{question}")


def eval_prompt_template(dataset: str) -> EvalPromptTemplate:
    """The engine template that renders exactly ``build_eval_prompt(dataset, question, passages)``.

    It is derived from :func:`~active_rag.evaluation.prompts.build_eval_prompt` itself (with marker strings
    for the question and a one-passage document block), so the two cannot drift apart.
    """
    if dataset not in DATASETS:
        raise UnknownNameError("dataset", dataset, DATASETS)
    marker = [Passage(id="marker", text=_D_MARK)]
    block = format_retrievalqa_evidence(marker) if dataset == "retrievalqa" else format_dragin_context(marker)
    return EvalPromptTemplate(
        name=f"eval-{dataset}",
        direct=_as_format_template(build_eval_prompt(dataset, _Q_MARK)),
        with_docs=_as_format_template(build_eval_prompt(dataset, _Q_MARK, marker), documents=block),
        dataset=dataset,
        # the structure of the chat-turns and completion prompt modes (active_rag.layout)
        exemplars=EXEMPLARS.get(dataset, ()),
        question_instruction=INSTRUCTIONS.get(dataset) or "",
    )


# ------------------------------------------------------------------------------------------------ config


@dataclass
class EvalConfig:
    """Settings of one ``active-rag eval`` run (see :func:`run_eval`).

    ``methods``: preset names (default: every preset; ``wo-rag`` and ``sr-rag`` for RetrievalQA). ``triggers`` x
    ``queries``: ablation methods, any trigger with any query formulator, paired one to one (or one broadcast to
    all) or, with ``grid``, every combination. ``router``: ``ta-are``, ``vanilla`` or ``none`` (default ``ta-are``
    for RetrievalQA, ``none`` otherwise), applied to every method that retrieves. ``sweep``: a trigger field
    (e.g. ``theta``) and its values; each method whose trigger has that field runs once per value (FLARE Fig. 5,
    DRAGIN Table 5). ``index_cache``: folder for built BM25 indexes (default :func:`default_index_cache`).
    """

    dataset: str
    data_dir: Path | None = None
    methods: list[str] | None = None
    triggers: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    grid: bool = False
    initial_retrieval: bool = False
    router: str | None = None
    model: str = DEFAULT_EVAL_MODEL
    limit: int | None = None
    out_dir: Path = Path("runs/eval")
    top_k: int = 3
    max_new_tokens: int | None = None  # None: the profile's generation length (DRAGIN Table 9), else 128
    max_retrievals: int | None = None  # None: no cap (the engine's generated-token guard stops runaways)
    sweep: tuple[str, list[float]] | None = None
    profile: str | None = None  # DRAGIN Table 9 profile; None: the dataset's; "none": no profile
    prompt_mode: str = "single"  # single, chat-turns or completion (active_rag.layout)
    ta_are_demos: str = "fixed"  # fixed: the authors' 2 [Yes] / 2 [No]; similar: the 2 most similar [Yes] of the pool
    resume: bool = True
    index_cache: Path | None = None
    plots: bool = True
    batch_size: int = 1
    """Questions decoded together (one batched forward per step, continuous batching); rows are the same."""
    device: str = "auto"
    dtype: str | None = None
    prefix_cache: bool = True
    prefix_cache_mb: float | None = None

    def model_options(self) -> dict[str, Any]:
        """Keyword arguments of ``ActiveLM.load`` for this run."""
        options: dict[str, Any] = {"device": self.device, "dtype": self.dtype, "prefix_cache": self.prefix_cache}
        if self.prefix_cache_mb is not None:
            options["prefix_cache_mb"] = self.prefix_cache_mb
        return options

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise UnknownNameError("dataset", self.dataset, DATASETS)
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}.")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}.")
        from active_rag.layout import check_prompt_mode

        check_prompt_mode(self.prompt_mode)
        self.profile_obj  # UnknownNameError for a bad profile
        if self.ta_are_demos not in ("fixed", "similar"):
            raise UnknownNameError("TA-ARE demonstration choice", self.ta_are_demos, ("fixed", "similar"))
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be a non-negative integer, got {self.limit}.")
        self.out_dir = Path(self.out_dir)
        if self.data_dir is not None:
            self.data_dir = Path(self.data_dir)
        if self.index_cache is not None:
            self.index_cache = Path(self.index_cache)

    @property
    def profile_obj(self) -> Any:
        """The DRAGIN Table 9 profile of this run (:mod:`active_rag.profiles`), or None."""
        from active_rag.profiles import get_profile, profile_for_dataset

        if self.profile == "none":
            return None
        return get_profile(self.profile) if self.profile else profile_for_dataset(self.dataset)

    @property
    def answer_tokens(self) -> int:
        """``max_new_tokens``, else the profile's generation length, else 128."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        profile = self.profile_obj
        return profile.generate_length if profile is not None else 128

    @property
    def router_name(self) -> str:
        if self.router is None:
            return "ta-are" if self.dataset == "retrievalqa" else "none"
        return self.router

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        out["router"] = self.router_name
        return out


@dataclass(frozen=True)
class MethodSpec:
    """One method to evaluate: a preset (optionally with trigger fields overridden) or a trigger + query pair."""

    name: str
    preset: str | None = None
    trigger: str | None = None
    query: str | None = None
    trigger_kwargs: tuple[tuple[str, Any], ...] = ()
    initial_retrieval: bool = False
    router: str | None = None
    sweep: tuple[str, float] | None = None

    @property
    def base(self) -> str:
        """The method name without the sweep suffix."""
        return self.name.split("@", 1)[0]


def _trigger_name(spec: MethodSpec) -> str:
    from active_rag.presets import PRESETS
    from active_rag.triggers import TRIGGER_ALIASES

    name = PRESETS[spec.preset].trigger if spec.preset else str(spec.trigger)
    return TRIGGER_ALIASES.get(name, name)


def _trigger_fields(trigger: str) -> dict[str, dataclasses.Field[Any]]:
    from active_rag.triggers import TRIGGERS

    return {f.name: f for f in dataclasses.fields(TRIGGERS[trigger])}


def _retrieves(spec: MethodSpec) -> bool:
    from active_rag.triggers import TRIGGERS

    return TRIGGERS[_trigger_name(spec)].action != "never" or spec.initial_retrieval


def _pairs(triggers: list[str], queries: list[str], grid: bool) -> list[tuple[str, str]]:
    if not triggers and not queries:
        return []
    if not triggers or not queries:
        raise ValueError("An ablation needs both --trigger and --query (each may be a comma-separated list).")
    if grid:
        return [(t, q) for t in triggers for q in queries]
    if len(triggers) == 1:
        return [(triggers[0], q) for q in queries]
    if len(queries) == 1:
        return [(t, queries[0]) for t in triggers]
    if len(triggers) != len(queries):
        raise ValueError(
            f"{len(triggers)} triggers and {len(queries)} queries cannot be paired: give lists of equal length, "
            "a single trigger or query, or --grid for every combination."
        )
    return list(zip(triggers, queries, strict=True))


def build_methods(config: EvalConfig) -> list[MethodSpec]:
    """The methods a config asks for, in order: presets, then trigger x query ablations; each expanded
    over the sweep values when its trigger has the swept field; with the router attached where it retrieves."""
    from active_rag.presets import PRESETS
    from active_rag.queries import QUERIES
    from active_rag.routing import ROUTERS
    from active_rag.triggers import TRIGGER_ALIASES, TRIGGERS

    router = config.router_name
    if router not in (*ROUTERS, "none"):
        raise UnknownNameError("router", router, [*ROUTERS, "none"])
    pairs = _pairs(config.triggers, config.queries, config.grid)
    methods = config.methods
    if methods is None:
        if pairs:
            methods = []
        elif config.dataset == "retrievalqa":
            methods = list(_DEFAULT_METHODS_RETRIEVALQA)
        else:
            methods = list(PRESETS)
    specs: list[MethodSpec] = []
    for name in methods:
        if name not in PRESETS:
            raise UnknownNameError("method", name, PRESETS)
        specs.append(MethodSpec(name=name, preset=name))
    for trig, query in pairs:
        key = TRIGGER_ALIASES.get(trig, trig)
        if key not in TRIGGERS:
            raise UnknownNameError("trigger", trig, list(TRIGGERS) + list(TRIGGER_ALIASES))
        if query not in QUERIES:
            raise UnknownNameError("query formulator", query, QUERIES)
        specs.append(MethodSpec(name=f"{key}+{query}", trigger=key, query=query, initial_retrieval=config.initial_retrieval))
    if not specs:
        raise ValueError("No method to run: pass --methods and/or --trigger with --query.")
    if config.sweep is not None:
        param, values = config.sweep
        if not values:
            raise ValueError(f"--sweep {param}= needs at least one value.")
        swept: list[MethodSpec] = []
        for spec in specs:
            fields = _trigger_fields(_trigger_name(spec))
            if param not in fields:
                swept.append(spec)
                continue
            cast = int if fields[param].type in (int, "int") else float
            for value in values:
                v = cast(value)
                swept.append(dataclasses.replace(
                    spec, name=f"{spec.name}@{param}={v:g}", trigger_kwargs=((param, v),), sweep=(param, float(v))
                ))
        if all(s.sweep is None for s in swept):
            raise ValueError(
                f"No chosen method has a trigger with a {param!r} field to sweep (RindTrigger and LowConfidenceTrigger "
                "have theta): pick e.g. --methods dragin,flare."
            )
        specs = swept
    if router != "none":
        specs = [
            dataclasses.replace(s, name=s.name.replace(s.base, f"{s.base}+{router}", 1), router=router)
            if _retrieves(s) else s
            for s in specs
        ]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"Duplicate methods: {names}.")
    return specs


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


def _router_options(config: EvalConfig, data_dir: Path | None) -> dict[str, Any]:
    """TA-ARE's similarity-selected [Yes] demonstrations (``ta_are_demos="similar"``): the pool is the dataset's
    questions that need retrieval (the asked question itself is never shown), ranked by MiniLM cosine (the
    paper uses SimCSE)."""
    if config.ta_are_demos != "similar" or config.router_name != "ta-are":
        return {}
    from active_rag.embeddings import MiniLMEncoder
    from active_rag.routing import Demonstration

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
    from active_rag.loop import ActiveRAG
    from active_rag.presets import PRESETS
    from active_rag.triggers import make_trigger

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
    if spec.preset is not None:
        preset = PRESETS[spec.preset]
        overrides: dict[str, Any] = {}
        if preset.prompt in _REPLACEABLE_PROMPTS:
            overrides["prompt"] = template
        if spec.trigger_kwargs:
            from active_rag.presets import preset_kwargs

            profiled = preset_kwargs(spec.preset, config.profile_obj)["trigger"]  # the profile's segment length
            overrides["trigger"] = make_trigger(preset.trigger, **{**dict(preset.trigger_kwargs), **dict(spec.trigger_kwargs),
                                                                  "max_tokens": profiled.max_tokens})
        return ActiveRAG.from_preset(spec.preset, lm, retriever, **overrides, **common)
    trigger_name = str(spec.trigger)
    prompt: str | PromptTemplate = _OWN_PROMPT_TRIGGERS.get(trigger_name, template)
    return ActiveRAG(
        lm,
        retriever,
        trigger=make_trigger(trigger_name, **dict(spec.trigger_kwargs)),
        query=str(spec.query),
        prompt=prompt,
        initial_retrieval=spec.initial_retrieval,
        **common,
    )


def _engine_key(rag: ActiveRAG, config: EvalConfig, model_name: str) -> str:
    """A short hash of everything that changes a method's outputs, stored in each row to guard resumes."""
    desc = {
        **rag.describe(),
        "prompt_text": [rag.prompt.direct, rag.prompt.with_docs],
        "max_new_tokens": rag.max_new_tokens,
        "answer_phrase": rag.answer_phrase,
        "router": getattr(rag.router, "name", None),
        "model": model_name,
        "dataset": config.dataset,
    }
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


def load_corpus_index(dataset: str, data_dir: Path | None = None, cache: Path | None = None) -> tuple[Any, Path, bool]:
    """The BM25 index of a dataset's corpus: loaded from ``cache/<dataset>-<hash>`` when built before (the
    hash covers the corpus path, mtime and size), else built and saved there. Returns (index, folder, loaded)."""
    from active_rag.retrieval import BM25Index

    path = corpus_path(dataset, data_dir)
    if not path.is_file():
        raise CorpusError(f"The {dataset} corpus {str(path)!r} does not exist: check --data-dir.")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_mtime_ns}|{st.st_size}".encode()).hexdigest()[:12]
    folder = (cache or default_index_cache()) / f"{dataset}-{key}"
    if folder.is_dir():
        try:
            return BM25Index.load(folder), folder, True
        except CorpusError as exc:
            warnings.warn(f"Rebuilding the cached index {folder} ({exc}).", stacklevel=2)
            shutil.rmtree(folder, ignore_errors=True)
    index = BM25Index.from_jsonl(path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        index.save(tmp)
        os.replace(tmp, folder)
    except OSError:  # another process saved it first
        shutil.rmtree(tmp, ignore_errors=True)
    return index, folder, False


# ------------------------------------------------------------------------------------------------ scoring


def score_example(example: Example, result: ActiveRAGResult) -> tuple[str | None, dict[str, Any]]:
    """The extracted answer and the per-question metrics of one result (numbers, ``None`` when undefined)."""
    text = result.answer
    answer = extract_answer(text)
    m: dict[str, Any] = {}
    if example.kind == "qa":
        m.update(qa_scores(answer or "", example.answers))
    elif example.kind == "bool":
        m["accuracy"] = strategyqa_accuracy(text, bool(example.gold_bool))
    else:  # RetrievalQA scores the whole response, as its authors did
        m["match"] = match(text, example.answers)
        m["match_folded"] = match_accent_folded(text, example.answers)
    n = len(result.retrievals)
    m["retrievals"] = n
    m["retrieved"] = float(n > 0)
    m["generated_tokens"] = result.generated_tokens
    m["answer_tokens"] = len(result.tokens)
    m["answer_found"] = float(answer is not None)
    checks = len(result.decisions)
    fired = sum(1 for d in result.decisions if d.fire)
    m["checks"] = checks
    m["fired"] = fired
    gold = set(example.gold_passage_ids)
    if gold:
        hits = sum(1 for r in result.retrievals if gold & set(r.passage_ids))
        found = {p.id for p in result.passages} & gold
        m["gold_hits"] = hits
        m["gold_hit_rate"] = hits / n if n else None
        m["gold_recall"] = len(found) / len(gold)
    if example.kind == "retrievalqa":
        m["retrieve_decision"] = float(result.route.retrieve if result.route else n > 0)
        if example.needs_retrieval is not None:
            m["needs_retrieval"] = float(example.needs_retrieval)
    return answer, m


def summarize_rows(rows: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, float | None]:
    """Per-method summary: means of the per-question metrics, renamed where a rate reads better, plus
    micro-averaged rates (gold-hit share of all retrievals, trigger fire rate) and RetrievalQA decision metrics."""
    metrics = [r["metrics"] for r in rows]
    base = [{**m, "wall_time_s": r.get("wall_time_s"), "retrieval_time_s": r.get("retrieval_time_s")}
            for r, m in zip(rows, metrics, strict=True)]
    out: dict[str, float | None] = dict(aggregate(base))
    out["retrievals_per_question"] = out.pop("retrievals", 0.0)
    out["retrieval_rate"] = out.pop("retrieved", 0.0)  # share of questions with at least one retrieval
    out["wall_time_per_question_s"] = out.pop("wall_time_s", None)
    total_time = sum(float(r.get("wall_time_s") or 0.0) for r in rows)
    total_ret = sum(float(r.get("retrieval_time_s") or 0.0) for r in rows)
    out["retrieval_time_share"] = total_ret / total_time if total_time else None
    out.pop("retrieval_time_s", None)
    tokens = sum(float(m.get("generated_tokens") or 0.0) for m in metrics)
    out["tokens_per_second"] = tokens / total_time if total_time else None
    checks = sum(float(m.get("checks") or 0.0) for m in metrics)
    out["trigger_fire_rate"] = sum(float(m.get("fired") or 0.0) for m in metrics) / checks if checks else None
    out.pop("checks", None)
    out.pop("fired", None)
    gold_rows = [m for m in metrics if "gold_hits" in m]
    if gold_rows:
        n_ret = sum(float(m["retrievals"]) for m in gold_rows)
        out["gold_hit_rate"] = sum(float(m["gold_hits"]) for m in gold_rows) / n_ret if n_ret else None
        out.pop("gold_hits", None)
    if dataset == "retrievalqa":
        out.pop("retrieve_decision", None)
        out.pop("needs_retrieval", None)
        labelled = [m for m in metrics if m.get("needs_retrieval") is not None]
        if labelled:
            dm = decision_metrics([bool(m["retrieve_decision"]) for m in labelled], [bool(m["needs_retrieval"]) for m in labelled])
            for key in ("accuracy", "precision", "recall", "f1", "retrieval_rate"):
                out[f"decision_{key}"] = dm[key]
            # RetrievalQA's "retrieval accuracy": the share of need-retrieval questions retrieved on (recall).
            out["retrieval_accuracy"] = dm["recall"] if dm["tp"] + dm["fn"] else None
    errors = sum(1 for r in rows if r.get("error"))
    out["errors"] = float(errors)
    return out


# ------------------------------------------------------------------------------------------------ files


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+@=,-]+", "_", name).strip("_") or "model"


def _read_rows(path: Path, key: str) -> dict[str, dict[str, Any]]:
    """Finished rows of a method file (by question id) made with the same engine settings; rewrites the file
    without malformed lines (a run killed mid-write) or rows from other settings, with a warning, and adds the
    newline a valid last row lacks, so that rows appended next start on a line of their own."""
    from active_rag.evaluation.store import read_rows_file

    if not path.is_file():
        return {}
    rows: dict[str, dict[str, Any]] = {}
    values, bad, rewrite = read_rows_file(path)
    dropped = len(bad)
    for row in values:
        if not isinstance(row, dict) or "id" not in row or row.get("engine_key") != key:
            dropped += 1
            continue
        rows[str(row["id"])] = row
    if dropped:
        where = f" (malformed line(s) {', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''})" if bad else ""
        warnings.warn(
            f"{path}: dropped {dropped} row(s) that are malformed or were made with other settings{where}; "
            "they will be rerun.",
            stacklevel=3,
        )
    if dropped or rewrite:
        _write_rows(path, rows.values())
    return rows


def _write_rows(path: Path, rows: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    os.replace(tmp, path)


def _fmt(value: Any, pct: bool = False, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:.{digits}f}" if pct else f"{value:.{digits}f}"


def format_results_table(summary: Mapping[str, Mapping[str, Any]], dataset: str) -> str:
    """The comparison as a markdown table (scores in percent)."""
    primary = PRIMARY_METRICS[dataset]
    cols: list[tuple[str, str, bool, int]] = [(k, {"em": "EM", "f1": "F1", "accuracy": "Acc", "match": "Match",
                                                  "match_folded": "Match (accent-folded)"}[k], True, 1) for k in primary]
    if dataset in ("hotpotqa", "2wikimultihopqa"):
        cols += [("precision", "P", True, 1), ("recall", "R", True, 1)]
    if dataset == "retrievalqa":
        cols += [("retrieval_accuracy", "Retrieval acc", True, 1), ("decision_precision", "Dec. P", True, 1),
                 ("decision_f1", "Dec. F1", True, 1)]
    cols += [("retrievals_per_question", "Ret/q", False, 2)]
    if any(m.get("gold_hit_rate") is not None for m in summary.values()):
        cols += [("gold_hit_rate", "Gold hit %", True, 1)]
    cols += [("trigger_fire_rate", "Fire %", True, 1), ("generated_tokens", "Tokens/q", False, 1),
             ("wall_time_per_question_s", "s/q", False, 1), ("n", "n", False, 0)]
    head = "| Method | " + " | ".join(c[1] for c in cols) + " |"
    sep = "|---|" + "|".join("---:" for _ in cols) + "|"
    lines = [head, sep]
    for method, m in summary.items():
        lines.append(f"| {method} | " + " | ".join(_fmt(m.get(k), pct, d) for k, _, pct, d in cols) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ run


@dataclass
class EvalReport:
    """What :func:`run_eval` produced: per-method summaries and rows, sweep rows, the table and the file paths."""

    config: EvalConfig
    out_dir: Path
    model: str
    methods: list[MethodSpec]
    summary: dict[str, dict[str, float | None]]
    rows: dict[str, list[dict[str, Any]]]
    sweep: list[dict[str, Any]]
    markdown: str
    files: dict[str, Path]
    index: dict[str, Any] = field(default_factory=dict)
    data_dir: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.config.dataset,
            "model": self.model,
            "config": {**self.config.to_dict(), "data_dir": str(self.data_dir or self.config.data_dir)},
            "methods": self.summary,
            "method_specs": {s.name: dataclasses.asdict(s) for s in self.methods},
            "sweep": self.sweep,
            "primary_metrics": list(PRIMARY_METRICS[self.config.dataset]),
            "index": self.index,
        }


@contextlib.contextmanager
def _system_prompt(lm: ActiveLM, prompt: str | None) -> Iterator[None]:
    """RetrievalQA's authors sent their system message with every chat prompt; set it for the run only."""
    if prompt is None:
        yield
        return
    old = lm.system_prompt
    lm.system_prompt = prompt
    try:
        yield
    finally:
        lm.system_prompt = old


def _decisions_summary(result: ActiveRAGResult) -> dict[str, Any]:
    scores = [d.score for d in result.decisions if d.score is not None]
    return {
        "checks": len(result.decisions),
        "fired": sum(1 for d in result.decisions if d.fire),
        "max_score": max(scores) if scores else None,
        "reasons": [d.reason for d in result.decisions if d.fire][:10],
    }


def _run_one(rag: ActiveRAG, retriever: _TimedRetriever | None, example: Example) -> dict[str, Any]:
    before_calls = retriever.calls if retriever else 0
    before_s = retriever.seconds if retriever else 0.0
    start = time.perf_counter()
    error = None
    try:
        result = rag.run(example.question)
    except ActiveRAGError as exc:  # recorded and scored 0 so one bad question does not stop a long run
        error = f"{type(exc).__name__}: {exc}"
        result = ActiveRAGResult(question=example.question, answer="", method=rag.method)
    wall = time.perf_counter() - start
    answer, metrics = score_example(example, result)
    data = result.to_dict()
    row: dict[str, Any] = {
        "id": example.id,
        "question": example.question,
        "gold": example.answers,
        "prediction": result.answer,
        "answer": answer,
        "metrics": metrics,
        "wall_time_s": wall,
        "retrieval_time_s": (retriever.seconds - before_s) if retriever else 0.0,
        "retriever_calls": (retriever.calls - before_calls) if retriever else 0,
        "trace": data["retrievals"],
        "decisions": _decisions_summary(result),
        "route": data["route"],
        "warnings": data["warnings"],
        "prompt_tokens": data["prompt_tokens"],
    }
    if example.gold_passage_ids:
        row["gold_passage_ids"] = example.gold_passage_ids
    if result.route is not None and example.kind == "retrievalqa":
        row["route_authors_reading"] = retrievalqa_decision(result.route.raw_output.replace("\n", " "))
    if error:
        row["error"] = error
    return row


def _sweep_rows(specs: Sequence[MethodSpec], summary: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for spec in specs:
        if spec.sweep is None or spec.name not in summary:
            continue
        param, value = spec.sweep
        rows.append({"method": spec.base, "run": spec.name, "param": param, "value": value, **summary[spec.name]})
    return rows


def resolve_data_dir(config: EvalConfig) -> Path:
    """``config.data_dir``, else :func:`~active_rag.evaluation.datasets.default_data_dir`; a :class:`CorpusError` if neither."""
    data_dir = config.data_dir if config.data_dir is not None else default_data_dir()
    if data_dir is None:
        raise CorpusError("No evaluation data directory found: pass --data-dir (or set $ACTIVE_RAG_DATA).")
    return Path(data_dir)


def plan_eval(config: EvalConfig) -> tuple[list[MethodSpec], Path, list[Example]]:
    """Check ``config`` before anything runs: its methods, the plotting extra, the data folder and the questions."""
    specs = build_methods(config)
    if config.plots:  # fail before the run, not after it
        from active_rag._optional import require_matplotlib

        require_matplotlib("The PNG plots of an evaluation (skip them with --no-plots, or plots=False)")
    data_dir = resolve_data_dir(config)
    return specs, data_dir, load_dataset(config.dataset, data_dir, limit=config.limit)


def eval_output_dir(config: EvalConfig, model_name: str) -> Path:
    """``config.out_dir/<dataset>/<model>``: where a run writes its JSONL files, results.md and summary.json."""
    return config.out_dir / config.dataset / _safe_name(Path(model_name).name if os.sep in model_name else model_name)


def method_path(out: Path, spec: MethodSpec) -> Path:
    """The per-question JSONL file of one method."""
    return out / f"{_safe_name(spec.name)}.jsonl"


class EvalWorker:
    """The question side of a run: one model, the dataset's shared BM25 index, the router and one engine per
    method. :meth:`run` answers and scores one question and returns its JSONL row.

    :func:`run_eval` uses one in its own process; :mod:`active_rag.evaluation.distributed` one per Ray actor.
    Call :meth:`engine_key` and :meth:`run` inside :meth:`system_prompt` (RetrievalQA's system message).
    """

    def __init__(
        self,
        config: EvalConfig,
        lm: ActiveLM | None = None,
        specs: Sequence[MethodSpec] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        from active_rag.routing import make_router

        self.config = config
        self.specs = {s.name: s for s in (specs if specs is not None else build_methods(config))}
        self.data_dir = data_dir if data_dir is not None else resolve_data_dir(config)
        if lm is None:
            from active_rag.model import ActiveLM

            lm = ActiveLM.load(config.model, **config.model_options())
        self.lm = lm
        self.model_name = str(lm.name or config.model)
        self.index_info: dict[str, Any] = {}
        self.shared: _TimedRetriever | None = None
        if config.dataset != "retrievalqa" and any(_retrieves(s) for s in self.specs.values()):
            t0 = time.perf_counter()
            index, folder, loaded = load_corpus_index(config.dataset, self.data_dir, config.index_cache)
            self.index_info = {"path": str(folder), "loaded_from_cache": loaded, "seconds": time.perf_counter() - t0,
                               "passages": len(index)}
            self.shared = _TimedRetriever(index)
        self.router = (make_router(config.router_name, lm, **_router_options(config, self.data_dir))
                       if any(s.router for s in self.specs.values()) else None)
        self.system = RETRIEVALQA_SYSTEM_PROMPT if config.dataset == "retrievalqa" else None
        self._engines: dict[str, tuple[ActiveRAG, str]] = {}

    def system_prompt(self) -> contextlib.AbstractContextManager[None]:
        """Set the dataset's system prompt on the model for the duration of a ``with`` block."""
        return _system_prompt(self.lm, self.system)

    def _engine(self, name: str) -> tuple[ActiveRAG, str]:
        if name not in self._engines:
            spec = self.specs[name]
            probe = build_engine(spec, self.lm, self.shared or _ContextsRetriever([]), self.config, self.router)
            self._engines[name] = (probe, _engine_key(probe, self.config, self.model_name))
        return self._engines[name]

    def engine_key(self, name: str) -> str:
        """The hash of method ``name``'s settings stored in its rows (resumes skip only rows with this key)."""
        return self._engine(name)[1]

    def run(self, name: str, example: Example) -> dict[str, Any]:
        """Answer and score ``example`` with method ``name``; the row written to the method's JSONL file."""
        probe, key = self._engine(name)
        # one timed retriever and engine per question, so that concurrent questions (batch_size > 1) count
        # their own retrieval calls and seconds; building an engine is cheap (no model work)
        inner = _ContextsRetriever(example.contexts) if self.config.dataset == "retrievalqa" else None
        if inner is None and self.shared is not None:
            inner = self.shared.inner
        retriever = _TimedRetriever(inner) if inner is not None else None
        rag = build_engine(self.specs[name], self.lm, retriever, self.config, self.router) if retriever else probe
        row = _run_one(rag, retriever, example)
        row["method"] = name
        row["engine_key"] = key
        row["prompt_mode"] = rag.prompt_mode
        row["threshold"] = getattr(rag.trigger, "theta", None)
        row["threshold_source"] = getattr(rag.trigger, "threshold_source", None)
        return row


def _answer_all(worker: EvalWorker, name: str, todo: Sequence[Example], batch_size: int) -> Iterator[dict[str, Any]]:
    """Rows of ``todo`` as they finish: one at a time, or up to ``batch_size`` questions in flight whose decode
    steps the model's scheduler batches (each row records its own in-flight wall time)."""
    if batch_size <= 1 or len(todo) <= 1:
        for example in todo:
            yield worker.run(name, example)
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    worker.engine_key(name)  # build the probe engine once, before the threads
    with ThreadPoolExecutor(max_workers=batch_size, thread_name_prefix="active-rag-eval") as pool:
        waiting = iter(todo)
        running = {pool.submit(worker.run, name, ex) for ex in itertools.islice(waiting, batch_size)}
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
                nxt = next(waiting, None)
                if nxt is not None:
                    running.add(pool.submit(worker.run, name, nxt))


def _prompt_postfix(row: Mapping[str, Any]) -> str:
    tokens = row.get("prompt_tokens") or {}
    return f"prompt tokens: {tokens.get('cached', 0)} cached, {tokens.get('prefilled', 0)} prefilled"


def finish_eval(
    config: EvalConfig,
    worker_info: Mapping[str, Any],
    specs: Sequence[MethodSpec],
    examples: Sequence[Example],
    done: Mapping[str, Mapping[str, dict[str, Any]]],
) -> EvalReport:
    """Summaries, ``results.md``, plots and ``summary.json`` from the finished rows (``done[method][question id]``).

    ``worker_info``: ``out`` (output folder), ``model_name``, ``index_info`` and ``data_dir`` of the run."""
    out = Path(worker_info["out"])
    model_name = str(worker_info["model_name"])
    summary: dict[str, dict[str, float | None]] = {}
    all_rows: dict[str, list[dict[str, Any]]] = {}
    files: dict[str, Path] = {spec.name: method_path(out, spec) for spec in specs}
    for spec in specs:
        rows = [done[spec.name][ex.id] for ex in examples if ex.id in done.get(spec.name, {})]
        all_rows[spec.name] = rows
        summary[spec.name] = summarize_rows(rows, config.dataset) if rows else {"n": 0.0}

    sweep = _sweep_rows(specs, summary)
    profile = config.profile_obj
    markdown = (f"# {config.dataset} / {model_name} ({len(examples)} questions)\n\nPrompt mode: {config.prompt_mode}; "
                f"profile: {profile.name if profile else 'none'}\n\n" + format_results_table(summary, config.dataset))
    if sweep:
        param = sweep[0]["param"]
        markdown += f"\n## Sweep over {param}\n\n" + format_results_table(
            {f"{r['method']} {param}={r['value']:g}": r for r in sweep}, config.dataset)
    files["results"] = out / "results.md"
    files["results"].write_text(markdown, encoding="utf-8")
    report = EvalReport(config=config, out_dir=out, model=model_name, methods=list(specs), summary=summary,
                        rows=all_rows, sweep=sweep, markdown=markdown, files=files,
                        index=dict(worker_info.get("index_info") or {}), data_dir=Path(worker_info["data_dir"]))
    files["summary"] = out / "summary.json"
    if config.plots:
        from active_rag.evaluation.plots import plot_methods, plot_sweep

        files["methods_plot"] = plot_methods(report.to_dict(), out / "methods.png")
        if sweep:
            files["sweep_plot"] = plot_sweep(sweep, out / "sweep.png")
    files["summary"].write_text(json.dumps({**report.to_dict(), "files": {k: str(v) for k, v in files.items()}},
                                           indent=2, default=str) + "\n", encoding="utf-8")
    return report


def run_eval(config: EvalConfig, lm: ActiveLM | None = None, progress: bool = True) -> EvalReport:
    """Run every method of ``config`` on the dataset; write per-question JSONL, ``results.md``, ``summary.json``
    and PNG plots under ``config.out_dir/<dataset>/<model>/``; return the :class:`EvalReport`.

    ``lm`` defaults to ``ActiveLM.load(config.model)``. With ``config.resume`` the questions already in a
    method's JSONL (made with the same engine settings) are not rerun. (``active-rag eval --ray`` shards the
    same work across Ray actors: :func:`active_rag.evaluation.distributed.run_eval_ray`.)
    """
    from tqdm.auto import tqdm

    specs, data_dir, examples = plan_eval(config)
    worker = EvalWorker(config, lm, specs=specs, data_dir=data_dir)
    out = eval_output_dir(config, worker.model_name)
    out.mkdir(parents=True, exist_ok=True)

    done_by_method: dict[str, dict[str, dict[str, Any]]] = {}
    with worker.system_prompt():
        for spec in specs:
            path = method_path(out, spec)
            key = worker.engine_key(spec.name)
            if not config.resume and path.exists():
                path.unlink()
            done = _read_rows(path, key)
            todo = [ex for ex in examples if ex.id not in done]
            bar = tqdm(total=len(todo), desc=spec.name, unit="q", disable=not progress, leave=True)
            with open(path, "a", encoding="utf-8") as fh:
                for row in _answer_all(worker, spec.name, todo, config.batch_size):
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fh.flush()
                    done[str(row["id"])] = row
                    bar.update(1)
                    bar.set_postfix_str(_prompt_postfix(row), refresh=False)
            bar.close()
            done_by_method[spec.name] = done

    info = {"out": out, "model_name": worker.model_name, "index_info": worker.index_info, "data_dir": data_dir}
    return finish_eval(config, info, specs, examples, done_by_method)
