"""Answer and retrieval-decision metrics of the evaluation harness.

Sources:

* :func:`normalize_answer`, :func:`exact_match` -- the official SQuAD v1.1 evaluation script
  (``evaluate-v1.1.py``), reproduced character for character in behaviour.
* :func:`f1_precision_recall` -- the HotpotQA official evaluation script (``hotpot_evaluate_v1.py``):
  token-level F1 on SQuAD-normalised text, with the rule that a yes/no/noanswer prediction or gold scores
  0 unless the two are identical. Several golds are handled as FLARE's and DRAGIN's evaluation code does:
  each of F1, precision and recall is maximised over the golds independently.
* :func:`match` -- RetrievalQA (Zhang et al., 2024, "RetrievalQA: Assessing Adaptive Retrieval-Augmented
  Generation for Short-form Open-Domain Question Answering"), ``utils.match`` of github.com/hyintell/RetrievalQA:
  1 when any normalised gold is a substring of the normalised prediction.
* :func:`match_accent_folded` -- our accent-tolerant variant of :func:`match`, for RetrievalQA golds whose
  accented letters were deleted upstream (see its docstring).
* :func:`strategyqa_accuracy` -- yes/no accuracy as in DRAGIN's StrategyQA evaluation (appendix B).
* :func:`decision_metrics` -- accuracy / precision / recall / F1 of a router's retrieve decision, and the
  retrieval rate (RetrievalQA's "retrieval accuracy" is the recall on need-retrieval questions).
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from active_rag.answer.normalize import normalize_answer

__all__ = [
    "F1Score",
    "aggregate",
    "decision_metrics",
    "exact_match",
    "extract_yes_no",
    "f1_precision_recall",
    "match",
    "match_accent_folded",
    "normalize_answer",
    "qa_scores",
    "strategyqa_accuracy",
]

_YES_NO_NOANSWER = ("yes", "no", "noanswer")

Golds = str | Iterable[str]


def _gold_list(golds: Golds) -> list[str]:
    items = [golds] if isinstance(golds, str) else list(golds)
    if not items:
        raise ValueError("No gold answers given: pass at least one gold answer string.")
    for g in items:
        if not isinstance(g, str):
            raise TypeError(f"Gold answers must be strings, got {type(g).__name__}: {g!r}.")
    return items


def exact_match(pred: str, golds: Golds) -> float:
    """1.0 when the normalised prediction equals any normalised gold, else 0.0 (SQuAD v1.1 EM, max over golds)."""
    norm_pred = normalize_answer(pred)
    return float(any(norm_pred == normalize_answer(g) for g in _gold_list(golds)))


class F1Score(NamedTuple):
    """Token-level F1, precision and recall of one prediction (each in [0, 1])."""

    f1: float
    precision: float
    recall: float


def _f1_single(pred: str, gold: str) -> F1Score:
    """The HotpotQA official ``f1_score`` for one prediction/gold pair."""
    norm_pred = normalize_answer(pred)
    norm_gold = normalize_answer(gold)
    zero = F1Score(0.0, 0.0, 0.0)
    if norm_pred in _YES_NO_NOANSWER and norm_pred != norm_gold:
        return zero
    if norm_gold in _YES_NO_NOANSWER and norm_pred != norm_gold:
        return zero
    pred_tokens = norm_pred.split()
    gold_tokens = norm_gold.split()
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return zero
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return F1Score(2 * precision * recall / (precision + recall), precision, recall)


def f1_precision_recall(pred: str, golds: Golds) -> F1Score:
    """Token-level F1, precision and recall (HotpotQA official rule), each maximised over the golds.

    With one gold this is exactly ``hotpot_evaluate_v1.f1_score``: tokens of the SQuAD-normalised texts are
    compared as multisets; if either normalised text is "yes", "no" or "noanswer" and they differ, all three
    are 0. With several golds, each of the three numbers is the maximum over the golds taken separately (as in
    FLARE's and DRAGIN's evaluation code), so precision and recall may come from different golds.
    """
    scores = [_f1_single(pred, g) for g in _gold_list(golds)]
    return F1Score(
        max(s.f1 for s in scores),
        max(s.precision for s in scores),
        max(s.recall for s in scores),
    )


def qa_scores(pred: str, golds: Golds) -> dict[str, float]:
    """EM, F1, precision and recall of one short-answer prediction, as a row for :func:`aggregate`."""
    f1 = f1_precision_recall(pred, golds)
    return {"em": exact_match(pred, golds), "f1": f1.f1, "precision": f1.precision, "recall": f1.recall}


# ---------------------------------------------------------------------------------------------- StrategyQA

_YES_NO_TOKENS = {"yes": True, "no": False}


def extract_yes_no(text: str) -> bool | None:
    """Read a yes/no verdict from a prediction: True for yes, False for no, None when there is none.

    If the text holds an answer sentence ("... So the answer is yes."), only the part after the last
    "the answer is" counts (see :func:`active_rag.evaluation.answers.extract_answer`). In that part, after
    SQuAD normalisation, the first word decides when it is "yes" or "no" (DRAGIN appendix B reads the words
    after "So the answer is"); otherwise the verdict is the only one of "yes"/"no" that occurs as a word,
    and None when neither or both occur.

    Unlike DRAGIN's ``StrategyQA.get_real_prediction``, which maps any answer not starting with "yes" to
    "no", an answer with no verdict is None and scores 0 (DRAGIN's rule would credit it on "no" questions).
    """
    from active_rag.evaluation.answers import extract_answer  # local import: answers has no deps on metrics

    answer = extract_answer(text)
    words = normalize_answer(answer if answer is not None else text).split()
    if not words:
        return None
    if words[0] in _YES_NO_TOKENS:
        return _YES_NO_TOKENS[words[0]]
    found = {w for w in words if w in _YES_NO_TOKENS}
    if len(found) == 1:
        return _YES_NO_TOKENS[found.pop()]
    return None


def strategyqa_accuracy(pred_text: str, gold_bool: bool) -> float:
    """1.0 when the yes/no verdict read from ``pred_text`` (see :func:`extract_yes_no`) equals ``gold_bool``.

    ``pred_text`` may be the whole chain-of-thought generation or the extracted answer. No verdict scores 0.
    """
    verdict = extract_yes_no(pred_text)
    return float(verdict is not None and verdict == bool(gold_bool))


# ---------------------------------------------------------------------------------------------- RetrievalQA


def match(pred: str, golds: Golds) -> float:
    """RetrievalQA's ``match``: 1.0 when any normalised gold is a substring of the normalised prediction.

    Exactly ``utils.match`` of github.com/hyintell/RetrievalQA (SQuAD normalisation, plain substring test, so
    "no" matches inside "north" and a gold that normalises to "" matches everything, as in the authors' code).
    """
    norm_pred = normalize_answer(pred)
    return float(any(normalize_answer(g) in norm_pred for g in _gold_list(golds)))


# Latin letters that NFKD does not decompose, folded to their usual ASCII spelling.
_EXTRA_FOLDS = {
    "ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ħ": "h", "ı": "i",
    "ŋ": "n", "ŧ": "t", "ĸ": "k", "ſ": "s",
}


def _fold_groups(text: str) -> list[tuple[str, bool]]:
    """Split a normalised text into groups (ASCII folding, optional?) one per character.

    ASCII characters are fixed groups. A non-ASCII Latin letter (one whose NFKD form carries combining marks,
    like "š" or "á", or whose Unicode name starts with LATIN, like "ł") becomes an *optional* group whose
    spelling is its ASCII folding ("š" -> "s", "ß" -> "ss"): it may be matched by that folding or deleted.
    Other characters (CJK, Unicode dashes, ...) are fixed groups spelled as themselves; lone combining marks
    are dropped.
    """
    groups: list[tuple[str, bool]] = []
    for ch in unicodedata.normalize("NFC", text):
        if ch.isascii():
            groups.append((ch, False))
            continue
        if unicodedata.combining(ch):
            continue
        decomposed = unicodedata.normalize("NFKD", ch)
        stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
        has_marks = stripped != decomposed
        is_latin = unicodedata.name(ch, "").startswith("LATIN")
        if ch in _EXTRA_FOLDS:
            groups.append((_EXTRA_FOLDS[ch], True))
        elif has_marks or is_latin:
            groups.append((stripped.lower() or ch, True))
        else:
            groups.append((stripped or ch, False))
    return groups


def _expand(groups: list[tuple[str, bool]]) -> tuple[str, list[int | None], list[bool]]:
    """Characters of the folded text, the end index of the optional group starting at each position, boundaries."""
    chars: list[str] = []
    skip_to: list[int | None] = []
    for spelling, optional in groups:
        start = len(chars)
        chars.extend(spelling)
        skip_to.extend([None] * len(spelling))
        if optional:
            skip_to[start] = start + len(spelling)
    boundary = [False] * (len(chars) + 1)
    pos = 0
    boundary[0] = True
    for spelling, _ in groups:
        pos += len(spelling)
        boundary[pos] = True
    return "".join(chars), skip_to, boundary


def _folded_contains(pred: str, gold: str) -> bool:
    """True when the folded gold occurs in the folded prediction, each accented letter on either side being
    spelled either as its ASCII folding or deleted (independently per letter); at least one character must match."""
    p_chars, p_skip, p_boundary = _expand(_fold_groups(pred))
    g_chars, g_skip, _ = _expand(_fold_groups(gold))
    n, m = len(p_chars), len(g_chars)
    if m == 0:
        return False
    # States (i, j, matched): i chars of the prediction and j chars of the gold consumed. The gold may start at
    # any group boundary of the prediction (substring test) and must be consumed entirely.
    start = [(i, 0, False) for i in range(n + 1) if p_boundary[i]]
    seen: set[tuple[int, int, bool]] = set(start)
    stack = list(start)
    while stack:
        i, j, matched = stack.pop()
        if j == m and matched and p_boundary[i]:
            return True
        successors: list[tuple[int, int, bool]] = []
        if i < n and p_skip[i] is not None:
            successors.append((p_skip[i], j, matched))  # type: ignore[arg-type]
        if j < m and g_skip[j] is not None:
            successors.append((i, g_skip[j], matched))  # type: ignore[arg-type]
        if i < n and j < m and p_chars[i] == g_chars[j]:
            successors.append((i + 1, j + 1, True))
        for state in successors:
            if state not in seen:
                seen.add(state)
                stack.append(state)
    return False


def match_accent_folded(pred: str, golds: Golds) -> float:
    """RetrievalQA ``match`` that tolerates accents, including accented letters that were deleted.

    RetrievalQA's TriviaQA golds lost some accented letters upstream: "Leos Jancek" for "Leoš Janáček",
    "Dana Ztopkov" for "Dana Zátopková", "Fcamp" for "Fécamp". Neither folding ("Leos Janacek") nor deleting
    every accented letter ("Leo Janek") of the correct prediction "Leoš Janáček" contains "leos jancek"; the
    gold keeps "s" and "c" for "š" and "č" but dropped "á". So this metric folds per letter:

    1. Both texts are SQuAD-normalised (:func:`normalize_answer`), then NFC-composed.
    2. Every non-ASCII Latin letter (NFKD decomposes it into a base and combining marks, e.g. "é" -> "e" + U+0301,
       or it is a Latin letter with no decomposition such as "ł", "ø", "ß") may be read either as its ASCII
       folding (marks dropped: "é" -> "e"; "ł" -> "l", "ß" -> "ss") or as nothing (deleted). The choice is free
       for each letter, on both sides. Other characters (ASCII, CJK, Unicode punctuation) must match as they are.
    3. The score is 1.0 when, for some such reading, a gold occurs as a substring of the prediction (with at
       least one character matched), or when the authors' :func:`match` already gives 1.0.

    Both all-folded and all-deleted spellings are special cases, so the metric is never below :func:`match`.
    """
    gold_list = _gold_list(golds)
    if match(pred, gold_list):
        return 1.0
    norm_pred = normalize_answer(pred)
    return float(any(_folded_contains(norm_pred, normalize_answer(g)) for g in gold_list))


# ------------------------------------------------------------------------------------- retrieval decisions


def decision_metrics(decisions: Sequence[bool], labels: Sequence[bool]) -> dict[str, float]:
    """How well retrieve/no-retrieve decisions match need-retrieval labels (positive class = retrieve).

    Returns ``accuracy`` (share of decisions equal to the label), ``precision`` (share of retrievals on
    questions that need it; 0.0 when the router never retrieves), ``recall`` (share of need-retrieval
    questions on which it retrieved: RetrievalQA's "retrieval accuracy" when every question needs retrieval;
    0.0 when no question needs it), ``f1`` (harmonic mean of the two, 0.0 when both are 0), ``retrieval_rate``
    (share of questions retrieved on), and the counts ``n``, ``tp``, ``fp``, ``fn``, ``tn``.
    """
    if len(decisions) != len(labels):
        raise ValueError(
            f"decisions and labels differ in length ({len(decisions)} vs {len(labels)}): pass one label per decision."
        )
    if not decisions:
        raise ValueError("No decisions given: pass at least one (decision, label) pair.")
    pairs = list(zip(decisions, labels, strict=True))
    tp = sum(1 for d, y in pairs if d and y)
    fp = sum(1 for d, y in pairs if d and not y)
    fn = sum(1 for d, y in pairs if not d and y)
    tn = sum(1 for d, y in pairs if not d and not y)
    n = len(decisions)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "accuracy": (tp + tn) / n,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "retrieval_rate": (tp + fp) / n,
        "n": float(n),
        "tp": float(tp),
        "fp": float(fp),
        "fn": float(fn),
        "tn": float(tn),
    }


# ----------------------------------------------------------------------------------------------- aggregate


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Means of the numeric fields of per-question rows, plus ``n`` (the number of rows).

    Booleans count as 0/1. A key's mean is taken over the rows where it is a number (not None, not NaN, not a
    string), so a metric defined for only some questions is averaged over those. Non-numeric keys are left out.
    A key named ``n`` in the rows is ignored (the result's ``n`` is the row count).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    n = 0
    for row in rows:
        n += 1
        for key, value in row.items():
            if key == "n" or not _is_number(value):
                continue
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    result = {key: sums[key] / counts[key] for key in sums}
    result["n"] = float(n)
    return result


def bootstrap_ci(values: Sequence[float], *, resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (Efron & Tibshirani 1993, ch. 13): the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the means of ``resamples`` resamples drawn with
    replacement; a fixed ``seed`` makes tables reproducible. ``None`` for fewer than two values."""
    import random

    xs = [float(v) for v in values]
    n = len(xs)
    if n < 2:
        return None
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    lo = means[int(math.floor((1 - level) / 2 * (resamples - 1)))]
    hi = means[int(math.ceil((1 + level) / 2 * (resamples - 1)))]
    return lo, hi
