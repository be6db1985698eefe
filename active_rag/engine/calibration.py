"""Threshold calibration: run the engine with retrieval off and pick the threshold that gives a target retrieval rate.

The papers' thresholds were tuned on their models (DRAGIN Table 9: Llama2/Vicuna 7-13B; FLARE:
text-davinci-003); a 135M-1.5B local model has other entropies, attentions and probabilities, so the same
theta may never fire or always fire. Calibration measures the trigger's score on this model and picks the
threshold that gives the papers' retrieval rate:

1. Run the method's generation once per question with retrieval OFF (a few dozen unlabeled questions: a
   dataset slice or the bundled demo questions), in the same prompt layout the method uses.
2. Record the score of every check the trigger makes: for RIND (``scale="sentence"``) the largest word
   score of each sentence (DRAGIN's released code decides per sentence), for ``scale="raw"`` the largest
   token score of each segment, for FLARE the lowest token probability of each look-ahead sentence.
3. Pick the threshold at which the target share of checks fires.

**Target.** The target is given as *retrievals per question*, the unit of DRAGIN Table 3 and of the
harness's tables (default: the profile's Table 3 rate for the method, e.g. 3.505 for DRAGIN on HotpotQA,
3.378 for FLARE; without a profile the HotpotQA rate). It is converted to a *fraction of checks that fire*
with the measured checks per question: ``f = min(1, rate / checks_per_question)``; the threshold is the
``f``-quantile from the firing end of the score distribution (RIND fires above it, FLARE below it). A rate
per question is what users compare across methods, and it does not depend on how long a model's answers
are; the fraction is what one threshold can control. It is an estimate: with retrieval on, each retrieval
changes the text that follows.

The result is cached per model, trigger (+ scale), profile and prompt mode in ``calibration.json`` under
``$ACTIVE_RAG_CACHE`` (default ``$XDG_CACHE_HOME/active-rag`` or ``~/.cache/active-rag``). A trigger with
``theta="auto"`` (the presets' default) uses the cached value when there is one, else the profile's or the
paper's value, and says which in ``threshold_source`` (trace, ``--json``, ``active-rag methods``).

This module runs the engine (:func:`collect_check_scores`, :func:`calibrate`), so it sits in the engine's package, above the loop. The
cache, the ``theta="auto"`` resolution the loop uses and :func:`~active_rag.components.thresholds.threshold_for_rate` are
in :mod:`active_rag.components.thresholds`, below the loop; the ``active-rag calibrate`` command is in :mod:`active_rag.cli`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..components.answer_stage import AnswerStage
from ..components.profiles import Profile, get_profile
from ..components.thresholds import Calibration, save_calibration, threshold_for_rate, trigger_key
from ..components.settings import RunSettings
from ..types import Passage, TriggerDecision
from .loop import ActiveRAG

__all__ = ["FIRES_ABOVE", "NoRetrieval", "calibrate", "collect_check_scores"]

_DEFAULT_PROFILE = "hotpotqa"
#: Triggers with a calibratable threshold, and whether they fire above it (RIND) or below it (FLARE).
FIRES_ABOVE = {"rind": True, "low-confidence": False}


class NoRetrieval:
    """The retriever of a calibration run, which runs with retrieval off: a trigger that never fires never calls it."""

    def retrieve(self, query: str, k: int) -> list[Passage]:  # pragma: no cover - never reached
        raise AssertionError("calibration must not retrieve")


def collect_check_scores(rag: Any, questions: Iterable[str]) -> list[list[float]]:
    """Per question, the score of every check ``rag``'s trigger makes, generating with retrieval OFF.

    ``rag`` is an :class:`~active_rag.engine.loop.ActiveRAG` whose trigger has ``check_scores`` (RIND, FLARE). Its
    trigger is swapped for a recorder that holds (never fires); the engine, prompt and limits stay."""
    inner = rag.trigger
    if not hasattr(inner, "check_scores"):
        raise ValueError(f"Trigger {inner.name!r} has no score threshold to calibrate (use rind or low-confidence).")
    recorded: list[float] = []
    recorder = _Recorder(inner, recorded)
    quiet = ActiveRAG(
        rag.model, NoRetrieval(), trigger=dataclasses.replace(inner, theta=0.0) if hasattr(inner, "theta") else inner,
        query=rag.query, prompt=rag.prompt, top_k=rag.top_k, max_new_tokens=rag.max_new_tokens,
        answer=AnswerStage(phrase=None),
        settings=RunSettings(prompt_mode=rag.prompt_mode, stop=rag.settings.stop, repetition_guard=rag.settings.repetition_guard,
                             method=f"calibrate:{rag.method}"),
    )
    quiet.trigger = recorder  # type: ignore[assignment]  # same segmentation, records and never fires
    out: list[list[float]] = []
    for q in questions:
        recorded.clear()
        quiet.run(q)
        out.append(list(recorded))
    return out


class _Recorder:
    """Wraps a trigger: same segmentation and action, records ``check_scores`` and never fires."""

    def __init__(self, inner: Any, sink: list[float]) -> None:
        self.inner, self.sink = inner, sink
        self.name = inner.name
        self.action, self.unit = inner.action, inner.unit
        self.needs_attention = inner.needs_attention
        self.recheck_after_retrieval = inner.recheck_after_retrieval
        self.max_tokens = inner.max_tokens
        self.theta = 0.0
        self.threshold_source = "calibration"

    def check(self, ctx: Any) -> TriggerDecision:
        self.sink.extend(self.inner.check_scores(ctx))
        return TriggerDecision(fire=False, trigger=self.name, reason="calibration: retrieval off")

    def segment_done(self, text: str) -> bool:
        return bool(self.inner.segment_done(text))

    def logits_processor(self, lm: Any) -> Any:
        return None

    def describe(self) -> str:
        return f"calibrate({self.inner.describe()})"


def calibrate(
    rag: Any,
    questions: Sequence[str],
    *,
    profile: str | Profile | None = None,
    target: float | None = None,
    save: bool = True,
) -> Calibration:
    """Calibrate ``rag``'s trigger threshold on ``questions`` (see the module docstring) and, with ``save``,
    cache it for ``rag.model.name``. ``target`` is retrievals per question (default: the profile's Table 3
    rate for the method; the HotpotQA rate without a profile)."""
    trigger = rag.trigger
    if trigger.name not in FIRES_ABOVE:
        raise ValueError(f"Trigger {trigger.name!r} has no score threshold to calibrate (use rind or low-confidence).")
    if not questions:
        raise ValueError("Calibration needs at least one question.")
    prof = get_profile(profile) if isinstance(profile, str) else profile
    rate = target if target is not None else (prof or get_profile(_DEFAULT_PROFILE)).target_rate(trigger.name)
    if rate < 0 or math.isnan(rate):
        raise ValueError(f"target retrievals per question must be >= 0, got {rate}.")
    per_question = collect_check_scores(rag, questions)
    scores = [s for qs in per_question for s in qs]
    if not scores:
        raise ValueError("The questions produced no trigger checks (empty answers?): use more or other questions.")
    fraction = min(1.0, rate * len(questions) / len(scores))
    fires_above = FIRES_ABOVE[trigger.name]
    theta = threshold_for_rate(scores, fraction, fires_above=fires_above)
    if not fires_above:
        theta = min(theta, 1.0)
    ordered = sorted(scores)
    quantiles = {f"p{int(p * 100)}": ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1)))] for p in (0.1, 0.5, 0.9)}
    result = Calibration(
        model=str(getattr(rag.model, "variant", None) or rag.model.name), trigger=trigger_key(trigger), theta=float(theta), target_retrievals_per_question=float(rate),
        fire_fraction=fraction, questions=len(questions), checks=len(scores), profile=prof.name if prof else None,
        prompt_mode=rag.prompt_mode, score_quantiles=quantiles,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    if save:
        save_calibration(result, trigger)
    return result
