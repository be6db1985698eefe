"""The model flags every command that loads a model shares, and loading the model they name.

``ask``, ``calibrate``, ``eval``, ``bench`` and ``throughput`` take the same flags: ``--device``, ``--dtype``,
``--weights``, ``--no-prefix-cache`` and ``--prefix-cache-mb`` (:func:`add_model_options`).
:func:`model_options` checks them, before anything slow, and turns them into the keyword arguments of
:meth:`ActiveLM.load <active_rag.model.ActiveLM.load>`; :func:`load_model` loads the model with one-line
errors. Both the main CLI (:mod:`active_rag.cli`) and the evaluation CLI (:mod:`active_rag.evaluation.cli`)
build on this module, which imports neither.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_model_options", "load_model", "model_options", "parse_number"]


def parse_number(value: str) -> float:
    """An argparse ``type``: a float, or argparse's one-line error."""
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype``, ``--weights``, ``--no-prefix-cache``, ``--prefix-cache-mb`` (ask, eval, bench,
    calibrate)."""
    from .devices import DEVICES, DTYPES
    from .weights import WEIGHTS

    parser.add_argument("--device", default="auto",
                        help=f"{', '.join(DEVICES)} or cuda:N (default auto: a CUDA GPU when present, else the CPU)")
    parser.add_argument("--dtype", default="auto",
                        help=f"{', '.join(DTYPES)} (default auto: bfloat16 on a CUDA GPU, float32 elsewhere)")
    parser.add_argument("--weights", default="auto",
                        help=f"{', '.join(WEIGHTS)}: how the linear layers are stored (default auto: int8 on the CPU, "
                        "whose packed kernels decode several times faster than float32; float32 elsewhere)")
    parser.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                        help="recompute every prompt from scratch (default: reuse the KV cache of shared prompt prefixes)")
    parser.add_argument("--prefix-cache-mb", type=parse_number, default=None, metavar="MB",
                        help="memory bound of the prefix KV cache in MiB (default 1024 on the CPU, a fifth of the free memory on a GPU, at most 1024)")


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``ActiveLM.load`` from :func:`add_model_options`' flags, checked."""
    from .devices import resolve_device, resolve_dtype
    from .validation import check_number
    from .weights import resolve_weights

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
    from .errors import ActiveRAGError, ModelLoadError
    from .model import ActiveLM

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
