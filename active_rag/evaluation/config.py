"""Evaluation settings: :class:`EvalConfig`, the methods of a run (:class:`MethodSpec`, :func:`build_methods`)
and the datasets' evaluation prompts as engine templates (:func:`eval_prompt_template`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from active_rag.errors import UnknownNameError
from active_rag.evaluation.datasets import DATASETS, DEFAULT_SPLIT, check_split
from active_rag.evaluation.prompts import (
    CONTEXT_FOOTER,
    EXEMPLARS,
    INSTRUCTIONS,
    build_eval_prompt,
    format_dragin_context,
    format_retrievalqa_evidence,
)
from active_rag.components.prompts import PromptTemplate
from active_rag.types import Passage

if TYPE_CHECKING:  # pragma: no cover
    pass


#: SmolLM2-135M scores near zero on multi-hop QA; the 0.5B Qwen coder model is the smallest usable one.
DEFAULT_EVAL_MODEL = "qwen2.5-coder-0.5b"

#: The headline metrics of each dataset (keys of the per-method summary).
EVAL_TODAY = "2026-11-23"
"""The date TA-ARE's prompt gives in evaluations unless ``--today`` names another: fixed, so that a row never
depends on the day it ran (the committed RetrievalQA rows were made with it); recorded in every row."""

PRIMARY_METRICS: dict[str, tuple[str, ...]] = {
    "hotpotqa": ("em", "f1"),
    "2wikimultihopqa": ("em", "f1"),
    "pydocs": ("em", "f1"),
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
    """A :class:`~active_rag.components.prompts.PromptTemplate` whose documents are formatted as the papers' eval prompts do:
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
        # the structure of the chat-turns and completion prompt modes (active_rag.components.prompt_layout)
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
    ``split``: the question file (``dev``, or HotpotQA's ``dev-b``: rows go to ``<out>/hotpotqa-dev-b/<model>``).
    ``hide_titles``: every passage is indexed and shown with the title ``doc-<n>.txt`` (its position in the corpus
    file, from 0) instead of its own; gold passages are still found by their real titles.
    """

    dataset: str
    data_dir: Path | None = None
    split: str = DEFAULT_SPLIT
    hide_titles: bool = False
    methods: list[str] | None = None
    triggers: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    grid: bool = False
    initial_retrieval: bool = False
    context: str | None = None
    """A context policy for every method (:mod:`active_rag.components.context`); None: each method's own."""
    answer_options: bool = False
    """Every method answers a choice question with one of its options (:mod:`active_rag.answer.options`);
    presets run as ``NAME@options`` unless they already do."""
    ask_same: bool = False
    """Every method answers "Do A and B have the same X?" by the X the model names for each
    (:mod:`active_rag.answer.same_value`); presets run as ``NAME@same`` unless they already do."""
    router: str | None = None
    model: str = DEFAULT_EVAL_MODEL
    limit: int | None = None
    out_dir: Path = Path("runs/eval")
    top_k: int = 3
    max_new_tokens: int | None = None  # None: the profile's generation length (DRAGIN Table 9), else 128
    max_retrievals: int | None = None  # None: no cap (the engine's generated-token guard stops runaways)
    sweep: tuple[str, list[float]] | None = None
    profile: str | None = None  # DRAGIN Table 9 profile; None: the dataset's; "none": no profile
    prompt_mode: str = "auto"  # auto (the model's own), single, chat-turns or completion (active_rag.components.prompt_layout)
    ta_are_demos: str = "fixed"  # fixed: the authors' 2 [Yes] / 2 [No]; similar: the 2 most similar [Yes] of the pool
    today: str = EVAL_TODAY  # TA-ARE's "Today is ...": pinned, so that rows never depend on the day they ran
    baseline: str | None = None  # paired comparison against this method; None: sr-rag when run; "none": no comparison
    resume: bool = True
    retry_failed: bool = True  # on resume, answer again the questions whose rows record a failure (an ``error``)
    index_cache: Path | None = None
    plots: bool = True
    batch_size: int = 1
    """Questions decoded together (one batched forward per step, continuous batching); rows are the same."""
    device: str = "auto"
    dtype: str | None = None
    weights: str = "auto"
    """float32, int8, int4, mixed or auto (mixed on the CPU): :mod:`active_rag.models.weights`. Rows of packed weights go to
    ``<model>-<weights>`` beside the float32 folder (:func:`active_rag.evaluation.runner.eval_output_dir`)."""
    prefix_cache: bool = True
    prefix_cache_mb: float | None = None
    output_dir: Path | None = field(default=None, init=False, repr=False, compare=False)
    """Set by a run once its model is loaded: the folder its rows go to (:func:`eval_output_dir`)."""

    @property
    def resolved_weights(self) -> str:
        """``weights`` with ``auto`` resolved for this run's device."""
        from active_rag.models.devices import resolve_device
        from active_rag.models.weights import resolve_weights

        return resolve_weights(self.weights, resolve_device(self.device))

    def model_options(self) -> dict[str, Any]:
        """Keyword arguments of ``ActiveLM.load`` for this run."""
        options: dict[str, Any] = {"device": self.device, "dtype": self.dtype, "prefix_cache": self.prefix_cache,
                                   "weights": self.weights}
        if self.prefix_cache_mb is not None:
            options["prefix_cache_mb"] = self.prefix_cache_mb
        return options

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise UnknownNameError("dataset", self.dataset, DATASETS)
        check_split(self.dataset, self.split)
        if self.hide_titles and self.dataset == "retrievalqa":
            raise ValueError("--hide-titles hides the titles of a corpus, but retrievalqa reads each question's own "
                             "contexts: drop --hide-titles or pick another dataset.")
        from active_rag.validation import MAX_RETRIEVALS_HINT, MAX_TOP_K, TOP_K_HINT, check_int, check_number

        # the engine checks these too, but only once the model has loaded: fail before
        check_int("top_k", self.top_k, minimum=1, maximum=MAX_TOP_K, hint=TOP_K_HINT)
        if self.max_new_tokens is not None:
            check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        if self.max_retrievals is not None:
            check_int("max_retrievals", self.max_retrievals, minimum=0, hint=MAX_RETRIEVALS_HINT)
        check_int("batch_size", self.batch_size, minimum=1, hint="It is the number of questions decoded together, e.g. 8")
        if self.prefix_cache_mb is not None:
            check_number("prefix_cache_mb", self.prefix_cache_mb, minimum=0, hint="It is the prefix KV cache's memory bound in MiB")
        from active_rag.components.prompt_layout import check_prompt_mode

        check_prompt_mode(self.prompt_mode)
        from active_rag.models.weights import check_weights

        self.weights = check_weights(self.weights)
        self.profile_obj  # UnknownNameError for a bad profile
        from active_rag.validation import check_date

        self.today = check_date("today", self.today).isoformat()  # InvalidOptionError for "notadate"
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
        """The DRAGIN Table 9 profile of this run (:mod:`active_rag.components.profiles`), or None."""
        from active_rag.components.profiles import get_profile, profile_for_dataset

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
    def data_name(self) -> str:
        """The dataset and its split as the output folder names them: ``hotpotqa``, ``hotpotqa-dev-b``."""
        return self.dataset if self.split == DEFAULT_SPLIT else f"{self.dataset}-{self.split}"

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


#: ``--sweep check_theta=...``: the answer check's theta (:class:`~active_rag.answer.check.AnswerCheck`), not the trigger's
CHECK_THETA = "check_theta"


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
    context: str | None = None
    answer_options: bool = False
    ask_same: bool = False
    check_theta: float | None = None
    """The answer check's ``theta`` (``--sweep check_theta=...``), replacing the preset's."""

    @property
    def base(self) -> str:
        """The method name without the sweep suffix."""
        return self.name.split("@", 1)[0]


def _trigger_name(spec: MethodSpec) -> str:
    from active_rag.components.presets import PRESETS
    from active_rag.components.triggers import TRIGGER_ALIASES

    name = PRESETS[spec.preset].trigger if spec.preset else str(spec.trigger)
    return TRIGGER_ALIASES.get(name, name)


def _trigger_fields(trigger: str) -> dict[str, dataclasses.Field[Any]]:
    from active_rag.components.triggers import TRIGGERS

    return {f.name: f for f in dataclasses.fields(TRIGGERS[trigger])}


def _retrieves(spec: MethodSpec) -> bool:
    from active_rag.components.triggers import TRIGGERS

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
    from active_rag.answer.check import AnswerCheck
    from active_rag.components.presets import PRESETS
    from active_rag.components.queries import QUERIES
    from active_rag.components.routing import ROUTERS
    from active_rag.components.triggers import TRIGGER_ALIASES, TRIGGERS

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
    from active_rag.components.context import make_context

    if config.context is not None:
        make_context(config.context)  # an unknown name or setting: its typed error before any model work
    for name in methods:
        if name not in PRESETS:
            raise UnknownNameError("method", name, PRESETS)
        preset_ir = config.initial_retrieval and not PRESETS[name].settings.initial_retrieval
        options = config.answer_options and not PRESETS[name].answer.options
        same = config.ask_same and not PRESETS[name].answer.same
        preset_suffix = (("@ir" if preset_ir else "") + (f"@context={config.context}" if config.context else "")
                         + ("@options" if options else "") + ("@same" if same else ""))
        specs.append(MethodSpec(name=name + preset_suffix, preset=name, initial_retrieval=preset_ir, context=config.context,
                                answer_options=options, ask_same=same))
    for trig, query in pairs:
        key = TRIGGER_ALIASES.get(trig, trig)
        if key not in TRIGGERS:
            raise UnknownNameError("trigger", trig, list(TRIGGERS) + list(TRIGGER_ALIASES))
        if query not in QUERIES:
            raise UnknownNameError("query formulator", query, QUERIES)
        suffix = (("@ir" if config.initial_retrieval else "") + (f"@context={config.context}" if config.context else "")
                  + ("@options" if config.answer_options else "") + ("@same" if config.ask_same else ""))
        specs.append(MethodSpec(name=f"{key}+{query}{suffix}", trigger=key, query=query,
                                initial_retrieval=config.initial_retrieval, context=config.context,
                                answer_options=config.answer_options, ask_same=config.ask_same))
    if not specs:
        raise ValueError("No method to run: pass --methods and/or --trigger with --query.")
    if config.sweep is not None:
        param, values = config.sweep
        if not values:
            raise ValueError(f"--sweep {param}= needs at least one value.")
        swept: list[MethodSpec] = []
        for spec in specs:
            if param == CHECK_THETA:
                if spec.preset is None or not isinstance(PRESETS[spec.preset].answer.check, AnswerCheck):
                    swept.append(spec)
                    continue
                swept.extend(dataclasses.replace(spec, name=f"{spec.name}@{param}={float(v):g}", check_theta=float(v),
                                                 sweep=(param, float(v))) for v in values)
                continue
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
                f"have theta; {CHECK_THETA} is the answer check's, of look-again-grounded and look-again-choose): pick "
                "e.g. --methods dragin,flare."
            )
        specs = swept
    if router != "none":
        # similarity-selected demonstrations get rows of their own (sr-rag+ta-are-similar.jsonl)
        label = "ta-are-similar" if router == "ta-are" and config.ta_are_demos == "similar" else router
        specs = [
            dataclasses.replace(s, name=s.name.replace(s.base, f"{s.base}+{label}", 1), router=router)
            if _retrieves(s) else s
            for s in specs
        ]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"Duplicate methods: {names}.")
    return specs
