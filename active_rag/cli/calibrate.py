"""The ``active-rag calibrate`` subcommand: run DRAGIN's or FLARE's trigger with retrieval off on a few dozen
questions and cache the threshold that gives the paper's retrieval rate (:mod:`active_rag.engine.calibration` runs it)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .model_flags import add_model_options, load_model, model_options

__all__ = ["add_calibrate_parser", "cmd_calibrate"]

_CALIBRATE_METHODS = ("dragin", "flare")


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The ``active-rag calibrate`` subcommand (:mod:`active_rag.engine.calibration` runs it)."""
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
    add_model_options(p)
    p.set_defaults(func=cmd_calibrate)
    return p


def _calibration_questions(args: argparse.Namespace) -> tuple[list[str], Any]:
    """The questions to calibrate on (a dataset slice, else the bundled demo questions) and the dataset's prompt."""
    from ..errors import InvalidOptionError

    if args.dataset:
        from ..evaluation.config import eval_prompt_template
        from ..evaluation.datasets import load_dataset

        examples = load_dataset(args.dataset, args.data_dir, limit=args.limit)
        return [e.question for e in examples], eval_prompt_template(args.dataset)
    from ..retrieval.bm25 import demo_questions_path

    with open(demo_questions_path(), encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh if line.strip()][: args.limit]
    if not questions:
        raise InvalidOptionError("No questions to calibrate on: raise --limit.")
    return questions, None


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``active-rag calibrate``: print (and cache) the calibrated threshold."""
    import math

    from ..engine.calibration import NoRetrieval, calibrate
    from ..errors import InvalidOptionError
    from ..engine import ActiveRAG
    from ..components.profiles import get_profile, profile_for_dataset
    from ..components.prompt_layout import check_prompt_mode
    from ..components.thresholds import cache_path
    from ..validation import check_int

    if args.method not in _CALIBRATE_METHODS:
        raise InvalidOptionError(f"--method must be one of {', '.join(_CALIBRATE_METHODS)} (the triggers with a "
                                 f"threshold), got {args.method!r}.")
    check_int("--limit", args.limit, minimum=1)
    if args.max_new_tokens is not None:
        check_int("--max-new-tokens", args.max_new_tokens, minimum=1)
    check_prompt_mode(args.prompt_mode)
    profile = get_profile(args.profile) if args.profile else (profile_for_dataset(args.dataset) if args.dataset else None)
    if args.target is not None and (args.target < 0 or math.isnan(args.target)):
        raise InvalidOptionError(f"--target is retrievals per question, 0 or more, got {args.target}.")
    if args.scale is not None and args.method != "dragin":
        raise InvalidOptionError("--scale is RIND's (DRAGIN): drop it for flare.")
    questions, template = _calibration_questions(args)
    lm = load_model(args.model, **model_options(args))  # --device, --dtype, --weights, prefix cache
    overrides: dict[str, Any] = {"prompt_mode": args.prompt_mode, "profile": profile}
    if template is not None:
        overrides["prompt"] = template
    if args.max_new_tokens is not None or profile is None:
        overrides["max_new_tokens"] = args.max_new_tokens or 128
    if args.scale is not None:
        from ..components.triggers import RindTrigger

        overrides["trigger"] = RindTrigger(theta="auto", scale=args.scale,
                                           max_tokens=profile.generate_length if profile else 100)
    rag = ActiveRAG.from_preset(args.method, lm, NoRetrieval(), **overrides)
    try:
        result = calibrate(rag, questions, profile=profile, target=args.target)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from exc
    out = sys.stdout
    if args.json:
        print(json.dumps({**result.to_dict(), "cache": str(cache_path())}, indent=2), file=out)
        return 0
    print(f"{result.model} / {result.trigger} / profile {result.profile or '-'} / prompt mode {result.prompt_mode}: "
          f"theta = {result.theta:.4g}", file=out)
    print(f"  {result.questions} questions, {result.checks} checks ({result.checks_per_question:.2f} per question); "
          f"target {result.target_retrievals_per_question:g} retrievals per question = {result.fire_fraction:.1%} of "
          "checks", file=out)
    print("  score quantiles: " + ", ".join(f"{k} {v:.4g}" for k, v in result.score_quantiles.items()), file=out)
    if not result.reachable:
        print(f"  warning: the target is out of reach: this model's answers offer {result.checks_per_question:.2f} checks "
              "per question, so the threshold fires on every check (pass a lower --target, or more --max-new-tokens)",
              file=out)
    print(f"  cached in {cache_path()}; presets with theta='auto' use it", file=out)
    return 0
