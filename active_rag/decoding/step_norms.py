"""A decode step's RMS norms, each with the residual add before it, in as few ops as give the module's own bits
(beyond the papers; used by :mod:`active_rag.decoding.lean_step`).

A Llama or Qwen2 decoder layer adds its attention's output to the residual stream and norms the sum, then adds its
MLP's output and the next layer norms that: ``hidden = hidden + delta; x = norm(hidden)``, twice a layer. The module's
``forward`` runs seven ops a norm, torch's ``rms_norm`` one op (which runs the same seven inside, about 11-28 us a call
on the CPU), and where active-rag's kernels are built, their ``add_rms_norm`` op does the add and the norm in one pass
(``csrc/norm.cpp``, 3-5 us): it sums the squares in the order of torch's own sum for the width of torch's float
vector on this CPU, so its outputs are torch's bits. Each is used only where a check when the step is built gives the
module's own bits on random inputs of the model's width and dtype at batch 1, 8 and 32 (the float32 norms of the
Llama and Qwen2 families pass; a bfloat16 norm, which rounds before its weight, keeps its module).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from .. import kernels

__all__ = ["AddNorm", "Norm", "add_norm", "kernel_norm_parts", "norm"]

Norm = Callable[[torch.Tensor], torch.Tensor]
AddNorm = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``(hidden, delta) -> (hidden + delta, norm(hidden + delta))``."""

_LANES = (8, 16, 4, 1)
"""The widths of torch's float vector the kernels' op can sum in (AVX2's 8, AVX-512's 16, then the rest)."""


def _checked(module: torch.nn.Module, candidate: Norm) -> bool:
    """Whether ``candidate`` gives ``module.forward``'s bits on random inputs (batch 1, 8 and 32, a wide range of
    scales), without raising."""
    weight = module.weight  # type: ignore[union-attr]
    generator = torch.Generator(device="cpu").manual_seed(0)
    try:
        for rows in (1, 8, 32):
            for scale in (0.05, 1.0, 3.0, 40.0):
                x = (torch.randn(rows, 1, weight.shape[0], generator=generator) * scale).to(weight.device, weight.dtype)
                if not torch.equal(module.forward(x), candidate(x)):
                    return False
    except Exception:  # noqa: BLE001 - a norm or a device the candidate does not take: not this one
        return False
    return True


def _parts(module: torch.nn.Module) -> tuple[tuple[int], float] | None:
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not isinstance(eps, float):
        return None
    return (weight.shape[0],), eps


_CHECKED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.Tensor, int | None]] = weakref.WeakKeyDictionary()
"""A norm module -> (the weight it was checked with, the lanes found): the check runs once a module and weight."""


def _kernel_lanes(module: torch.nn.Module) -> int | None:
    """The vector width with which the kernels' op gives the module's bits, or ``None``."""
    parts = _parts(module)
    if parts is None or not kernels.available():
        return None
    parameters, (_, eps) = module._parameters, parts
    known = _CHECKED.get(module)
    if known is not None and known[0] is parameters["weight"]:
        return known[1]
    found = None
    for lanes in _LANES:
        if _checked(module, lambda x, lanes=lanes: torch.ops.active_rag.rms_norm(x, parameters["weight"], eps, lanes)):
            found = lanes
            break
    _CHECKED[module] = (parameters["weight"], found)
    return found


def kernel_norm_parts(module: torch.nn.Module) -> tuple[torch.Tensor, float, int] | None:
    """``(weight, eps, lanes)`` with which the kernels' ``add_rms_norm`` gives ``module``'s bits (what
    :func:`add_norm` runs), or ``None`` where it runs torch's ops."""
    lanes = _kernel_lanes(module)
    if lanes is None:
        return None
    return module._parameters["weight"], module.variance_epsilon, lanes  # type: ignore[return-value]


def norm(module: torch.nn.Module) -> Norm:
    """``x -> module(x)`` for a decode step: the kernels' op, else torch's ``rms_norm`` op, else the module's
    ``forward``, the first whose check passes (module docstring)."""
    parts = _parts(module)
    if parts is None:
        return module.forward
    (shape, eps), parameters = parts, module._parameters
    lanes = _kernel_lanes(module)
    if lanes is not None:
        op = torch.ops.active_rag.rms_norm.default
        return lambda x: op(x, parameters["weight"], eps, lanes)
    torch_norm = lambda x: torch.nn.functional.rms_norm(x, shape, parameters["weight"], eps)  # noqa: E731
    return torch_norm if _checked(module, torch_norm) else module.forward


def add_norm(module: torch.nn.Module) -> AddNorm:
    """``(hidden, delta) -> (hidden + delta, module(hidden + delta))`` for a decode step: the kernels'
    ``add_rms_norm`` op where its check passes, else the add and :func:`norm`'s choice."""
    lanes = _kernel_lanes(module)
    if lanes is not None:
        parameters, eps, op = module._parameters, module.variance_epsilon, torch.ops.active_rag.add_rms_norm.default
        return lambda hidden, delta: op(hidden, delta, parameters["weight"], eps, lanes)
    alone = norm(module)

    def add_then_norm(hidden: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = hidden + delta
        return total, alone(total)

    return add_then_norm
