"""Thresholds that fire on any model: calibrate a trigger's threshold to a target retrieval rate.

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
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .profiles import Profile, get_profile
from .types import Passage, TriggerDecision

__all__ = [
    "CALIBRATION_FILE",
    "Calibration",
    "cache_dir",
    "cache_path",
    "calibrate",
    "calibration_key",
    "collect_check_scores",
    "load_calibration",
    "resolve_threshold",
    "save_calibration",
    "threshold_for_rate",
]

CALIBRATION_FILE = "calibration.json"
_DEFAULT_PROFILE = "hotpotqa"
#: Triggers with a calibratable threshold, and whether they fire above it (RIND) or below it (FLARE).
FIRES_ABOVE = {"rind": True, "low-confidence": False}


def cache_dir() -> Path:
    """``$ACTIVE_RAG_CACHE`` (else ``$XDG_CACHE_HOME/active-rag``, else ``~/.cache/active-rag``)."""
    explicit = os.environ.get("ACTIVE_RAG_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg).expanduser() / "active-rag" if xdg else Path.home() / ".cache" / "active-rag"


def cache_path() -> Path:
    return cache_dir() / CALIBRATION_FILE


def _trigger_key(trigger: Any) -> str:
    scale = getattr(trigger, "scale", None)
    return f"{trigger.name}:{scale}" if scale and scale != "sentence" else str(trigger.name)


def calibration_key(model: str, trigger: Any, profile: str | None = None, prompt_mode: str = "single") -> str:
    """``model|trigger[:scale]|profile|prompt mode``: one cached threshold per combination."""
    return f"{model}|{_trigger_key(trigger)}|{profile or '-'}|{prompt_mode}"


@dataclass
class Calibration:
    """One calibrated threshold and the evidence behind it."""

    model: str
    trigger: str
    theta: float
    target_retrievals_per_question: float
    fire_fraction: float
    questions: int
    checks: int
    profile: str | None = None
    prompt_mode: str = "single"
    score_quantiles: dict[str, float] = field(default_factory=dict)
    created: str = ""

    @property
    def checks_per_question(self) -> float:
        return self.checks / self.questions if self.questions else 0.0

    @property
    def reachable(self) -> bool:
        """Whether one threshold can give the target: a model whose answers offer fewer checks per question
        than the target's retrievals per question fires on every check and still falls short."""
        return self.target_retrievals_per_question <= self.checks_per_question

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "checks_per_question": self.checks_per_question,
                "reachable": self.reachable}


def threshold_for_rate(scores: Sequence[float], fraction: float, *, fires_above: bool) -> float:
    """The threshold at which ``fraction`` of ``scores`` fire (``score > theta`` when ``fires_above``, else
    ``score < theta``): ``k = round(fraction * n)`` scores fire. RIND: the ``k+1``-th largest score;
    FLARE: the ``k+1``-th smallest. ``k = n`` gives a threshold just past the last score."""
    if not scores:
        raise ValueError("No check scores to calibrate on: the questions produced no trigger checks.")
    if not 0.0 <= fraction <= 1.0 or math.isnan(fraction):
        raise ValueError(f"fraction must be between 0 and 1, got {fraction}.")
    ordered = sorted(scores, reverse=fires_above)
    k = int(round(fraction * len(ordered)))
    if k >= len(ordered):
        last = ordered[-1]
        return max(0.0, last - 1e-6) if fires_above else last + 1e-6
    return float(ordered[k])


# ---------------------------------------------------------------------------------------------- collection


class _NoRetrieval:
    """Calibration runs with retrieval off: a trigger that never fires never calls this."""

    def retrieve(self, query: str, k: int) -> list[Passage]:  # pragma: no cover - never reached
        raise AssertionError("calibration must not retrieve")


def collect_check_scores(rag: Any, questions: Iterable[str]) -> list[list[float]]:
    """Per question, the score of every check ``rag``'s trigger makes, generating with retrieval OFF.

    ``rag`` is an :class:`~active_rag.loop.ActiveRAG` whose trigger has ``check_scores`` (RIND, FLARE). Its
    trigger is swapped for a recorder that holds (never fires); the engine, prompt and limits stay."""
    from .loop import ActiveRAG

    inner = rag.trigger
    if not hasattr(inner, "check_scores"):
        raise ValueError(f"Trigger {inner.name!r} has no score threshold to calibrate (use rind or low-confidence).")
    recorded: list[float] = []
    recorder = _Recorder(inner, recorded)
    quiet = ActiveRAG(
        rag.model, _NoRetrieval(), trigger=dataclasses.replace(inner, theta=0.0) if hasattr(inner, "theta") else inner,
        query=rag.query, prompt=rag.prompt, prompt_mode=rag.prompt_mode,
        top_k=rag.top_k, max_new_tokens=rag.max_new_tokens, initial_retrieval=False, stop=rag.stop,
        answer_phrase=None, repetition_guard=rag.repetition_guard, method=f"calibrate:{rag.method}",
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
        model=str(getattr(rag.model, "variant", None) or rag.model.name), trigger=_trigger_key(trigger), theta=float(theta), target_retrievals_per_question=float(rate),
        fire_fraction=fraction, questions=len(questions), checks=len(scores), profile=prof.name if prof else None,
        prompt_mode=rag.prompt_mode, score_quantiles=quantiles,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    if save:
        save_calibration(result, trigger)
    return result


# --------------------------------------------------------------------------------------------------- cache


def _read_cache(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def save_calibration(cal: Calibration, trigger: Any, path: Path | None = None) -> Path:
    """Add (or replace) ``cal`` in the cache file, atomically; other entries are kept."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_cache(path)
    data[calibration_key(cal.model, trigger, cal.profile, cal.prompt_mode)] = cal.to_dict()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path


def load_calibration(model: str, trigger: Any, profile: str | None = None, prompt_mode: str = "single",
                     path: Path | None = None) -> dict[str, Any] | None:
    """The cached calibration entry, or ``None``."""
    entry = _read_cache(path or cache_path()).get(calibration_key(model, trigger, profile, prompt_mode))
    return entry if isinstance(entry, dict) and isinstance(entry.get("theta"), (int, float)) else None


def resolve_threshold(trigger: Any, model: str, profile: Profile | None = None, prompt_mode: str = "single") -> Any:
    """A copy of ``trigger`` with ``theta="auto"`` replaced: the cached calibration for this model, trigger,
    profile and prompt mode when there is one (``threshold_source = "calibrated:<file>"``), else the profile's
    theta for RIND (``"profile:<name>"``), else the paper's default (``"default (not calibrated for <model>)"``).
    Triggers without ``theta="auto"`` are returned unchanged."""
    if getattr(trigger, "theta", None) != "auto":
        return trigger
    entry = load_calibration(model, trigger, profile.name if profile else None, prompt_mode)
    if entry is not None:
        return dataclasses.replace(trigger, theta=float(entry["theta"]), threshold_source=f"calibrated:{cache_path()}")
    if profile is not None and trigger.name == "rind":
        return dataclasses.replace(trigger, theta=profile.theta, threshold_source=f"profile:{profile.name}")
    return dataclasses.replace(trigger, theta=float(trigger.default_theta),
                               threshold_source=f"default (not calibrated for {model})")


def calibration_entries(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every cached calibration, by key (``model|trigger|profile|prompt mode``)."""
    return {k: v for k, v in _read_cache(path or cache_path()).items() if isinstance(v, dict) and "theta" in v}


# ------------------------------------------------------------------------------------------------------ CLI

_METHODS = ("dragin", "flare")


def add_calibrate_parser(subparsers: Any, add_model_options: Any = None) -> Any:
    """The ``active-rag calibrate`` subcommand."""
    p = subparsers.add_parser(
        "calibrate",
        help="calibrate DRAGIN's or FLARE's threshold on this model to the paper's retrieval rate",
        description="Run the method with retrieval off on a few dozen unlabeled questions (a dataset slice or the "
        "bundled demo questions), measure the trigger's score per check, and cache the threshold that gives the "
        "target retrievals per question; presets with theta='auto' then use it.",
    )
    p.add_argument("--method", default="dragin", help="dragin (RIND) or flare (token probability) (default dragin)")
    p.add_argument("--model", default=None, help="registry name, .gguf file or HF folder (default smollm2)")
    p.add_argument("--profile", default=None, help="DRAGIN Table 9 profile (default: the dataset's, else none)")
    p.add_argument("--dataset", default=None, help="take questions from this evaluation dataset (default: demo questions)")
    p.add_argument("--data-dir", default=None, help="evaluation data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    p.add_argument("--limit", type=int, default=30, help="number of questions (default 30)")
    p.add_argument("--target", type=float, default=None,
                   help="retrievals per question to aim for (default: the profile's DRAGIN/FLARE rate of Table 3)")
    p.add_argument("--scale", default=None, help="RIND scale: sentence (default) or raw")
    p.add_argument("--prompt-mode", default="auto", help="auto (the model's own, default), single, chat-turns or completion")
    p.add_argument("--max-new-tokens", type=int, default=None, help="answer length (default: the profile's, else 128)")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    if add_model_options is not None:
        add_model_options(p)
    p.set_defaults(func=cmd_calibrate)
    return p


def _questions(args: Any) -> tuple[list[str], Any]:
    from .errors import InvalidOptionError

    if args.dataset:
        from .evaluation.datasets import load_dataset
        from .evaluation.config import eval_prompt_template

        examples = load_dataset(args.dataset, args.data_dir, limit=args.limit)
        return [e.question for e in examples], eval_prompt_template(args.dataset)
    from .retrieval import demo_questions_path

    with open(demo_questions_path(), encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh if line.strip()][: args.limit]
    if not questions:
        raise InvalidOptionError("No questions to calibrate on: raise --limit.")
    return questions, None


def cmd_calibrate(args: Any) -> int:
    """``active-rag calibrate``: print (and cache) the calibrated threshold."""
    import sys

    from .errors import InvalidOptionError
    from .layout import check_prompt_mode
    from .loop import ActiveRAG
    from .profiles import profile_for_dataset
    from .validation import check_int

    if args.method not in _METHODS:
        raise InvalidOptionError(f"--method must be one of {', '.join(_METHODS)} (the triggers with a threshold), got {args.method!r}.")
    check_int("--limit", args.limit, minimum=1)
    if args.max_new_tokens is not None:
        check_int("--max-new-tokens", args.max_new_tokens, minimum=1)
    check_prompt_mode(args.prompt_mode)
    profile = get_profile(args.profile) if args.profile else (profile_for_dataset(args.dataset) if args.dataset else None)
    if args.target is not None and (args.target < 0 or math.isnan(args.target)):
        raise InvalidOptionError(f"--target is retrievals per question, 0 or more, got {args.target}.")
    if args.scale is not None and args.method != "dragin":
        raise InvalidOptionError("--scale is RIND's (DRAGIN): drop it for flare.")
    questions, template = _questions(args)
    from . import cli

    options = cli.model_options(args) if hasattr(cli, "model_options") else {}  # --device, --dtype, prefix cache
    lm = cli._load_model(args.model, **options)
    overrides: dict[str, Any] = {"prompt_mode": args.prompt_mode, "profile": profile}
    if template is not None:
        overrides["prompt"] = template
    if args.max_new_tokens is not None or profile is None:
        overrides["max_new_tokens"] = args.max_new_tokens or 128
    if args.scale is not None:
        from .triggers import RindTrigger

        overrides["trigger"] = RindTrigger(theta="auto", scale=args.scale,
                                           max_tokens=profile.generate_length if profile else 100)
    rag = ActiveRAG.from_preset(args.method, lm, _NoRetrieval(), **overrides)
    try:
        result = calibrate(rag, questions, profile=profile, target=args.target)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from exc
    if args.json:
        print(json.dumps({**result.to_dict(), "cache": str(cache_path())}, indent=2))
        return 0
    print(f"{result.model} / {result.trigger} / profile {result.profile or '-'} / prompt mode {result.prompt_mode}: "
          f"theta = {result.theta:.4g}", file=sys.stdout)
    print(f"  {result.questions} questions, {result.checks} checks ({result.checks_per_question:.2f} per question); "
          f"target {result.target_retrievals_per_question:g} retrievals per question = {result.fire_fraction:.1%} of checks")
    print(f"  score quantiles: " + ", ".join(f"{k} {v:.4g}" for k, v in result.score_quantiles.items()))
    if not result.reachable:
        print(f"  warning: the target is out of reach: this model's answers offer {result.checks_per_question:.2f} checks "
              "per question, so the threshold fires on every check (pass a lower --target, or more --max-new-tokens)")
    print(f"  cached in {cache_path()}; presets with theta='auto' use it")
    return 0
