"""The ``active-rag eval`` and ``active-rag bench`` subcommands: a thin argparse layer over
:func:`active_rag.evaluation.runner.run_eval` and :func:`active_rag.evaluation.bench.run_bench`.

``register(subparsers)`` adds both to the main CLI's subparsers; ``python -m active_rag.evaluation.cli``
runs them standalone.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_bench_parser", "add_eval_parser", "cmd_bench", "cmd_eval", "main", "register"]


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _ints(value: str) -> list[int]:
    try:
        out = [int(v) for v in _csv(value)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from exc
    if any(v < 1 for v in out):
        raise argparse.ArgumentTypeError("token counts must be positive")
    return out


def _sweep(value: str) -> tuple[str, list[float]]:
    name, sep, rest = value.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected PARAM=V1,V2,... (e.g. theta=0.5,1,1.5), got {value!r}")
    try:
        values = [float(v) for v in _csv(rest)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"sweep values must be numbers, got {rest!r}") from exc
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"sweep values must be finite numbers, got {rest!r}")
    return name.strip(), values


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    from active_rag.cli.model_flags import DefaultName, add_endpoint_options, add_model_options
    from active_rag.evaluation.datasets import DATASETS
    from active_rag.evaluation.config import DEFAULT_EVAL_MODEL

    p = subparsers.add_parser(
        "eval",
        help="evaluate methods on HotpotQA, 2WikiMultihopQA, StrategyQA or RetrievalQA",
        description="Run the papers' methods (engine presets, or any trigger with any query formulator) on a "
        "question set; write per-question JSONL (resumable), results.md, summary.json and PNG plots.",
    )
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--data-dir", type=Path, default=None, help="data folder (default: $ACTIVE_RAG_DATA or ../shared/data); any "
                   "folder in that layout, e.g. a union corpus of shared/tools/build_union_corpus.py")
    p.add_argument("--split", default="dev", help="question file: dev (default) or, for hotpotqa, dev-b (mostly comparison "
                   "questions; rows under OUT/hotpotqa-dev-b/)")
    p.add_argument("--hide-titles", action="store_true",
                   help="index and show every passage with the title doc-<n>.txt instead of its own (gold passages are "
                   "still found by their real titles)")
    p.add_argument("--methods", type=_csv, default=None,
                   help="comma-separated presets (default: all; wo-rag,sr-rag for retrievalqa)")
    p.add_argument("--trigger", type=_csv, default=[], help="ablation: trigger name(s), comma-separated")
    p.add_argument("--query", type=_csv, default=[], help="ablation: query formulator name(s), comma-separated")
    p.add_argument("--grid", action="store_true", help="run every --trigger x --query combination")
    p.add_argument("--initial-retrieval", action="store_true",
                   help="every method retrieves with the question before its first token (presets run as NAME@ir)")
    p.add_argument("--context", default=None,
                   help="context policy for every method: replace, keep-newest, accumulate, read-links, focus or rerank (presets run as "
                   "NAME@context=POLICY; default: each method's own)")
    p.add_argument("--answer-options", action="store_true",
                   help="answer a choice question ('..., A or B?') with one of its options (presets run as NAME@options)")
    p.add_argument("--ask-same", action="store_true",
                   help="answer 'Do A and B have the same X?' by the X the model names for each (AnswerStage(same=True); "
                   "presets run as NAME@same unless they already do)")
    p.add_argument("--router", choices=("ta-are", "vanilla", "none"), default=None,
                   help="route each question before generating (default: ta-are for retrievalqa, none otherwise)")
    p.add_argument("--model", default=DefaultName(DEFAULT_EVAL_MODEL), help=f"model name or path (default: {DEFAULT_EVAL_MODEL}); "
                   "with --endpoint: the served model's tokenizer (default: none, plain-text prompts)")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument("--out", type=Path, default=Path("runs/eval"), help="output folder (default: runs/eval)")
    p.add_argument("--top-k", type=int, default=3, help="passages per retrieval (default 3; retrievalqa uses its 5)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="cap on answer tokens (default: the profile's generation length, else 128)")
    p.add_argument("--max-retrievals", type=int, default=None,
                   help="cap on retrievals per question (default: none; a generated-token guard stops runaways)")
    p.add_argument("--profile", default=None,
                   help="DRAGIN Table 9 profile (default: the dataset's, e.g. hotpotqa; 'none' for none)")
    p.add_argument("--prompt-mode", default="auto",
                   help="auto (the model's own, default: chat-turns for the Qwen models), single (one chat message), "
                   "chat-turns (exemplars as prior chat turns) or completion")
    p.add_argument("--ta-are-demos", default="fixed", choices=("fixed", "similar"),
                   help="TA-ARE demonstrations: the authors' fixed ones (default) or the 2 most similar [Yes] questions "
                   "of the dataset (MiniLM cosine)")
    p.add_argument("--today", default=None, metavar="YYYY-MM-DD",
                   help="the date TA-ARE's prompt gives (default: a fixed 2026-11-23, recorded in each row; rows of "
                   "another date are answered again)")
    p.add_argument("--baseline", default=None, metavar="METHOD",
                   help="paired comparison of every method against this one (default: sr-rag when it runs; 'none': off)")
    p.add_argument("--sweep", type=_sweep, default=None, metavar="PARAM=V1,V2,...",
                   help="run each method whose trigger has PARAM once per value, e.g. theta=0.5,1,1.5; check_theta: the "
                   "answer check's theta (check_theta=1 looks again after every answer: "
                   "python research/answer_check_sweep.py reads any lower theta off those rows)")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="skip questions already in the JSONL files (default: on)")
    p.add_argument("--retry-failed", action=argparse.BooleanOptionalAction, default=True,
                   help="on resume, answer again the questions whose last try failed (default: on; --no-retry-failed "
                   "keeps their failure rows)")
    p.add_argument("--index-cache", type=Path, default=None,
                   help="folder for built BM25 indexes (default: $ACTIVE_RAG_CACHE/indexes or ~/.cache/active-rag/indexes)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--batch-size", type=int, default=1,
                   help="questions decoded together, one batched forward per step (default 1); rows are the same")
    add_model_options(p)
    add_endpoint_options(p)
    p.add_argument("--ray", action="store_true",
                   help="shard the questions across Ray actors (local Ray, or the cluster at $RAY_ADDRESS); needs [ray]")
    p.add_argument("--num-workers", type=int, default=None,
                   help="with --ray: actors to start (default: one per GPU, else one per CPU slot)")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)
    return p


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="measure the engine's overhead against model.generate and a naive attention reference",
        description="(a) DRAGIN/FLARE loops with retrieval disabled vs model.generate; (b) vs re-running a full "
        "forward pass with output_attentions; (c) retrieval share with BM25; peak memory per output length.",
    )
    from active_rag.cli.model_flags import DefaultName

    p.add_argument("--model", default=DefaultName("smollm2"), help="model name or path (default: smollm2); with --endpoint: "
                   "the served model's tokenizer (default: none, plain-text prompts)")
    p.add_argument("--tokens", type=_ints, default=None,
                   help="output lengths (default 64,128,256; batch suite: the first, default 64; weights suite: decode steps timed, default 32)")
    p.add_argument("--prompts", type=int, default=3, help="number of demo questions used as prompts (default 3)")
    p.add_argument("--repeats", type=int, default=None, help="repeats of every timing (default 1; weights suite: 3, the median)")
    p.add_argument("--out", type=Path, default=Path("runs/bench"), help="output folder (default: runs/bench)")
    p.add_argument("--methods", type=_csv, default=["dragin", "flare"], help="engine loops (default dragin,flare)")
    p.add_argument("--naive", type=_csv, default=["token", "segment"], help="naive references (token,segment)")
    p.add_argument("--naive-prompts", type=int, default=1,
                   help="prompts the slow naive references run on (default 1; 0 skips them)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--memory-tokens", type=_ints, default=None,
                   help="output lengths for the memory measurement (default: --tokens)")
    p.add_argument("--no-retrieval", action="store_true", help="skip the retrieval-share measurement")
    p.add_argument("--profile", action="store_true", help="cProfile the DRAGIN loop at the longest length")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is steadier on a shared machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--suite", choices=("overhead", "batch", "prefix", "weights", "endpoint", "llamacpp"), default="overhead",
                   help="overhead: (a)-(c) above (default); batch: tokens/s per batch size vs model.generate; "
                   "prefix: seconds and prefilled tokens per question with and without the prefix cache; "
                   "weights: float32 vs int8 vs int4 decode, prefill, memory limit and agreement; "
                   "llamacpp: the engine against llama.cpp on the same GGUF, prompt and threads (prefill, decode, memory limit, "
                   "peak memory of each side's own process)")
    p.add_argument("--models", type=_csv, default=None,
                   help="weights and llamacpp suites: models (default qwen2.5-coder-0.5b,qwen2.5-coder-1.5b)")
    p.add_argument("--prefill-tokens", type=int, default=None,
                   help="weights and llamacpp suites: prompt length of the prefill timing (default 512; llamacpp: 939, six demo passages)")
    p.add_argument("--llama-cpp", choices=("installed", "native", "avx2"), default="installed",
                   help="llamacpp suite: the llama.cpp measured: installed (this environment's llama-cpp-python, the "
                   "default), native (llama-cpp-python built once with -DGGML_NATIVE=ON, AMX kernels off, cached under "
                   "~/.cache/active-rag/llama-cpp-native/; the installed one where that build fails) or avx2 (built once "
                   "with AVX2 only, and the engine's side run with torch held to AVX2: a run acting as an AVX2 CPU)")
    p.add_argument("--rounds", type=int, default=1,
                   help="llamacpp suite: measure each model this many times on both sides, the sides alternating which "
                   "runs first; the table gives the rounds' medians and every round's ratios (default 1)")
    p.add_argument("--eval-dir", type=Path, default=Path("results/eval"),
                   help="weights suite: where `active-rag eval --weights ...` wrote the rows compared for agreement (default results/eval)")
    p.add_argument("--agreement-questions", type=int, default=20, help="weights suite: questions compared for identical answers (default 20)")
    p.add_argument("--f1-questions", type=int, default=50, help="weights suite: questions of the paired F1 (default 50)")
    p.add_argument("--batch-sizes", type=_ints, default=None,
                   help="batch suite: batch sizes (default 1,4,8,16); it generates the first --tokens value per question; "
                   "weights suite: default 1,8")
    p.add_argument("--questions", type=int, default=10, help="prefix suite: first N dev questions (default 10)")
    p.add_argument("--dataset", default="hotpotqa", help="prefix suite: dataset (default hotpotqa)")
    p.add_argument("--data-dir", type=Path, default=None, help="prefix suite: data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    p.add_argument("--prefix-methods", type=_csv, default=["wo-rag", "sr-rag", "flare", "dragin"],
                   help="prefix suite: methods (default wo-rag,sr-rag,flare,dragin)")
    p.add_argument("--prefix-batch", type=int, default=8, help="prefix suite: batch size of the cached pass (default 8)")
    p.add_argument("--prompt-mode", default="auto", help="prefix suite: prompt mode, as in eval (default auto: the model's own)")
    from active_rag.cli.model_flags import add_endpoint_options, add_model_options

    add_model_options(p)
    add_endpoint_options(p)
    p.set_defaults(func=cmd_bench)
    return p


def _model_config(args: argparse.Namespace) -> dict[str, Any]:
    """EvalConfig/BenchConfig fields from the model options, checked before any model loads."""
    from active_rag.cli.model_flags import model_options

    options = model_options(args)
    return {
        "device": options["device"],
        "dtype": None if options["dtype"] in (None, "auto") else options["dtype"],
        "weights": options["weights"],
        "prefix_cache": options["prefix_cache"],
        "prefix_cache_mb": options["prefix_cache_mb"],
    }


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def register(subparsers: Any) -> None:
    """Add the ``eval`` and ``bench`` subcommands (each with ``func(args) -> int``) to an argparse subparsers object."""
    add_eval_parser(subparsers)
    add_bench_parser(subparsers)


def _check_eval_args(args: argparse.Namespace) -> None:
    """The numbers of ``eval``, checked before anything loads (InvalidOptionError, one line)."""
    from active_rag.validation import MAX_RETRIEVALS_HINT, MAX_TOP_K, TOP_K_HINT, check_int, check_number

    check_int("--top-k", args.top_k, minimum=1, maximum=MAX_TOP_K, hint=TOP_K_HINT)
    if args.max_new_tokens is not None:
        check_int("--max-new-tokens", args.max_new_tokens, minimum=1)
    if args.max_retrievals is not None:
        check_int("--max-retrievals", args.max_retrievals, minimum=0, hint=MAX_RETRIEVALS_HINT)
    if args.limit is not None:
        check_int("--limit", args.limit, minimum=1, hint="It is the number of questions to run")
    if args.threads is not None:
        check_int("--threads", args.threads, minimum=1)
    if getattr(args, "num_workers", None) is not None:
        check_int("--num-workers", args.num_workers, minimum=1)
    if args.sweep is not None:
        param, values = args.sweep
        for value in values:
            check_number(f"--sweep {param}", value)


def _check_methods(config: Any) -> None:
    """Build every method's trigger with its settings: e.g. ``--sweep theta=-1`` fails before the model loads."""
    from active_rag.evaluation.config import _trigger_name, build_methods
    from active_rag.evaluation.paired import resolve_baseline
    from active_rag.components.triggers import make_trigger

    specs = build_methods(config)
    for spec in specs:
        if spec.trigger_kwargs:
            make_trigger(_trigger_name(spec), **dict(spec.trigger_kwargs))
    resolve_baseline(config.baseline, [spec.name for spec in specs])


def _saved_rows(config: Any) -> int:
    """Rows saved in this run's method files (for the message of an interrupted run)."""
    from active_rag.evaluation.config import build_methods
    from active_rag.evaluation.runner import eval_output_dir
    from active_rag.evaluation.scoring import _safe_name
    from active_rag.evaluation.store import count_saved_rows

    out = config.output_dir or eval_output_dir(config, str(config.model))
    try:
        names = [spec.name for spec in build_methods(config)]
    except (ValueError, KeyError):  # pragma: no cover - the config was checked before the run
        return 0
    return count_saved_rows(out / f"{_safe_name(name)}.jsonl" for name in names)


def cmd_eval(args: argparse.Namespace) -> int:
    from active_rag.errors import ActiveRAGError
    from active_rag.evaluation.outlock import check_output_root
    from active_rag.evaluation.runner import EvalConfig, run_eval
    from active_rag.validation import check_int

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = None
    try:
        _check_eval_args(args)
        _set_threads(args.threads)
        config = EvalConfig(
            dataset=args.dataset, data_dir=args.data_dir, methods=args.methods, triggers=args.trigger,
            queries=args.query, grid=args.grid, initial_retrieval=args.initial_retrieval, router=args.router,
            context=args.context, answer_options=args.answer_options, ask_same=args.ask_same, split=args.split, hide_titles=args.hide_titles,
            model=args.model, limit=args.limit,
            out_dir=args.out, top_k=args.top_k,
            max_new_tokens=args.max_new_tokens, max_retrievals=args.max_retrievals, sweep=args.sweep,
            profile=args.profile, prompt_mode=args.prompt_mode, ta_are_demos=args.ta_are_demos, baseline=args.baseline,
            **({"today": args.today} if args.today is not None else {}),
            resume=args.resume, retry_failed=args.retry_failed, index_cache=args.index_cache, plots=not args.no_plots,
            batch_size=check_int("--batch-size", args.batch_size, minimum=1, hint="It is the number of questions decoded together, e.g. 8"),
            **_model_config(args),
        )
        if getattr(args, "num_workers", None) is not None and not args.ray:
            raise ValueError("--num-workers only applies to a Ray run: add --ray.")
        _check_methods(config)  # trigger settings (a swept theta) before the model loads
        check_output_root(config.out_dir)  # an --out that cannot be written: refused before the model loads
        remote = _endpoint(args, config)
        if remote is not None:
            report = run_eval(config, lm=remote, progress=not args.no_progress)
        elif getattr(args, "ray", False):
            from active_rag.evaluation.distributed import run_eval_ray

            report = run_eval_ray(config, num_workers=args.num_workers, progress=not args.no_progress)
        else:
            report = run_eval(config, progress=not args.no_progress)
    except (ActiveRAGError, ValueError) as exc:
        print(f"active-rag eval: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        saved = _saved_rows(config) if config is not None else 0
        print(f"interrupted: {saved} rows saved, rerun the same command to resume", file=sys.stderr)
        return 130
    print(report.markdown)
    print(f"Results in {report.out_dir}")
    failures = getattr(report, "failures", None) or {}
    if failures:
        method, rows = next(iter(failures.items()))
        total = sum(len(r) for r in failures.values())
        print(f"active-rag eval: {total} question(s) failed and are not scored (first: {method} {rows[0]['id']}: "
              f"{str(rows[0]['error']).splitlines()[0]}): fix the cause and rerun the same command to answer them.",
              file=sys.stderr)
        return 1
    return 0


def _endpoint(args: argparse.Namespace, config: Any) -> Any:
    """``eval --endpoint URL``: the methods checked (none reads attention or masks the logits: without ``--methods``,
    the presets that do are left out), then the :class:`~active_rag.remote.lm.RemoteLM` with the tokenizer of
    ``--model``; ``None`` without ``--endpoint``."""
    from active_rag.errors import ActiveRAGError
    from active_rag.evaluation.config import build_methods
    from active_rag.cli.model_flags import endpoint_options, given, load_endpoint
    from active_rag.components.remote_check import check_remote_method

    options = endpoint_options(args)
    if options is None:
        return None
    if getattr(args, "ray", False):
        raise ValueError("--ray shards the questions over local models; with --endpoint the server serves them all: "
                         "drop --ray (use --batch-size for questions in flight).")
    from active_rag.components.presets import PRESETS

    from active_rag.errors import NeedsLocalModelError

    def parts(spec: Any) -> tuple[str, str]:
        preset = PRESETS[spec.preset] if spec.preset else None
        return (preset.trigger if preset else str(spec.trigger)), (preset.query if preset else str(spec.query))

    def check(spec: Any) -> None:
        """NeedsLocalModelError when the method reads attention or answers a choice question with one of its options
        (a logits mask at every answer token): what an endpoint cannot do."""
        check_remote_method(*parts(spec), spec.name)
        if spec.answer_options or (spec.preset and PRESETS[spec.preset].answer.options):
            raise NeedsLocalModelError(
                f"Method {spec.name!r} answers a choice question with one of its options, which masks the model's logits "
                "at every answer token: an endpoint cannot. Run it without --endpoint, or leave it out of --methods.")

    if config.answer_options:
        raise NeedsLocalModelError("--answer-options masks the model's logits at every answer token, which an endpoint "
                                   "cannot: drop --answer-options or --endpoint.")
    if config.methods is None:  # the default methods: those an endpoint can run
        keep = []
        for spec in build_methods(config):
            try:
                check(spec)
            except ActiveRAGError:
                continue
            if spec.preset and spec.preset not in keep:
                keep.append(spec.preset)
        config.methods = keep
    for spec in build_methods(config):
        check(spec)  # a method named in --methods that an endpoint cannot run: refused before any question
    return load_endpoint(given(args.model), **options)


def cmd_bench(args: argparse.Namespace) -> int:
    from active_rag.errors import ActiveRAGError
    from active_rag.evaluation.bench import BenchConfig, format_bench_table, run_bench

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from active_rag.validation import check_int

        check_int("--prompts", args.prompts, minimum=1)
        if args.repeats is not None:
            check_int("--repeats", args.repeats, minimum=1)
        check_int("--naive-prompts", args.naive_prompts, minimum=0, hint="0 skips the naive references")
        if args.threads is not None:
            check_int("--threads", args.threads, minimum=1)
        check_int("--rounds", args.rounds, minimum=1)
        if args.rounds != 1 and args.suite != "llamacpp":
            raise ValueError(f"--rounds is the llamacpp suite's: pass --suite llamacpp, or drop --rounds {args.rounds}.")
        if getattr(args, "endpoint", None) is not None or args.suite == "endpoint":
            from active_rag.evaluation.bench_endpoint import cmd_bench_endpoint

            return cmd_bench_endpoint(args)
        if args.suite == "weights":
            return _cmd_weights(args)
        if args.suite == "llamacpp":
            return _cmd_llamacpp(args)
        if args.suite != "overhead":
            return _cmd_throughput(args)
        config = BenchConfig(
            model=args.model, tokens=args.tokens or [64, 128, 256], prompts=args.prompts, repeats=args.repeats or 1, out_dir=args.out,
            methods=args.methods, naive=args.naive if args.naive_prompts > 0 else [],
            naive_prompts=args.naive_prompts, memory=not args.no_memory, retrieval=not args.no_retrieval,
            profile=args.profile, threads=args.threads, memory_tokens=args.memory_tokens,
            device=_model_config(args)["device"], dtype=_model_config(args)["dtype"], weights=_model_config(args)["weights"],
        )
        result = run_bench(config, progress=not args.no_progress)
    except (ActiveRAGError, ValueError) as exc:
        print(f"active-rag bench: error: {exc}", file=sys.stderr)
        return 2
    print(format_bench_table(result))
    print(f"Results in {config.out_dir / 'bench.json'}")
    return 0


def _cmd_llamacpp(args: argparse.Namespace) -> int:
    """``bench --suite llamacpp`` (see :mod:`active_rag.evaluation.bench_llamacpp`): the engine with ``--weights``
    (default auto) against llama.cpp on the same GGUF, prompt and CPU threads."""
    from active_rag.evaluation.bench_llamacpp import DEFAULT_MODELS, LlamaCppBenchConfig, run_llamacpp_bench
    from active_rag.validation import check_int

    if args.device not in ("auto", "cpu"):
        raise ValueError("The llamacpp suite compares CPU decoding: drop --device or pass --device cpu.")
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        raise ValueError("The llamacpp suite needs llama-cpp-python: pip install 'active-rag[endpoint]' (make setup builds it).") from error
    out = args.out if args.out != Path("runs/bench") else Path("results/bench/llamacpp")
    config = LlamaCppBenchConfig(
        models=args.models or list(DEFAULT_MODELS), weights=str(args.weights).split(","), batch_sizes=args.batch_sizes or [1, 8],
        tokens=(args.tokens or [48])[0], prefill_tokens=check_int("--prefill-tokens", args.prefill_tokens or 939, minimum=2),
        repeats=args.repeats or 3, rounds=args.rounds, threads=args.threads or 2, out_dir=out, llama_cpp=args.llama_cpp,
    )
    from active_rag import kernels

    if not kernels.available() and any(w != "float32" for w in config.weights):
        print(f"active-rag bench: warning: packed layers decode with {kernels.describe()}; the table will measure "
              "that, not active-rag's kernels.", file=sys.stderr)
    result = run_llamacpp_bench(config, progress=not args.no_progress)
    print(result["table"])
    print(f"Results in {config.out_dir / 'bench-llamacpp.json'}")
    return 0


def _cmd_weights(args: argparse.Namespace) -> int:
    """``bench --suite weights`` (see :mod:`active_rag.evaluation.bench_weights`): ``--weights`` names the options
    compared with float32 (comma-separated; default int8,int4)."""
    from active_rag.evaluation.bench_weights import DEFAULT_MODELS, WeightsBenchConfig, run_weights_bench
    from active_rag.validation import check_int
    from active_rag.models.weights import check_weights

    named = [check_weights(w) for w in str(args.weights).split(",")]
    options = [w for w in named if w not in ("auto", "float32")] or ["int8", "int4"]
    if args.device not in ("auto", "cpu"):
        raise ValueError("The weights suite measures the CPU kernels: drop --device or pass --device cpu.")
    _set_threads(args.threads)
    config = WeightsBenchConfig(
        models=args.models or list(DEFAULT_MODELS), weights=["float32", *options],
        batch_sizes=args.batch_sizes or [1, 8], tokens=(args.tokens or [32])[0],
        prefill_tokens=check_int("--prefill-tokens", args.prefill_tokens or 512, minimum=2), repeats=args.repeats or 3,
        out_dir=args.out, eval_dir=args.eval_dir, dataset=args.dataset,
        agreement_questions=check_int("--agreement-questions", args.agreement_questions, minimum=1),
        f1_questions=check_int("--f1-questions", args.f1_questions, minimum=1),
    )
    result = run_weights_bench(config, progress=not args.no_progress)
    print(result["table"])
    print(f"Results in {config.out_dir / 'bench-weights.json'}")
    return 0


def _cmd_throughput(args: argparse.Namespace) -> int:
    """``bench --suite batch|prefix`` (see :mod:`active_rag.evaluation.throughput`)."""
    from active_rag.cli.model_flags import model_options
    from active_rag.evaluation.throughput import ThroughputConfig, run_throughput
    from active_rag.validation import check_int

    batch_sizes = args.batch_sizes or [1, 4, 8, 16]
    for b in batch_sizes:
        check_int("--batch-sizes", b, minimum=1)
    check_int("--questions", args.questions, minimum=1)
    check_int("--prefix-batch", args.prefix_batch, minimum=1)
    from active_rag.components.prompt_layout import check_prompt_mode

    check_prompt_mode(args.prompt_mode)
    _set_threads(args.threads)
    config = ThroughputConfig(
        suite=args.suite, model=args.model, batch_sizes=batch_sizes, tokens=(args.tokens or [64])[0], methods=args.methods,
        prefix_methods=args.prefix_methods, questions=args.questions, dataset=args.dataset, data_dir=args.data_dir,
        prefix_batch=args.prefix_batch, out_dir=args.out, prompt_mode=args.prompt_mode,
    )
    result = run_throughput(config, progress=not args.no_progress, model_options=model_options(args))
    print(result["table"])
    print(f"Results in {config.out_dir / f'bench-{config.suite}.json'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m active_rag.evaluation.cli {eval,bench} ...``."""
    parser = argparse.ArgumentParser(prog="active-rag")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
