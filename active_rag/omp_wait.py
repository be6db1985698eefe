"""OpenMP's idle threads beside the decode kernels' own pool: ``OMP_WAIT_POLICY=PASSIVE`` for the command line.

A CPU decode step runs two kinds of parallel work: active-rag's packed kernels on their own spinning pool
(``kernels/csrc/pool.h``) and torch's ops (attention, the head's softmax) on GNU OpenMP's team. After each of
torch's parallel regions OpenMP's worker spins (``OMP_WAIT_POLICY`` unset: actively, for a while) on a core the
kernels' worker needs for the next projection, so on a 2-core machine the kernels often run on the calling thread
alone. With ``PASSIVE`` OpenMP's worker sleeps at once and is woken by the next region (a few of them a step);
the kernels' pool keeps its own spin. Measured on a 2-core Xeon with AMX (qwen2.5-coder-0.5b ``mixed``, batch 1,
a 900-token cache, 5 alternating processes each): 45.8 against 51.0 ms a step (``docs/speed.md``).

libgomp reads the variable once, when it is loaded (with torch), so it can only be set before torch is imported:
:func:`default_wait_policy` does that for the ``active-rag`` command and when ``active_rag`` is imported (the
adapters import it), unless the user set the variable or torch is already loaded. A program that imports torch
first keeps libgomp's default (``active-rag doctor`` says which policy a process runs with,
:func:`describe_wait_policy`) and can set the variable itself (``OMP_WAIT_POLICY=PASSIVE python app.py``). The
prefill has torch's ops between every two kernel calls too: on a 2-core EPYC without AMX a 939-token prefill of
qwen2.5-coder-1.5b ran at 155-161 tokens a second with ``PASSIVE``, 93-104 with ``ACTIVE`` and 133-142 unset
(``results/bench/prefill-heap/README.md``).
:func:`reference_env` gives another program's process (the llama.cpp side of ``bench --suite llamacpp``) its own
default back.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

__all__ = ["DEFAULTED_VARIABLE", "WAIT_POLICY_VARIABLE", "default_wait_policy", "describe_wait_policy", "reference_env",
           "spinning_warning"]

#: libgomp's wait policy (read when the library loads).
WAIT_POLICY_VARIABLE = "OMP_WAIT_POLICY"
#: Set to ``1`` when :func:`default_wait_policy` chose the policy (the user had set none); ``0`` leaves libgomp's
#: default in this process and its children (:func:`reference_env`: another program's process, such as the llama.cpp
#: side of ``bench --suite llamacpp``, which imports active_rag but not torch).
DEFAULTED_VARIABLE = "ACTIVE_RAG_OMP_WAIT_POLICY_DEFAULTED"


def default_wait_policy(environ: MutableMapping[str, str] | None = None,
                        modules: Mapping[str, object] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (``os.environ``) where it is unset, torch is not loaded yet
    (``modules``: ``sys.modules``) and :data:`DEFAULTED_VARIABLE` is not ``0``; whether it did."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if WAIT_POLICY_VARIABLE in environ or "torch" in modules or environ.get(DEFAULTED_VARIABLE) == "0":
        return False
    environ[WAIT_POLICY_VARIABLE] = "PASSIVE"
    environ[DEFAULTED_VARIABLE] = "1"
    return True


def describe_wait_policy(environ: Mapping[str, str] | None = None) -> str:
    """The OpenMP wait policy this process runs with, in words (``active-rag doctor``)."""
    environ = os.environ if environ is None else environ
    value = environ.get(WAIT_POLICY_VARIABLE)
    if value is None and environ.get(DEFAULTED_VARIABLE) == "0":
        return "libgomp's default (another program's process)"
    if value is None:
        return f"libgomp's default (torch was loaded before active_rag; {WAIT_POLICY_VARIABLE}=PASSIVE is faster)"
    if environ.get(DEFAULTED_VARIABLE) == "1":
        return f"{value} (active-rag's default)"
    return f"{value} (set by the user)"


def spinning_warning(threads: int, environ: Mapping[str, str] | None = None) -> str | None:
    """The warning for a process that loads the decode kernels with libgomp's default policy (torch imported before
    active_rag, the variable unset) on more than one thread; None where the policy was chosen (by active-rag or the
    user) or one thread runs. On the 2-core Zen 2 EPYC a 939-token prefill of qwen2.5-coder-0.5b ``mixed`` ran at 211
    tokens a second with ``PASSIVE`` and 153 with the default (results/bench/prefill-avx2/README.md)."""
    environ = os.environ if environ is None else environ
    if threads <= 1 or WAIT_POLICY_VARIABLE in environ or environ.get(DEFAULTED_VARIABLE) == "0":
        return None
    return (f"OpenMP's workers spin after each of torch's ops on the cores active-rag's kernels need "
            f"({WAIT_POLICY_VARIABLE} is unset: torch was imported before active_rag); set {WAIT_POLICY_VARIABLE}=PASSIVE "
            f"before torch loads, or import active_rag first (a CPU prefill ran 1.4x faster with it)")


def reference_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for another program's process: without the policy :func:`default_wait_policy` chose (one the
    user set stays)."""
    env = dict(environ)
    if env.get(DEFAULTED_VARIABLE) == "1":
        env.pop(WAIT_POLICY_VARIABLE, None)
        env[DEFAULTED_VARIABLE] = "0"  # and its own import of active_rag leaves it unset
    return env
