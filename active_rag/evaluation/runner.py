"""``active-rag eval``: run the papers' methods on a question set and score them, resumably.

Every method is the engine's (:class:`active_rag.ActiveRAG`, its presets, triggers, query formulators and
routers); this module only wires a dataset to it, scores the outputs and writes the results:

* Prompts: DRAGIN appendix F few-shot chain-of-thought exemplars (HotpotQA, 2WikiMultihopQA, StrategyQA) and
  the RetrievalQA templates, exactly as :func:`~active_rag.evaluation.prompts.build_eval_prompt` writes them,
  as an engine :class:`~active_rag.components.prompts.PromptTemplate` (:func:`eval_prompt_template`). The engine wraps the
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
run can be resumed (finished question ids are skipped) and inspected while it runs. One run writes a folder at a
time (:class:`~active_rag.evaluation.outlock.OutputLock`). A question that fails (an
:class:`~active_rag.errors.ActiveRAGError`: the endpoint or the retriever down, out of memory) is written as a row
with an ``error`` field, logged, counted in the report (``failures``, the ``errors`` column of ``results.md``) and
answered again on resume (unless ``retry_failed`` is off); it never enters the scores. The summaries are computed
from the rows read back from the files, one per question.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from active_rag.errors import ActiveRAGError, CorpusError
from active_rag.evaluation.breakdown import (
    TYPE_METRIC,
    TypeScore,
    format_type_table,
    question_type,
    question_types,
    scores_by_type,
)
from active_rag.evaluation.config import (
    DEFAULT_EVAL_MODEL,
    PRIMARY_METRICS,
    EvalConfig,
    EvalPromptTemplate,
    MethodSpec,
    _retrieves,
    build_methods,
    eval_prompt_template,
)
from active_rag.evaluation.datasets import Example, default_data_dir, load_dataset
from active_rag.evaluation.method_engines import (
    _ContextsRetriever,
    _engine_key,
    _router_options,
    EARLIER_LINK_RULES,
    _TimedRetriever,
    build_engine,
    default_index_cache,
    load_corpus_index,
)
from active_rag.evaluation.paired import (
    PairedDifference,
    format_paired_table,
    paired_differences,
    resolve_baseline,
)
from active_rag.evaluation.outlock import OutputLock, prepare_output_root
from active_rag.evaluation.prompts import RETRIEVALQA_SYSTEM_PROMPT
from active_rag.evaluation.scoring import (  # _read_rows: imported from here by callers
    _read_rows,  # noqa: F401
    _safe_name,
    format_results_table,
    format_thresholds,
    score_example,
    summarize_rows,
    thresholds_used,
)
from active_rag.evaluation.scoring import resume_rows
from active_rag.evaluation.store import compact_rows_file, format_failures, is_failed, rows_on_disk
from active_rag.answer.check import passages_text
from active_rag.components.context import FocusContext
from active_rag.engine.answer_steps import SettleVersions
from active_rag.components.prompt_layout import resolve_prompt_mode
from active_rag.components.routing import authors_decision
from active_rag.validation import check_date
from active_rag.types import ActiveRAGResult

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.engine import ActiveRAG
    from active_rag.decoding.model import ActiveLM

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
    "format_failures",
    "format_results_table",
    "load_corpus_index",
    "method_path",
    "plan_eval",
    "resolve_data_dir",
    "resume_rows",
    "run_eval",
    "score_example",
    "summarize_rows",
]

logger = logging.getLogger("active_rag.evaluation")


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
    paired: list[PairedDifference] = field(default_factory=list)  # every method against the baseline (paired.py)
    by_type: list[TypeScore] = field(default_factory=list)  # every method on each question type (breakdown.py)
    thresholds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # scoring.thresholds_used per method
    failures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per method: {"id", "error"} of failed questions

    @property
    def failed(self) -> int:
        """Questions (of all methods) whose last try failed: they have no score and are answered again on resume."""
        return sum(len(rows) for rows in self.failures.values())

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
            "paired": [d.to_dict() for d in self.paired],
            "by_type": [t.to_dict() for t in self.by_type],
            "thresholds": self.thresholds,
            "failures": self.failures,
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
    before_s = retriever.seconds if retriever else 0.0
    start = time.perf_counter()
    error = None
    try:
        result = rag.run(example.question)
    except ActiveRAGError as exc:  # recorded as a failure (never scored) so one bad question does not stop a long run
        error = f"{type(exc).__name__}: {exc}"
        result = ActiveRAGResult(question=example.question, answer="", method=rag.method)
    wall = time.perf_counter() - start
    answer, metrics = score_example(example, result)
    data = result.to_dict()
    row: dict[str, Any] = {
        "id": example.id,
        "question": example.question,
        **({"type": question_type(example)} if question_type(example) is not None else {}),
        "gold": example.answers,
        "prediction": result.answer,
        "answer": answer,
        "metrics": metrics,
        "wall_time_s": wall,
        "retrieval_time_s": (retriever.seconds - before_s) if retriever else 0.0,
        "retriever_calls": result.retriever_calls,  # counted where the engine calls the retriever
        "trace": data["retrievals"],
        "decisions": _decisions_summary(result),
        "route": data["route"],
        "warnings": data["warnings"],
        "prompt_tokens": data["prompt_tokens"],
        "final_passage_ids": data["final_passage_ids"],
        "segments": data["segments"],
    }
    if data.get("draft") is not None:
        row["draft"] = data["draft"]
    if data.get("answer_check") is not None:
        row["answer_check"] = data["answer_check"]
    if data.get("date_comparison") is not None:
        row["date_comparison"] = data["date_comparison"]
    if data.get("each_name") is not None:
        row["each_name"] = data["each_name"]
    if example.gold_passage_ids:
        row["gold_passage_ids"] = example.gold_passage_ids
    if result.route is not None and example.kind == "retrievalqa":
        row["route_authors_reading"] = authors_decision(result.route.raw_output)
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
    resolve_baseline(config.baseline, [s.name for s in specs])  # an unknown --baseline fails before the run
    if config.plots:  # fail before the run, not after it
        from active_rag._optional import require_matplotlib

        require_matplotlib("The PNG plots of an evaluation (skip them with --no-plots, or plots=False)")
    data_dir = resolve_data_dir(config)
    return specs, data_dir, load_dataset(config.dataset, data_dir, limit=config.limit, split=config.split)


def eval_output_dir(config: EvalConfig, model_name: str, weights: str | None = None) -> Path:
    """``config.out_dir/<dataset>/<model>``: where a run writes its JSONL files, results.md and summary.json;
    ``<dataset>-<split>`` for a split other than ``dev`` (``hotpotqa-dev-b``); ``<model>-int8`` / ``<model>-int4``
    for packed weights (``weights``: the loaded model's, else the config's), so their rows never mix with float32's."""
    model = _safe_name(Path(model_name).name if os.sep in model_name else model_name)
    weights = weights or config.resolved_weights
    return config.out_dir / config.data_name / (model if weights == "float32" else f"{model}-{weights}")


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
        from active_rag.components.routing import make_router

        self.config = config
        self.specs = {s.name: s for s in (specs if specs is not None else build_methods(config))}
        self.data_dir = data_dir if data_dir is not None else resolve_data_dir(config)
        if lm is None:
            from active_rag.decoding.model import ActiveLM

            lm = ActiveLM.load(config.model, **config.model_options())
        self.lm = lm
        self.model_name = str(lm.name or config.model)
        self.weights = str(getattr(lm, "weights", "float32"))
        self.index_info: dict[str, Any] = {}
        self.shared: _TimedRetriever | None = None
        if config.dataset != "retrievalqa" and any(_retrieves(s) for s in self.specs.values()):
            t0 = time.perf_counter()
            index, folder, loaded = load_corpus_index(config.dataset, self.data_dir, config.index_cache, config.hide_titles)
            self.index_info = {"path": str(folder), "loaded_from_cache": loaded, "seconds": time.perf_counter() - t0,
                               "passages": len(index)}
            self.shared = _TimedRetriever(index)
        self.router = (make_router(config.router_name, lm, **_router_options(config, self.data_dir))
                       if any(s.router for s in self.specs.values()) else None)
        if self.router is not None and hasattr(self.router, "today"):
            self.router.today = check_date("today", config.today)
        self.system = RETRIEVALQA_SYSTEM_PROMPT if config.dataset == "retrievalqa" else None
        self._engines: dict[str, tuple[ActiveRAG, str]] = {}
        self._by_id: dict[str, Any] | None = None

    def system_prompt(self) -> contextlib.AbstractContextManager[None]:
        """Set the dataset's system prompt on the model for the duration of a ``with`` block."""
        return _system_prompt(self.lm, self.system)

    def _engine(self, name: str) -> tuple[ActiveRAG, str]:
        if name not in self._engines:
            spec = self.specs[name]
            probe = build_engine(spec, self.lm, self.shared or _ContextsRetriever([]), self.config, self.router)
            key = _engine_key(probe, self.config, self.model_name, self.index_info.get("passages"))
            self._engines[name] = (probe, key)
        return self._engines[name]

    def engine_key(self, name: str) -> str:
        """The hash of method ``name``'s settings stored in its rows (resumes skip only rows with this key)."""
        return self._engine(name)[1]

    def unsettled_key(self, name: str) -> dict[str, str]:
        """The keys of method ``name``'s engine without the answer rules it has that a resume can carry over
        (``settle_dates``, ``settle_versions``, ``ask_each_name``, ``ask_same``, an answer check's ``select="new-evidence"`` against ``"second"``,
        ``focus`` reading comparison looks in full against ``compare=0``; :mod:`active_rag.evaluation.settled`),
        each with the rules it lacks joined by ``+`` (``"dates"``, ``"dates+each-name"``, ...; ``"version-passages"``:
        versions read from the reasoning only, ``AnswerStage(versions="reasoning")``; ``"version-asked"``: before a
        question that asks for a version got the version as its short answer; ``"premise"``, ``"described"``: the links of a
        folder's corpus followed before a question's premise names faced the continuation rule, before the premise's
        pages left the prompt, ``"subject"``: before a link's passage was scored without the question's read documents' names,
        :data:`~active_rag.evaluation.method_engines.EARLIER_LINK_RULES`); empty when it has none."""
        probe, _ = self._engine(name)
        check = probe.answer_check
        context = probe.context
        switches = {"dates": "settle_dates", "versions": "settle_versions", "each-name": "ask_each_name", "same": "ask_same"}
        has = [rule for rule, attr in switches.items() if getattr(probe, attr)]
        versions = probe.settle_versions
        if versions == "passages":
            has.append("version-passages")
        if check is not None and check.select == "new-evidence":
            has.append("new-evidence")
        if isinstance(context, FocusContext) and context.compare:
            has.append("compare-look")
        if versions:  # last: turning a stage rule back on rebuilds the steps, with this rule on
            has.append("version-asked")

        stage_fields = {"dates": "dates", "each-name": "each_name", "same": "same"}

        def turn(rule: str, on: bool) -> None:
            if rule == "new-evidence":
                check.select = "new-evidence" if on else "second"
            elif rule == "version-asked":  # the step's own switch: the stage has none
                probe.answer_steps[:] = [dataclasses.replace(step, asked=on) if isinstance(step, SettleVersions) else step
                                         for step in probe.answer_steps]
            elif rule == "compare-look":
                probe.context = context if on else dataclasses.replace(context, compare=0)
            elif rule == "version-passages":  # the reasoning's versions only; off already when "versions" is
                now = probe.settle_versions
                probe.stage = dataclasses.replace(probe.stage, versions=versions if on else ("reasoning" if now else False))
            elif rule == "versions":
                probe.stage = dataclasses.replace(probe.stage, versions=versions if on else False)
            else:
                probe.stage = dataclasses.replace(probe.stage, **{stage_fields[rule]: on})

        passages = self.index_info.get("passages")
        keys: dict[str, str] = {}
        for n in range(2 ** len(has)):
            off = [rule for i, rule in enumerate(has) if n >> i & 1]
            for rule in off:
                turn(rule, False)
            try:
                keys.setdefault(_engine_key(probe, self.config, self.model_name, passages), "+".join(off))
                # rows written with earlier link rules (the same key where the engine's key names no link rules)
                for earlier, lacks in EARLIER_LINK_RULES.items():
                    keys.setdefault(_engine_key(probe, self.config, self.model_name, passages, link_rules=earlier),
                                    "+".join([lacks, *off]))
            finally:
                for rule in off:
                    turn(rule, True)
        keys.pop(self._engine(name)[1])  # the engine's own key: its rows need no conversion
        return keys

    def passage_texts(self, ids: Sequence[str]) -> str:
        """The titles and texts of the indexed passages ``ids``, in order, as the engine's grounding reads them
        (:func:`~active_rag.answer.check.passages_text`); the run's shared index only."""
        assert self.shared is not None, "passage_texts reads the shared index"
        if self._by_id is None:
            self._by_id = {p.id: p for p in self.shared.inner.passages}
        return passages_text(self._by_id[i] for i in ids if i in self._by_id)

    def run(self, name: str, example: Example) -> dict[str, Any]:
        """Answer and score ``example`` with method ``name``; the row written to the method's JSONL file."""
        probe, key = self._engine(name)
        # one timed retriever and engine per question, so that concurrent questions (batch_size > 1) count
        # their own retrieval seconds; building an engine is cheap (no model work)
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
        row["weights"] = self.weights
        if getattr(rag.router, "today", None) is not None:
            row["today"] = rag.router.today_text()
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
    done: Mapping[str, Mapping[str, dict[str, Any]]] | None = None,
    keys: Mapping[str, str] | None = None,
) -> EvalReport:
    """Summaries, ``results.md``, plots and ``summary.json`` from the rows on disk: each method's JSONL file read
    back, one row per question (:func:`~active_rag.evaluation.store.pick_rows`), only the questions of
    ``examples``. Failed rows are counted (``errors``, ``report.failures``), never scored.

    ``worker_info``: ``out`` (output folder), ``model_name``, ``index_info`` and ``data_dir`` of the run. ``keys``:
    each method's engine key (rows with another key are left out), else the key of its rows in ``done``."""
    out = Path(worker_info["out"])
    model_name = str(worker_info["model_name"])
    summary: dict[str, dict[str, float | None]] = {}
    all_rows: dict[str, list[dict[str, Any]]] = {}
    failures: dict[str, list[dict[str, Any]]] = {}
    files: dict[str, Path] = {spec.name: method_path(out, spec) for spec in specs}
    for spec in specs:
        key = (keys or {}).get(spec.name)
        if key is None and done and done.get(spec.name):
            key = next(iter(done[spec.name].values())).get("engine_key")
        on_disk = rows_on_disk(files[spec.name], key)
        picked = [on_disk[ex.id] for ex in examples if ex.id in on_disk]
        rows = [row for row in picked if not is_failed(row)]
        failures[spec.name] = [{"id": row["id"], "error": row["error"]} for row in picked if is_failed(row)]
        all_rows[spec.name] = rows
        summary[spec.name] = summarize_rows(rows, config.dataset) if rows else {"n": 0.0}
        summary[spec.name]["errors"] = float(len(failures[spec.name]))

    sweep = _sweep_rows(specs, summary)
    profile = config.profile_obj
    thresholds = {name: thresholds_used(rows) for name, rows in all_rows.items()}
    weights = str(worker_info.get("weights", "float32"))
    passages = (worker_info.get("index_info") or {}).get("passages")
    corpus = f"; corpus: {passages} passages" if passages else ""
    markdown = (f"# {config.data_name} / {model_name} ({len(examples)} questions)\n\nPrompt mode: {resolve_prompt_mode(config.prompt_mode, model_name)}; "
                f"profile: {profile.name if profile else 'none'}" + ("" if weights == "float32" else f"; weights: {weights}")
                + corpus + ("; titles hidden (doc-<n>.txt)" if config.hide_titles else "") + "\n\n" + format_thresholds(thresholds)
                + format_results_table(summary, config.dataset))
    if sweep:
        param = sweep[0]["param"]
        markdown += f"\n## Sweep over {param}\n\n" + format_results_table(
            {f"{r['method']} {param}={r['value']:g}": r for r in sweep}, config.dataset)
    baseline = resolve_baseline(config.baseline, [s.name for s in specs])
    paired = paired_differences(all_rows, baseline, PRIMARY_METRICS[config.dataset]) if baseline else []
    if paired:
        markdown += f"\n## Paired differences against {baseline}\n\n" + format_paired_table(paired)
    by_type = scores_by_type(all_rows, question_types(examples), TYPE_METRIC[config.dataset])
    if by_type:
        markdown += "\n## By question type\n\n" + format_type_table(by_type)
    markdown += format_failures(failures)
    files["results"] = out / "results.md"
    files["results"].write_text(markdown, encoding="utf-8")
    report = EvalReport(config=config, out_dir=out, model=model_name, methods=list(specs), summary=summary,
                        rows=all_rows, sweep=sweep, markdown=markdown, files=files,
                        index=dict(worker_info.get("index_info") or {}), data_dir=Path(worker_info["data_dir"]),
                        paired=paired, by_type=by_type, thresholds=thresholds,
                        failures={name: rows for name, rows in failures.items() if rows})
    files["summary"] = out / "summary.json"
    if config.plots:
        from active_rag.evaluation.plots import plot_methods, plot_sweep

        files["methods_plot"] = plot_methods(report.to_dict(), out / "methods.png")
        if sweep:
            files["sweep_plot"] = plot_sweep(sweep, out / "sweep.png")
    files["summary"].write_text(json.dumps({**report.to_dict(), "files": {k: str(v) for k, v in files.items()}},
                                           indent=2, default=str) + "\n", encoding="utf-8")
    return report


def _log_failure(method: str, row: Mapping[str, Any]) -> None:
    logger.warning("active-rag eval: %s question %s failed (not scored; a resumed run answers it again): %s",
                   method, row["id"], str(row["error"]).splitlines()[0] if row["error"] else "")


def run_eval(config: EvalConfig, lm: ActiveLM | None = None, progress: bool = True) -> EvalReport:
    """Run every method of ``config`` on the dataset; write per-question JSONL, ``results.md``, ``summary.json``
    and PNG plots under ``config.out_dir/<dataset>/<model>/``; return the :class:`EvalReport`.

    ``lm`` defaults to ``ActiveLM.load(config.model)``. With ``config.resume`` the questions already in a
    method's JSONL (made with the same engine settings) are not rerun, except failed ones when
    ``config.retry_failed`` (the default). ``config.out_dir`` is created and checked before the model loads
    (:class:`~active_rag.evaluation.outlock.EvalOutputError`); the output folder is held for the run
    (:class:`~active_rag.evaluation.outlock.EvalLockedError` when another run holds it). A failed question is
    logged on the ``active_rag.evaluation`` logger and listed in ``report.failures``. (``active-rag eval --ray``
    shards the same work across Ray actors: :func:`active_rag.evaluation.distributed.run_eval_ray`.)
    """
    from tqdm.auto import tqdm

    from active_rag.progress import progress_shown  # drawn only on a terminal: a log file or a pipe gets none

    specs, data_dir, examples = plan_eval(config)
    prepare_output_root(config.out_dir)
    worker = EvalWorker(config, lm, specs=specs, data_dir=data_dir)
    out = config.output_dir = eval_output_dir(config, worker.model_name, worker.weights)
    with OutputLock(out, config.to_dict()), worker.system_prompt():
        keys: dict[str, str] = {}
        for spec in specs:
            path = method_path(out, spec)
            key = keys[spec.name] = worker.engine_key(spec.name)
            if not config.resume and path.exists():
                path.unlink()
            texts = worker.passage_texts if worker.shared is not None else None
            done = resume_rows(path, key, worker.unsettled_key(spec.name), texts, config.retry_failed)
            todo = [ex for ex in examples if ex.id not in done]
            bar = tqdm(total=len(todo), desc=spec.name, unit="q", disable=not progress_shown(progress), leave=True)
            with open(path, "a", encoding="utf-8") as fh:
                last = time.perf_counter()
                for row in _answer_all(worker, spec.name, todo, config.batch_size):
                    # seconds of the run this question accounts for (time since the previous one ended): they sum
                    # to the run's wall time, so their mean is the throughput cost per question at any batch size
                    now = time.perf_counter()
                    row["amortized_s"], row["batch_size"], last = now - last, config.batch_size, now
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fh.flush()
                    if is_failed(row):
                        _log_failure(spec.name, row)
                    bar.update(1)
                    bar.set_postfix_str(_prompt_postfix(row), refresh=False)
            bar.close()
            compact_rows_file(path)  # a failed row answered now: the file keeps the answer only

        info = {"out": out, "model_name": worker.model_name, "weights": worker.weights, "index_info": worker.index_info,
                "data_dir": data_dir}
        return finish_eval(config, info, specs, examples, keys=keys)
