"""Scoring and files of an evaluation: per-question metrics (:func:`score_example`), per-method summaries
(:func:`summarize_rows`), the markdown table, and the JSONL rows read back on resume."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from active_rag.evaluation.answers import extract_answer
from active_rag.evaluation.config import PRIMARY_METRICS
from active_rag.evaluation.datasets import Example
from active_rag.evaluation.metrics import (
    aggregate,
    bootstrap_ci,
    decision_metrics,
    match,
    match_accent_folded,
    qa_scores,
    strategyqa_accuracy,
)
from active_rag.evaluation.store import compact_rows_file, is_failed
from active_rag.types import ActiveRAGResult

# ------------------------------------------------------------------------------------------------ scoring


def score_example(example: Example, result: ActiveRAGResult) -> tuple[str | None, dict[str, Any]]:
    """The extracted answer and the per-question metrics of one result (numbers, ``None`` when undefined)."""
    text = result.answer
    answer = extract_answer(text)
    if result.date_comparison and result.date_comparison.get("answer"):  # settled by the reasoning's dates
        answer = str(result.date_comparison["answer"])
    if result.each_name and result.each_name.get("answer"):  # settled by each name's own answer
        answer = str(result.each_name["answer"])
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
        # did the prompt that wrote the answer hold every gold passage; which retrievals brought a gold
        # passage the prompt did not hold yet (new evidence), all of them and those of the method's own query
        # formulator (not the retrieval with the question)
        m["evidence_recall"] = float(gold <= set(result.final_passage_ids))
        active = [r for r in result.retrievals if r.formulator != "input"]
        m["new_evidence_hits"] = sum(1 for r in result.retrievals if gold & set(_new_ids(r)))
        m["active_retrievals"] = len(active)
        m["active_new_evidence_hits"] = sum(1 for r in active if gold & set(_new_ids(r)))
    m["final_passages"] = len(result.final_passage_ids)
    if example.kind == "retrievalqa":
        m["retrieve_decision"] = float(result.route.retrieve if result.route else n > 0)
        if example.needs_retrieval is not None:
            m["needs_retrieval"] = float(example.needs_retrieval)
    return answer, m


def _new_ids(retrieval: Any) -> list[str]:
    return list(retrieval.passage_ids if retrieval.new_ids is None else retrieval.new_ids)


def cost_per_question(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The mean cost of a question: ``retriever_calls_per_question`` (the rows' ``retriever_calls``) and
    ``prompt_tokens_per_question`` (prompt tokens read: from the prefix cache and prefilled); ``None`` when a row
    lacks it."""
    calls = [r.get("retriever_calls") for r in rows]
    tokens = [r.get("prompt_tokens") for r in rows]
    read = [None if not isinstance(t, Mapping) or "prefilled" not in t else
            float(t.get("cached") or 0) + float(t["prefilled"] or 0) for t in tokens]
    return {
        "retriever_calls_per_question": (sum(float(c) for c in calls) / len(calls)
                                         if rows and all(c is not None for c in calls) else None),
        "prompt_tokens_per_question": sum(read) / len(read) if rows and all(t is not None for t in read) else None,
    }


def summarize_rows(rows: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, float | None]:
    """Per-method summary: means of the per-question metrics, renamed where a rate reads better, plus
    micro-averaged rates (gold-hit share of all retrievals, trigger fire rate) and RetrievalQA decision metrics."""
    metrics = [r["metrics"] for r in rows]
    base = [{**m, "wall_time_s": r.get("wall_time_s"), "retrieval_time_s": r.get("retrieval_time_s")}
            for r, m in zip(rows, metrics, strict=True)]
    out: dict[str, float | None] = dict(aggregate(base))
    out["retrievals_per_question"] = out.pop("retrievals", 0.0)
    out["retrieval_rate"] = out.pop("retrieved", 0.0)  # share of questions with at least one retrieval
    out["wall_time_per_question_s"] = out.pop("wall_time_s", None)  # latency: one question, start to end
    amortized = [r.get("amortized_s") for r in rows]
    # throughput: the run's wall time per question (equals the latency at batch size 1)
    out["seconds_per_question"] = (sum(amortized) / len(amortized) if rows and all(a is not None for a in amortized)
                                   else out["wall_time_per_question_s"])
    total_time = sum(float(r.get("wall_time_s") or 0.0) for r in rows)
    total_ret = sum(float(r.get("retrieval_time_s") or 0.0) for r in rows)
    out["retrieval_time_share"] = total_ret / total_time if total_time else None
    out.pop("retrieval_time_s", None)
    out.update(cost_per_question(rows))
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
        new_rows = [m for m in gold_rows if "new_evidence_hits" in m]  # older rows have none
        n_new = sum(float(m["retrievals"]) for m in new_rows)
        out["new_evidence_rate"] = sum(float(m["new_evidence_hits"]) for m in new_rows) / n_new if n_new else None
        n_active = sum(float(m["active_retrievals"]) for m in new_rows)
        out["active_new_evidence_rate"] = (sum(float(m["active_new_evidence_hits"]) for m in new_rows) / n_active
                                           if n_active else None)
        for key in ("new_evidence_hits", "active_retrievals", "active_new_evidence_hits"):
            out.pop(key, None)
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
    for key in PRIMARY_METRICS[dataset]:  # 95% percentile-bootstrap intervals of the headline metrics
        ci = bootstrap_ci([float(m[key]) for m in metrics if m.get(key) is not None])
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = ci if ci is not None else (None, None)
    return out


# ------------------------------------------------------------------------------------------------ files


def thresholds_used(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The trigger thresholds a method's rows were answered with and where each came from (``threshold_source``:
    ``profile:<name>``, ``calibrated:<cache file>``, ``user``, ``default (...)``), with the number of rows,
    most used first. Empty for methods without a threshold (wo-RAG, SR-RAG, FS-RAG)."""
    counts: dict[tuple[Any, str], int] = {}
    for row in rows:
        if row.get("threshold") is not None:
            pair = (row["threshold"], str(row.get("threshold_source") or "unknown"))
            counts[pair] = counts.get(pair, 0) + 1
    return [{"theta": theta, "source": source, "n": n}
            for (theta, source), n in sorted(counts.items(), key=lambda item: -item[1])]


def format_thresholds(thresholds: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """One line naming each method's threshold and its source (a calibration's cache path left out), or ``""``."""
    def label(used: Mapping[str, Any], several: bool) -> str:
        source = str(used["source"])
        source = "calibrated" if source.startswith("calibrated:") else source
        return f"{used['theta']:g} ({source}" + (f", {used['n']} rows)" if several else ")")

    parts = [f"{method} theta " + ", ".join(label(u, len(used) > 1) for u in used)
             for method, used in thresholds.items() if used]
    return "Thresholds: " + "; ".join(parts) + "\n\n" if parts else ""


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+@=,-]+", "_", name).strip("_") or "model"


def _read_rows(path: Path, key: str, unsettled_key: str | Mapping[str, str] | None = None,
               texts: Callable[[Sequence[str]], str] | None = None) -> dict[str, dict[str, Any]]:
    """Finished rows of a method file (by question id) made with the same engine settings.

    ``unsettled_key``: the key of the same engine without ``settle_dates`` (a string), or a mapping from the keys of
    the same engine without its answer rules to the rules missing (``"dates"``, ``"each-name"``, ``"new-evidence"``,
    joined by ``+``); their rows, where no row of ``key`` answers the question, come back settled or carried over
    (:func:`active_rag.evaluation.settled.convert_row`, which reads the passages through ``texts``; a row the rule
    would change by asking the model or by keeping the other answer is answered again), and are set aside like any
    other settings' rows.

    Malformed lines (a run killed mid-write) are dropped with a warning. Rows made with other settings are
    moved, with a warning naming where, to ``other-settings/`` beside the file (never deleted), and rows set
    aside there earlier with these settings come back. The file is rewritten when anything changed, and gets
    the newline a valid last row lacks, so that rows appended next start on a line of their own."""
    from active_rag.evaluation.store import (
        forget_set_aside,
        read_rows_file,
        restore_rows,
        set_aside_rows,
        write_rows_file,
    )

    rows: dict[str, dict[str, Any]] = {}
    values, bad, rewrite = read_rows_file(path) if path.is_file() else ([], [], False)
    other: list[dict[str, Any]] = []
    for row in values:
        if not isinstance(row, dict) or "id" not in row:
            bad.append(0)
        elif row.get("engine_key") != key:
            other.append(row)
        else:
            rows[str(row["id"])] = row
    restored, restored_from = restore_rows(path, key)
    for row in restored:
        rows.setdefault(str(row["id"]), row)
    settled = 0
    earlier = ({unsettled_key: "dates"} if isinstance(unsettled_key, str) else dict(unsettled_key or {}))
    if earlier:
        from active_rag.evaluation.settled import convert_row

        again, used = 0, set()
        for row in other:
            rules = earlier.get(str(row.get("engine_key")))
            if rules is not None and str(row["id"]) not in rows:
                used.update(rules.split("+"))
                converted = convert_row(row, key, rules, texts)
                if converted is None:
                    again += 1
                    continue
                rows[str(row["id"])] = converted
                settled += 1
        if settled or again:
            warnings.warn(f"{path}: carried over {settled} row(s) written by this method without its answer rules "
                          f"({', '.join(sorted(used))}: each row as the rules would have written it, settled from "
                          f"what it holds){f', {again} will be answered again' if again else ''}; the rows they came "
                          "from are set aside.", stacklevel=3)
    if bad:
        lines = [n for n in bad if n]
        where = f" (malformed line(s) {', '.join(map(str, lines[:5]))}{', ...' if len(lines) > 5 else ''})" if lines else ""
        warnings.warn(f"{path}: dropped {len(bad)} row(s) that are malformed{where}; they will be rerun.", stacklevel=3)
    if other:
        aside = set_aside_rows(path, other)
        unsettled = [row for row in other if str(row.get("engine_key")) not in earlier]
        if unsettled:
            warnings.warn(
                f"{path}: {len(unsettled)} row(s) were made with other settings (e.g. another threshold or "
                f"generation length); moved to {', '.join(str(p) for p in aside)}; these questions will be rerun. A "
                "run with those settings again resumes from them.",
                stacklevel=3,
            )
    if restored:
        warnings.warn(f"{path}: resumed {len(restored)} row(s) set aside earlier with these settings.", stacklevel=3)
    if bad or other or restored or settled or rewrite:
        write_rows_file(path, rows.values())
    if restored_from is not None:
        forget_set_aside(restored_from)  # only now that its rows are back in the method's file
    return rows


def resume_rows(path: Path, key: str, unsettled_key: str | Mapping[str, str] | None = None,
                texts: Any = None, retry_failed: bool = True) -> dict[str, dict[str, Any]]:
    """The rows of a method file a resumed run keeps (by question id), after putting the file in order: each
    question once (:func:`~active_rag.evaluation.store.compact_rows_file`), a line cut off by a killed run dropped,
    other settings' rows set aside (:func:`_read_rows`). With ``retry_failed``
    (the default) failed rows are left out, so that their questions are answered again."""
    compact_rows_file(path)
    done = _read_rows(path, key, unsettled_key, texts)
    if retry_failed:
        done = {qid: row for qid, row in done.items() if not is_failed(row)}
    return done


def _fmt(value: Any, pct: bool = False, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:.{digits}f}" if pct else f"{value:.{digits}f}"


def format_results_table(summary: Mapping[str, Mapping[str, Any]], dataset: str) -> str:
    """The comparison as a markdown table (scores in percent)."""
    primary = PRIMARY_METRICS[dataset]
    cols: list[tuple[str, str, bool, int]] = [(k, {"em": "EM", "f1": "F1", "accuracy": "Acc", "match": "Match",
                                                  "match_folded": "Match (accent-folded)"}[k], True, 1) for k in primary]
    if dataset in ("hotpotqa", "2wikimultihopqa", "pydocs"):
        cols += [("precision", "P", True, 1), ("recall", "R", True, 1)]
    if dataset == "retrievalqa":
        cols += [("retrieval_accuracy", "Retrieval acc", True, 1), ("decision_precision", "Dec. P", True, 1),
                 ("decision_f1", "Dec. F1", True, 1)]
    cols += [("retrievals_per_question", "Ret/q", False, 2), ("retriever_calls_per_question", "Calls/q", False, 2),
             ("prompt_tokens_per_question", "Prompt tok/q", False, 0)]
    if any(m.get("gold_hit_rate") is not None for m in summary.values()):
        cols += [("gold_hit_rate", "Gold hit %", True, 1)]
    if any(m.get("evidence_recall") is not None for m in summary.values()):
        cols += [("new_evidence_rate", "New ev. %", True, 1), ("active_new_evidence_rate", "New ev. (own query) %", True, 1),
                 ("final_passages", "Passages@answer", False, 1), ("evidence_recall", "All gold@answer %", True, 1)]
    cols += [("trigger_fire_rate", "Fire %", True, 1), ("generated_tokens", "Tokens/q", False, 1),
             ("seconds_per_question", "s/q", False, 1), ("wall_time_per_question_s", "latency s", False, 1),
             ("n", "n", False, 0), ("errors", "Errors", False, 0)]  # errors: failed questions, not in n or the scores
    head = "| Method | " + " | ".join(c[1] for c in cols) + " |"
    sep = "|---|" + "|".join("---:" for _ in cols) + "|"
    lines = [head, sep]

    def cell(m: Mapping[str, Any], key: str, pct: bool, digits: int) -> str:
        text = _fmt(m.get(key), pct, digits)
        if key in primary and m.get(f"{key}_ci_low") is not None:  # the 95% bootstrap interval beside the mean
            text += f" [{_fmt(m[f'{key}_ci_low'], pct, 0)}, {_fmt(m[f'{key}_ci_high'], pct, 0)}]"
        return text

    for method, m in summary.items():
        lines.append(f"| {method} | " + " | ".join(cell(m, k, pct, d) for k, _, pct, d in cols) + " |")
    note = "\nScores in percent; [low, high]: 95% percentile-bootstrap interval (1000 resamples of the questions).\n"
    return "\n".join(lines) + "\n" + note
