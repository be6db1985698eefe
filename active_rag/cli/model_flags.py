"""The model flags every command that loads a model shares, and loading the model they name.

``ask``, ``calibrate``, ``eval``, ``bench`` and ``throughput`` take the same flags: ``--device``, ``--dtype``,
``--weights``, ``--no-prefix-cache`` and ``--prefix-cache-mb`` (:func:`add_model_options`).
:func:`model_options` checks them, before anything slow, and turns them into the keyword arguments of
:meth:`ActiveLM.load <active_rag.decoding.model.ActiveLM.load>`; :func:`load_model` loads the model with one-line
errors. Both the main CLI (:mod:`active_rag.cli`) and the evaluation CLI (:mod:`active_rag.evaluation.cli`)
build on this module, which imports neither.

``--endpoint URL`` (``ask``, ``eval``, ``bench``; :func:`add_endpoint_options`) runs the model behind an
OpenAI-compatible server instead: :func:`endpoint_options` checks the flags, :func:`load_endpoint` builds the
:class:`~active_rag.remote.lm.RemoteLM` (docs/endpoint.md).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["DefaultName", "add_endpoint_options", "given", "add_model_options", "endpoint_options", "load_endpoint", "load_model", "model_options", "parse_number"]


def parse_number(value: str) -> float:
    """An argparse ``type``: a float, or argparse's one-line error."""
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype``, ``--weights``, ``--no-prefix-cache``, ``--prefix-cache-mb`` (ask, eval, bench,
    calibrate)."""
    from ..models.devices import DEVICES, DTYPES
    from ..models.weights import WEIGHTS

    parser.add_argument("--device", default="auto",
                        help=f"{', '.join(DEVICES)} or cuda:N (default auto: a CUDA GPU when present, else the CPU)")
    parser.add_argument("--dtype", default="auto",
                        help=f"{', '.join(DTYPES)} (default auto: bfloat16 on a CUDA GPU, float32 elsewhere)")
    parser.add_argument("--weights", default="auto",
                        help=f"{', '.join(WEIGHTS)}: how the linear layers are stored (default auto: mixed on the CPU, "
                        "4 bits for the layers a GGUF stored in 4 bits and int8 for the rest, several times faster than "
                        "float32 with the same answers; float32 elsewhere)")
    parser.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                        help="recompute every prompt from scratch (default: reuse the KV cache of shared prompt prefixes)")
    parser.add_argument("--prefix-cache-mb", type=parse_number, default=None, metavar="MB",
                        help="memory bound of the prefix KV cache in MiB (default: an eighth of the memory available on the CPU, at most 512; a fifth of the free memory on a GPU, at most 1024)")


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``ActiveLM.load`` from :func:`add_model_options`' flags, checked."""
    from ..models.devices import resolve_device, resolve_dtype
    from ..validation import check_number
    from ..models.weights import resolve_weights

    options: dict[str, Any] = {"device": getattr(args, "device", "auto"), "dtype": getattr(args, "dtype", "auto"),
                               "weights": getattr(args, "weights", "auto")}
    where = resolve_device(options["device"])
    resolve_dtype(options["dtype"], where)  # a bad value fails before the model loads
    resolve_weights(options["weights"], where)
    options["prefix_cache"] = getattr(args, "prefix_cache", True)
    mb = getattr(args, "prefix_cache_mb", None)  # None: the device's default (prefix_cache.default_prefix_cache_mb)
    options["prefix_cache_mb"] = None if mb is None else check_number(
        "--prefix-cache-mb", mb, minimum=0, hint="It is the prefix KV cache's memory bound in MiB, e.g. 1024; 0 turns the cache off")
    return options


def load_model(name: str | None, **options: Any) -> Any:
    """``ActiveLM.load``, with the errors of a folder transformers cannot read turned into one-line errors."""
    from ..errors import ActiveRAGError, ModelLoadError
    from ..decoding.model import ActiveLM

    try:
        return ActiveLM.load(name, **options)
    except ActiveRAGError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        raise ModelLoadError(
            f"Cannot load the model {name!r}: {type(exc).__name__}: {detail}. Check its config.json and weights "
            "(a folder written by save_pretrained), or pass a registry name (see `active-rag models`)."
        ) from exc


class DefaultName(str):
    """A flag's default model name, told apart from the same name given on the command line (:func:`given`): with
    ``--endpoint``, ``--model`` names the served model's tokenizer only when given."""


def given(name: str | None) -> str | None:
    """``name`` unless it is a flag's :class:`DefaultName`."""
    return None if name is None or isinstance(name, DefaultName) else str(name)


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    """``--endpoint URL``, ``--endpoint-model NAME``, ``--endpoint-api``, ``--endpoint-context``, ``--endpoint-timeout``
    (ask, eval, bench):
    run the model behind an OpenAI-compatible server (:class:`~active_rag.remote.lm.RemoteLM`)."""
    parser.add_argument("--endpoint", default=None, metavar="URL",
                        help="use the model behind this OpenAI-compatible server (llama.cpp, vLLM, Ollama), e.g. "
                        "http://127.0.0.1:8080/v1, instead of a local one; --model then names the served model's "
                        "tokenizer (registry name or folder; no weights load). API key: $OPENAI_API_KEY. Methods "
                        "that read attention (dragin, the rind trigger, the attention/qfs queries) need a local model, "
                        "and so does answering a choice question with one of its options (--answer-options)")
    parser.add_argument("--endpoint-model", default=None, metavar="NAME",
                        help="with --endpoint: the model name the server knows (default: the first of GET /models)")
    parser.add_argument("--endpoint-api", default="completions", choices=("completions", "chat"),
                        help="with --endpoint: the OpenAI route, completions (default: the engine's prompt text) or chat "
                        "(chat messages, the server's chat template)")
    parser.add_argument("--endpoint-context", type=int, default=None, metavar="TOKENS",
                        help="with --endpoint: the served context length prompts are fitted to (default: the --model "
                        "tokenizer's config, else 4096); match the server's (llama.cpp: --n_ctx / -c)")
    parser.add_argument("--endpoint-timeout", type=parse_number, default=60.0, metavar="S",
                        help="with --endpoint: seconds to wait for the server before retrying (default 60; 2 retries); "
                        "one request may take 10 x S in all")
    parser.add_argument("--endpoint-max-reply-mb", type=parse_number, default=None, metavar="MB",
                        help="with --endpoint: the cap on one reply from the server, in MiB (default 64)")


def endpoint_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The keyword arguments of :class:`~active_rag.remote.lm.RemoteLM` from :func:`add_endpoint_options`' flags,
    checked before anything slow (``InvalidOptionError``: one line, exit code 2); ``None`` without ``--endpoint``."""
    from ..errors import InvalidOptionError
    from ..remote.http import resolve_base_url

    url = getattr(args, "endpoint", None)
    if url is None:
        for flag in ("endpoint_model", "endpoint_api", "endpoint_timeout", "endpoint_context", "endpoint_max_reply_mb"):
            value = getattr(args, flag, None)
            if value is not None and value != {"endpoint_api": "completions", "endpoint_timeout": 60.0}.get(flag):
                raise InvalidOptionError(f"--{flag.replace('_', '-')} only applies with --endpoint URL: add --endpoint.")
        return None
    for flag, default in (("device", "auto"), ("dtype", "auto"), ("weights", "auto")):
        if getattr(args, flag, default) not in (default, None):
            raise InvalidOptionError(
                f"--{flag} has no effect with --endpoint (the server decides how the model runs): drop --{flag} or --endpoint.")
    timeout = float(getattr(args, "endpoint_timeout", 60.0))
    if not timeout > 0:
        raise InvalidOptionError(f"--endpoint-timeout must be greater than 0, got {timeout:g}: it is seconds, e.g. 60.")
    context = getattr(args, "endpoint_context", None)
    if context is not None:
        from ..validation import check_int

        check_int("--endpoint-context", context, minimum=16, hint="It is the served model's context length in tokens, e.g. 8192")
    options = {"base_url": resolve_base_url(url), "model": getattr(args, "endpoint_model", None),
               "api": getattr(args, "endpoint_api", "completions"), "timeout": timeout, "max_context": context}
    cap = getattr(args, "endpoint_max_reply_mb", None)
    if cap is not None:
        if not 0 < cap < float("inf"):
            raise InvalidOptionError(
                f"--endpoint-max-reply-mb must be a finite number greater than 0, got {cap:g}: it is MiB, e.g. 64.")
        options["max_reply_bytes"] = max(1, int(cap * 1024 * 1024))
    return options


def load_endpoint(tokenizer: str | None, **options: Any) -> Any:
    """A :class:`~active_rag.remote.lm.RemoteLM` over ``options`` (:func:`endpoint_options`), with the tokenizer of the
    model named ``tokenizer`` (a registry name or folder) when given."""
    from ..remote.lm import RemoteLM

    return RemoteLM(tokenizer=tokenizer, **options)
