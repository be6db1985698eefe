"""``weights="float32" | "int8" | "int4" | "mixed"``: how a loaded model stores its linear layers, and the disk cache of
the quantised ones.

``float32`` keeps the dense weights in the model's dtype (on a GPU the dense dtype is bfloat16). ``int8``, ``int4``
and ``mixed`` (4 bits for layers whose weights lie on a 4-bit grid, 8 for the others) replace every ``nn.Linear``,
the output head included, with a weight-only layer of :mod:`active_rag.models.quantized` that decodes with
active-rag's CPU kernel (:mod:`active_rag.kernels`), or torch's packed CPU kernels where it is not built. ``auto`` is
:data:`DEFAULT_CPU_WEIGHTS` on the CPU and ``float32`` elsewhere (README, "Speed": it is the fastest
option whose answers agree with float32 on the agreement check of ``active-rag bench --suite weights``).

Quantising takes seconds (a minute for a 1.5B model), so it is done once per model and weights option and
saved as one safetensors file beside the converted model (``<converted folder>/packed-int8.safetensors``),
or under ``cache_dir()/packed/`` for folders active-rag does not own. The file records a fingerprint of its
source (the names, sizes and modification times of the model's weight files, or the hub commit) and the
quantisation format; a load whose source no longer matches quantises again and replaces the file
atomically, so a changed model is never served stale weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import kernels
from ..errors import InvalidOptionError
from .gguf_layers import GGUFLayers
from .int5_linear import Int5Linear
from .q4k_linear import Int4KLinear
from .q6k_linear import Int6KLinear
from .quantized import INT4_GROUP, Int4Linear, Int8Linear, PackedLinear, linear_layers, replace_module

logger = logging.getLogger(__name__)

WEIGHTS = ("auto", "float32", "int8", "int4", "mixed")
"""The accepted values of ``weights`` / ``--weights``."""

DEFAULT_CPU_WEIGHTS = "mixed"
"""What ``weights="auto"`` means on the CPU: 4 bits for the layers a GGUF file stored in 4 bits (kept exactly), int8
for the others (docs/weights.md): the fastest option whose answers agree with float32's (identical SR-RAG answers on
18 of 20 HotpotQA questions and FLARE's on all, qwen2.5-coder-0.5b; F1 intervals containing zero on the 1.5B model,
where it reads 25% fewer bytes a token than int8). A model whose weights lie on no 4-bit grid gets int8 throughout.
On a torch without the CPU int4 kernel, int8."""

FORMAT = 4
"""Version of the saved quantisation format; a file of another version is quantised again. 4: the decode kernel's
layout (:mod:`active_rag.kernels.layout`: int8 ``tiles8``, int4 ``tiles4`` and ``scales4``, int5 ``tiles5`` and
``scales5`` (only in files of :func:`packed_layout` ``mixed-int5``), a GGUF's Q4_K and Q6_K values ``tiles4k`` and
``scales4k``, ``tiles6k`` and ``scales6k`` (only in files of layout ``...-kquants``), each with its ``shape``), where 3
stored int8 rows and int4 nibbles row by row."""

PACKED_PREFIX = "packed-"


INT5_VARIABLE = "ACTIVE_RAG_INT5"
"""Environment variable: ``off`` (or ``0``) keeps ``mixed``'s 5-bit tensors in int8 under active-rag's kernel too, as
before 5-bit layers existed (the rows written that way resume with it)."""

KQUANTS_VARIABLE = "ACTIVE_RAG_KQUANTS"
"""Environment variable: ``off`` (or ``0``) keeps ``mixed``'s layers read from a GGUF's Q4_K and Q6_K tensors in the
layouts they had before :class:`~active_rag.models.q4k_linear.Int4KLinear` and
:class:`~active_rag.models.q6k_linear.Int6KLinear` (bfloat16 steps and zeros, int8), under active-rag's kernel too:
the rows written that way resume with it."""


KQUANT_ISAS = ("avx512-vnni",)
"""The kernel paths where k-quant layers are used (``results/bench/kquants``): on AVX512-VNNI a decode step reads them
faster (the 1.5B at batch 1 in 0.88x the time); on AVX2 (forced on a Zen 4) the int6 layers took 1.2-2.2x int8's
time, putting their two high bits back in 256-bit registers, and the int4 ones with Q4_K scales 0.86-1.01x int4's, so
there (and on AVX-VNNI, unmeasured) ``mixed`` keeps the layouts before."""


def _switched_off(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("off", "0", "false", "no")


def packed_layout(weights: str, *, gguf: bool = False) -> str:
    """What the packed layers of ``weights`` are made of, which names their cache file: for ``mixed`` where
    active-rag's decode kernel is in use, ``mixed-int5`` (the 5-bit tensors of a GGUF file kept in 5 bits,
    :class:`~active_rag.models.int5_linear.Int5Linear`) unless :data:`INT5_VARIABLE` is ``off``, with ``-kquants`` for
    a model converted from a GGUF file (``gguf``) whose Q4_K and Q6_K tensors keep the file's values
    (:class:`~active_rag.models.gguf_layers.GGUFLayers`) where the kernel's path is one of :data:`KQUANT_ISAS`, unless
    :data:`KQUANTS_VARIABLE` is ``off``; else ``weights``
    itself (those tensors in int8 and bfloat16 scales, as torch's kernels need them: a file written either way loads
    the same layers again)."""
    if weights != "mixed" or not kernels.available():
        return weights
    layout = weights if _switched_off(INT5_VARIABLE) else "mixed-int5"
    kquants = gguf and not _switched_off(KQUANTS_VARIABLE) and kernels.default_isa() in KQUANT_ISAS
    return f"{layout}-kquants" if kquants else layout


def quantize_linear(linear: nn.Linear, kind: str) -> PackedLinear | None:
    """The packed layer of ``kind`` for ``linear``, or ``None`` when its shape does not fit the kernel
    (it then stays dense).

    - ``int4``: 4 bits in groups (:class:`~active_rag.models.quantized.Int4Linear`);
    - ``int8``: 8 bits per output channel (:class:`~active_rag.models.quantized.Int8Linear`);
    - ``mixed``: 4 bits where every group of the layer lies on a grid of at most 16 levels (a layer read from
      a 4-bit GGUF tensor such as Q4_K: stored exactly); where active-rag's decode kernel is in use, 5 bits where
      every group lies on a grid of at most 32 (Q5_0: :class:`~active_rag.models.int5_linear.Int5Linear`); 8 bits
      elsewhere (Q6_K, Q8_0 tensors, and Q5_0 under torch's kernels).
    """
    grouped = Int4Linear.supports(linear)
    if kind == "int4":
        return Int4Linear.from_linear(linear) if grouped else None
    if kind == "mixed" and grouped:
        state = Int4Linear.quantize(linear.weight)
        if bool(state["exact"].all()):
            return Int4Linear.from_state(state, linear.bias)
        if packed_layout(kind) == "mixed-int5":
            state = Int5Linear.quantize(linear.weight)
            if bool(state["exact"].all()):
                return Int5Linear.from_state(state, linear.bias)
    return Int8Linear.from_linear(linear)


def layer_from_state(state: dict[str, torch.Tensor], bias: torch.Tensor | None) -> PackedLinear:
    """The layer that :meth:`~active_rag.models.quantized.PackedLinear.state` saved (its class is told by its
    tensors)."""
    if "tiles8" in state or "qweight" in state:
        return Int8Linear.from_state(state, bias)
    if "tiles5" in state:
        return Int5Linear.from_state(state, bias)
    if "tiles4k" in state:
        return Int4KLinear.from_state(state, bias)
    if "tiles6k" in state:
        return Int6KLinear.from_state(state, bias)
    return Int4Linear.from_state(state, bias)


def check_weights(weights: str | None) -> str:
    """The normalised ``weights`` value; :class:`InvalidOptionError` names the choices otherwise."""
    text = "auto" if weights is None else str(weights).strip().lower()
    if text not in WEIGHTS:
        raise InvalidOptionError(
            f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}: int8/int4 store the linear layers in "
            "8/4 bits for fast CPU decoding, mixed keeps a GGUF's 4-bit layers in 4 bits and the rest in 8, float32 "
            "keeps them dense, auto picks mixed on the CPU."
        )
    return text


def resolve_weights(weights: str | None, device: torch.device | str) -> str:
    """``auto`` -> :data:`DEFAULT_CPU_WEIGHTS` on the CPU, ``float32`` elsewhere; packed weights on another
    device raise :class:`InvalidOptionError` (torch's weight-only kernels used here are the CPU ones)."""
    from . import quantized

    text = check_weights(weights)
    kind = torch.device(device).type
    if text == "auto":
        if kind != "cpu":
            return "float32"
        return DEFAULT_CPU_WEIGHTS if quantized.int4_kernel_available() else "int8"
    if text in ("int4", "mixed") and not quantized.int4_kernel_available():
        raise InvalidOptionError(
            f"weights={text!r} needs torch's CPU int4 kernel, which torch {torch.__version__} lacks (it came in torch "
            "2.6): use weights='int8', or install torch>=2.6."
        )
    if text != "float32" and kind != "cpu":
        raise InvalidOptionError(
            f"weights={text!r} runs torch's packed CPU kernels, but the model is on {kind}: use weights='float32' "
            "there (the dense dtype is bfloat16 on a GPU by default), or device='cpu'."
        )
    return text


def model_weights(model: nn.Module) -> str:
    """``int8``/``int4`` when the model's linear layers are packed in one of them, ``mixed`` when in several (or in
    5 bits, which only ``mixed`` makes), else ``float32``."""
    kinds = {module.kind for module in model.modules() if isinstance(module, PackedLinear)}
    if not kinds:
        return "float32"
    return kinds.pop() if kinds in ({"int8"}, {"int4"}) else "mixed"


# ------------------------------------------------------------------------------------------------ quantise


def quantize_model(model: nn.Module, weights: str, *, cache: Path | None = None, fingerprint: str = "",
                   lock: Callable[[Path], AbstractContextManager[Any]] | None = None,
                   gguf: Path | None = None) -> nn.Module:
    """Replace ``model``'s linear layers with packed ``weights`` layers in place and return it.

    With ``cache``, the quantised tensors are read from that safetensors file when its fingerprint and
    format match, else computed and saved there (atomically; under ``lock(path)`` when given, e.g. the model
    cache's inter-process lock). ``gguf``: the GGUF file the model was converted from, whose Q4_K and Q6_K tensors
    ``mixed`` keeps as the file stores them (:func:`packed_layout`). ``weights="float32"`` leaves the model as it is.
    """
    weights = check_weights(weights)
    if weights in ("float32", "auto"):
        return model
    if model_weights(model) != "float32":
        raise InvalidOptionError(f"The model's linear layers are packed already ({model_weights(model)}); load it again to change weights.")
    started = time.monotonic()
    layout = packed_layout(weights, gguf=gguf is not None and gguf.is_file())
    if cache is not None and layout != weights:  # another file: a cache written for torch's kernels stays theirs
        cache = cache.with_name(cache.name.replace(f"{PACKED_PREFIX}{weights}.", f"{PACKED_PREFIX}{layout}.", 1))
    states = _read_cache(cache, layout, fingerprint) if cache is not None else None
    loaded = states is not None
    if states is None:
        states = {}
        source = _gguf_layers(gguf) if gguf is not None and layout.endswith("-kquants") else None
        for name, linear in linear_layers(model):
            layer = source.layer(name, linear) if source is not None else None
            layer = layer if layer is not None else quantize_linear(linear, weights)
            if layer is not None:
                states[name] = layer.state()
                _swap(model, name, linear, layer)
        if cache is not None:
            _write_cache(cache, layout, fingerprint, states, lock)
    else:
        for name, linear in linear_layers(model):
            if name in states:
                _swap(model, name, linear, layer_from_state(states[name], linear.bias))
    logger.info("%s the linear layers as %s in %.1f s.", "Loaded" if loaded else "Quantised", weights, time.monotonic() - started)
    return model


def _gguf_layers(path: Path) -> GGUFLayers | None:
    """The k-quant tensors of ``path``, or ``None`` (with a warning) where the file cannot be read: the layers then
    take the layouts before, which the cache file's state names say."""
    try:
        return GGUFLayers(path)
    except (OSError, ValueError) as error:
        logger.warning("Could not read the k-quant tensors of %s (%s); its layers keep the earlier layouts.", path, error)
        return None


def _swap(model: nn.Module, name: str, linear: nn.Linear, layer: PackedLinear) -> None:
    replace_module(model, name, layer.to(linear.weight.device))


# ------------------------------------------------------------------------------------------------ the disk cache


def packed_path(folder: Path, weights: str, *, owned: bool, root: Path) -> Path:
    """Where the quantised tensors of the model in ``folder`` are cached: inside it when active-rag owns the
    folder (a converted GGUF), else under ``root/packed/<name>-<hash of the path>/`` (``root``: the model cache)."""
    file_name = f"{PACKED_PREFIX}{weights}.safetensors"
    if owned:
        return folder / file_name
    resolved = str(folder.resolve())
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", folder.name) or "model"
    return root / "packed" / f"{key}-{hashlib.sha256(resolved.encode()).hexdigest()[:12]}" / file_name


def hub_packed_path(hub_id: str, weights: str, root: Path) -> Path:
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", hub_id)
    return root / "packed" / f"hub-{key}" / f"{PACKED_PREFIX}{weights}.safetensors"


def folder_fingerprint(folder: Path) -> str:
    """Names, sizes and modification times of a model folder's config and weight files, hashed."""
    entries = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith(PACKED_PREFIX) and (
            path.suffix in (".safetensors", ".bin", ".gguf") or path.name in ("config.json", "active-rag-conversion.json")
        ):
            stat = path.stat()
            entries.append(f"{path.name}|{stat.st_size}|{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _metadata(weights: str, fingerprint: str) -> dict[str, str]:
    return {"format": str(FORMAT), "weights": weights, "group_size": str(INT4_GROUP), "source": fingerprint}


def _read_cache(path: Path, weights: str, fingerprint: str) -> dict[str, dict[str, torch.Tensor]] | None:
    if not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            if meta != _metadata(weights, fingerprint):
                logger.warning("The quantised weights in %s were made from another model file or format: quantising again.", path)
                return None
            states: dict[str, dict[str, torch.Tensor]] = {}
            for key in handle.keys():
                layer, _, tensor = key.rpartition(":")
                states.setdefault(layer, {})[tensor] = handle.get_tensor(key)
            return states
    except (OSError, ValueError, RuntimeError) as error:  # a damaged file: quantise again
        logger.warning("Cannot read the quantised weights in %s (%s): quantising again.", path, error)
        return None


def _write_cache(path: Path, weights: str, fingerprint: str, states: dict[str, dict[str, torch.Tensor]],
                 lock: Callable[[Path], AbstractContextManager[Any]] | None = None) -> None:
    from safetensors.torch import save_file

    tensors = {f"{layer}:{name}": t.detach().cpu().contiguous() for layer, state in states.items() for name, t in state.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with lock(path) if lock is not None else contextlib.nullcontext():
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
            os.close(handle)
            try:
                save_file(tensors, temporary, metadata=_metadata(weights, fingerprint))
                os.chmod(temporary, 0o644)
                os.replace(temporary, path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
    except OSError as error:  # a read-only cache: the model still runs, quantised again next time
        logger.warning("Cannot save the quantised weights to %s (%s); they will be computed again at the next load.", path, error)


__all__ = [
    "DEFAULT_CPU_WEIGHTS",
    "INT5_VARIABLE",
    "WEIGHTS",
    "check_weights",
    "folder_fingerprint",
    "hub_packed_path",
    "layer_from_state",
    "model_weights",
    "packed_layout",
    "packed_path",
    "quantize_linear",
    "quantize_model",
    "resolve_weights",
]
