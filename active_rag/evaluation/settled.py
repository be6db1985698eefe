"""Rows of an engine that settles answers by rule, from the rows of the same engine without the rule.

``AnswerStage(dates=True)`` (:mod:`active_rag.answer.dates`) reads only the question and the text the reader
wrote: it changes no token, no retrieval and no prompt. A row written by the same engine without it therefore holds
everything the settled row would: :func:`settle_row` compares the dates of its prediction, re-scores the short answer
and gives the row the settling engine's key, marking where it came from (``settled_from``: the key it was written
with). :func:`active_rag.evaluation.scoring._read_rows` does this on resume, so that turning the rule on answers no
question again; the rows it came from are set aside (``other-settings/``), never lost.

``AnswerStage(each_name=True)`` (:mod:`active_rag.answer.both_names`) asks the model again, but only on a "both"
question whose answer is "yes": every other row of the same engine without it is the row the engine with it writes.
:func:`carry_row` carries those over and returns ``None`` for the rows it would ask again, so that turning the rule
on answers only those questions again. ``AnswerStage(same=True)`` (:mod:`active_rag.answer.same_value`) asks the
model on every question whether two names share a value, and on no other: those rows only are answered again.

``AnswerCheck(select="new-evidence")`` (:func:`active_rag.answer.check.unsupported_change`) changes only
which of the two answers a look keeps, from the answers' spans and the passages' text: a row written with
``select="second"`` is the row it writes unless its second answer changed a draft without the look's evidence.
:func:`keeps_second` tells which, from the passages' text; such a question is answered again (a row keeps the kept
answer's full text only).

``FocusContext(compare=1)`` (:meth:`active_rag.components.context.FocusContext.for_look`) changes the prompt only after
a look the question's form sent to compare what it names: a row written with ``compare=0`` whose look was not such
a comparison (the trace's ``choice``) is the row it writes; :func:`looked_to_compare` tells which rows are answered
again.

``AnswerStage(versions=True)`` (:mod:`active_rag.answer.versions`) is such a rule too, read before the dates;
it reads an option's version from its own passage where the reasoning gives none, so a row written without it (or
with ``versions="reasoning"``, rule ``"version-passages"``) is settled from its prediction and the passages of its
answer's prompt (``final_passage_ids``, read through ``texts``).

On a folder's corpus, :func:`~active_rag.answer.links.follow_links` lets a name that only a question's premise
states ("requests depends on a package described as ...") face the continuation rule
(:func:`~active_rag.answer.links.premise_names`): a row written before (rule ``"premise"``) is the row it writes
unless its question has a premise (:func:`~active_rag.answer.links.asking_sentence`); such a question is answered
again. So is one written before the premise's pages left the prompt once the page it describes is read (rule
``"described"``, :func:`~active_rag.answer.premise.premise_pages`). The ``subject`` rule (a passage the reading
mentions is scored without the names of the documents the question names and reads) only ever leaves a link out:
a row written before it (rule ``"subject"``) whose looks followed no name a passage mentions (every ``linked_from``
of its trace ``None``) is the row it writes; any other is answered again.

:func:`convert_row` applies what lies between a row's key and the new one (``"dates"``, ``"versions"``, ``"each-name"``,
``"new-evidence"``, ``"compare-look"``, ``"version-passages"``, ``"premise"``, ``"described"``, ``"subject"``, joined
by ``+``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from active_rag.evaluation.metrics import qa_scores
from active_rag.answer.both_names import both_question, yes_or_no
from active_rag.answer.same_value import same_question
from active_rag.answer.check import grounded_in, unsupported_change
from active_rag.answer.dates import DateComparison, settle_dates
from active_rag.answer.links import asking_sentence
from active_rag.answer.versions import settle_versions
from active_rag.answer.normalize import normalize_answer
from active_rag.types import Passage

__all__ = ["carry_row", "convert_row", "followed_mentioned_names", "keeps_second", "look_passage_ids", "settle_row"]

#: the text of the passages with these ids, in order (titles and texts, as the engine's grounding reads them)
PassageTexts = Callable[[Sequence[str]], str]


def row_passages(row: Mapping[str, Any], texts: PassageTexts) -> list[Passage]:
    """The passages of a row's answer prompt (``final_passage_ids``), titled and worded as ``texts`` reads them."""
    out = []
    for pid in row.get("final_passage_ids") or []:
        title, _, text = texts([pid]).partition("\n")
        if title or text:
            out.append(Passage(id=pid, title=title, text=text))
    return out


def settle_row(row: Mapping[str, Any], key: str, rules: str = "dates",
               passages: Sequence[Passage] | None = None) -> dict[str, Any]:
    """``row`` as the engine with key ``key`` (the same engine, settling dates and, with ``"versions"`` in ``rules``,
    versions first, as the engine does, from the reasoning and, given ``passages``, the options' own passages)
    writes it: ``date_comparison`` when the question compares two things in time
    or by version, the settled ``answer`` and its EM/F1 (short-answer datasets; a dataset scored on the whole
    response keeps its scores, as :func:`~active_rag.evaluation.scoring.score_example` does), ``engine_key`` ``key``
    and ``settled_from`` the key the row was written with."""
    out = dict(row)
    out["engine_key"] = key
    out["settled_from"] = row.get("engine_key")
    question, prediction = str(row.get("question", "")), str(row.get("prediction") or "")
    missing = set(rules.split("+"))
    settled = (settle_versions(question, prediction, passages)
               if missing & {"versions", "version-passages", "version-asked"} else None)
    if isinstance(settled, DateComparison) and not missing & {"versions", "version-passages"}:
        settled = None  # the row's comparison is settled as the engine settles it: only a version asked is new
    written = row.get("date_comparison") or {}
    if settled is None and "dates" in missing and written.get("event") != "version":
        settled = settle_dates(question, prediction)
    if settled is None:
        return out
    out["date_comparison"] = settled.to_dict()
    metrics = dict(row.get("metrics") or {})
    if settled.answer is not None and "f1" in metrics:
        out["answer"] = settled.answer
        metrics.update(qa_scores(settled.answer, row.get("gold") or []))
        out["metrics"] = metrics
    return out


def _asks_each_name(row: Mapping[str, Any]) -> bool:
    """Whether ``AnswerStage(each_name=True)`` would ask the model on this row: a "both" question answered "yes"."""
    return (both_question(str(row.get("question", ""))) is not None
            and yes_or_no(str(row.get("prediction") or "")) == "yes")


def carry_row(row: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """``row`` as the engine with key ``key`` (the same engine, asking a "both" question's names) writes it, or
    ``None`` when that engine would ask them (a "both" question answered "yes"): that question is answered again."""
    if _asks_each_name(row):
        return None
    return {**row, "engine_key": key, "settled_from": row.get("engine_key")}


def keeps_second(row: Mapping[str, Any], texts: PassageTexts | None) -> bool:
    """Whether ``AnswerCheck(select="new-evidence")`` keeps the answer that a row written with ``select="second"``
    kept: always, unless the row's look kept a second answer that :func:`unsupported_change` rejects, read from the
    draft's passages and those the look added (:func:`look_passage_ids`). Without ``texts`` every second answer that
    differs from its draft, other than a "yes" or "no", counts as rejected (the question is answered again)."""
    check = row.get("answer_check") or {}
    if not check.get("fired") or check.get("kept") != "second" or not check.get("second"):
        return True
    draft, second = str(check["draft"].get("answer") or ""), str(check["second"].get("answer") or "")
    if texts is None or not row.get("trace"):
        return normalize_answer(draft) == normalize_answer(second) or grounded_in(second, "") is None
    read, held = look_passage_ids(row)
    return not unsupported_change(draft, second, texts(read), texts([i for i in held if i not in read]))


def look_passage_ids(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The ids of the passages in a checked row's draft prompt (its first segment's, else its final passages) and in
    its second answer's (what the prompt held after the check's retrieval, the trace's last entry; the draft's when
    the row does not say)."""
    draft = row["segments"][0]["passage_ids"] if row.get("segments") else row.get("final_passage_ids", [])
    second = (row.get("trace") or [{}])[-1].get("held_ids") or draft
    return list(draft), list(second)


def looked_to_compare(row: Mapping[str, Any]) -> bool:
    """Whether the row's look was sent to compare what the question names (a trace entry's ``choice``)."""
    return any(entry.get("choice") == "compare" for entry in row.get("trace") or [])


def followed_mentioned_names(row: Mapping[str, Any]) -> bool:
    """Whether a look of the row read the passage of a name its passages mention (a trace entry's ``linked_from``
    with a passage id; ``None`` is a name the question itself names)."""
    return any(source is not None for entry in row.get("trace") or [] for source in (entry.get("linked_from") or {}).values())


def _reads_passages(row: Mapping[str, Any]) -> bool:
    """Whether ``AnswerStage(versions=True)`` reads the options' own passages on this row: a comparison of versions
    whose reasoning gives an option none."""
    written = settle_versions(str(row.get("question", "")), str(row.get("prediction") or ""))
    return isinstance(written, DateComparison) and None in written.dates


def convert_row(row: Mapping[str, Any], key: str, rules: str, texts: PassageTexts | None = None) -> dict[str, Any] | None:
    """``row``, written without ``rules`` (``"dates"``, ``"versions"``, ``"version-passages"``, ``"each-name"``, ``"same"``, ``"new-evidence"``, ``"compare-look"``,
    ``"premise"``, ``"described"``, ``"subject"``, joined by ``+``), as the engine with key ``key`` writes it; ``None``
    when the question must be answered again (:func:`carry_row`, :func:`keeps_second`, which reads the passages
    through ``texts``, :func:`looked_to_compare`; ``"premise"``, ``"described"``: a question with a premise,
    :func:`~active_rag.answer.links.asking_sentence`; ``"subject"``: :func:`followed_mentioned_names`; ``"same"``: a
    question :func:`~active_rag.answer.same_value.same_question` reads)."""
    missing = set(rules.split("+"))
    if missing & {"premise", "described"} and asking_sentence(str(row.get("question", ""))) is not None:
        return None  # a question with a premise: its premise's names and pages may now go
    if "subject" in missing and followed_mentioned_names(row):
        return None  # a link its passages mention may now be left out
    if "compare-look" in missing and looked_to_compare(row):
        return None
    if "each-name" in missing and _asks_each_name(row):
        return None
    if "same" in missing and same_question(str(row.get("question", ""))) is not None:
        return None  # a "same X" question: each name's value is asked
    if "new-evidence" in missing and not keeps_second(row, texts):
        return None
    if "versions" in missing and (row.get("date_comparison") or {}).get("answer") and \
            settle_versions(str(row.get("question", "")), str(row.get("prediction") or "")) is not None:
        return None  # the dates settled it, where the versions go first: the reader's own answer is not in the row
    reads_passages = bool(missing & {"versions", "version-passages"}) and _reads_passages(row)
    if reads_passages and texts is None:
        return None  # the options' own passages cannot be read: the question is answered again
    if missing & {"dates", "versions", "version-passages", "version-asked"}:
        passages = row_passages(row, texts) if reads_passages and texts is not None else None
        return settle_row(row, key, rules, passages)
    return {**row, "engine_key": key, "settled_from": row.get("engine_key")}
