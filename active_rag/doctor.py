"""``active-rag doctor``: one command that checks the engine on this machine's device (issue 25).

The test suite runs on the CPU; a user with a GPU (or a CPU with other instructions) runs this to see that the
engine's paths hold there too, in the dtype and weights they chose:

- **environment**: torch, the device (GPU name and free memory, or the CPU's vector capability), dtype, weights;
- **finite logits**: a prompt's next-token distributions over 16 greedy tokens hold no NaN/inf (float16 overflows
  on some models; :class:`~active_rag.errors.NonFiniteLogitsError`);
- **capture is invisible**: the greedy tokens with attention captured (RIND, QFS) equal those without;
- **prefix cache**: a session that starts from the cached prompt prefix yields the tokens of one that prefills all;
- **batched = serial**: sequences decoded together by the scheduler yield the tokens each yields alone;
- **every preset**: each preset answers a question of the demo corpus with every tensor it makes on a named
  device (:mod:`active_rag.device_audit`).

Each check prints ``PASS``/``FAIL`` with one line of detail; the exit code is 1 when any fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .model import ActiveLM

QUESTION = "Who is Kasper Schmeichel's father?"
TOKENS = 16


@dataclass
class Check:
    """One check's outcome: ``status`` is ``PASS`` or ``FAIL``; ``detail`` says what was seen."""

    name: str
    status: str
    detail: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def environment(lm: ActiveLM) -> str:
    """torch, the device (GPU name and free memory, or the CPU's vector capability), dtype and weights."""
    where = lm.device
    if where.type == "cuda":
        free, total = torch.cuda.mem_get_info(where)
        device = f"{torch.cuda.get_device_name(where)} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free)"
    else:
        device = f"{where.type} ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads)"
    return (f"torch {torch.__version__}, {device}, model {lm.name}, dtype {str(lm.dtype).removeprefix('torch.')}, "
            f"weights {lm.weights}")


def _greedy(lm: ActiveLM, ids: list[int], *, capture: bool = False) -> list[int]:
    return [s.id for s in lm.session(ids, capture_attention=capture).generate(TOKENS)]


def _finite(lm: ActiveLM, ids: list[int]) -> str:
    tokens = _greedy(lm, ids)  # entropy of every step raises NonFiniteLogitsError on NaN/inf
    return f"{len(tokens)} tokens, every distribution finite"


def _capture(lm: ActiveLM, ids: list[int]) -> str:
    if not lm.supports_attention:
        return f"skipped: {lm.attention_error}"
    plain, seen = _greedy(lm, ids), _greedy(lm, ids, capture=True)
    if plain != seen:
        raise AssertionError(f"capturing attention changed the greedy tokens: {plain} vs {seen}")
    return f"{TOKENS} greedy tokens identical with and without capture"


def _prefix(lm: ActiveLM, ids: list[int]) -> str:
    if lm.prefix_cache is None:
        return "skipped: the prefix cache is off (--no-prefix-cache)"
    cold = ActiveLM(lm.model, lm.tokenizer, name=lm.name, prefix_cache=False)
    reference = _greedy(cold, ids)
    _greedy(lm, ids)  # fills the cache
    session = lm.session(ids)
    tokens = [s.id for s in session.generate(TOKENS)]
    if tokens != reference:
        raise AssertionError(f"the session started from the prefix cache decoded {tokens}, a full prefill {reference}")
    return f"{session.cached_tokens} of {len(ids)} prompt tokens from the cache, same {TOKENS} tokens"


def _batched(lm: ActiveLM, ids: list[int]) -> str:
    prompts = [ids, lm.prompt_ids("Which Danish goalkeeper won the IFFHS award in 1992?")]
    serial = [_greedy(lm, p) for p in prompts]
    together: list[list[int] | None] = [None, None]
    failures: list[BaseException] = []

    def decode(i: int) -> None:
        try:
            together[i] = _greedy(lm, prompts[i])
        except BaseException as exc:  # reported below, with the other sequence's outcome
            failures.append(exc)

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    if together != serial:
        raise AssertionError(f"batched decoding gave {together}, one at a time {serial}")
    batch = lm.scheduler.stats()["max_batch"] if lm.scheduler is not None else 1
    return f"2 sequences, same tokens as one at a time (largest batch {batch})"


def _presets(lm: ActiveLM, presets: list[str]) -> str:
    from .device_audit import audited
    from .loop import ActiveRAG
    from .retrieval import BM25Index

    index = BM25Index.demo()
    retrievals = 0
    for name in presets:
        rag = ActiveRAG.from_preset(name, lm, index, max_new_tokens=TOKENS)
        with audited() as audit:
            result = rag.run(QUESTION)
        if audit.unplaced:
            raise AssertionError(f"{name}: tensors made without a device: {', '.join(sorted(set(audit.unplaced)))}")
        retrievals += len(result.retrievals)
    return f"{len(presets)} presets answered, {retrievals} retrievals, every tensor on a named device"


def run_checks(lm: ActiveLM, presets: list[str] | None = None) -> list[Check]:
    """Every check in order; one that raises is a ``FAIL`` with the error's first line, and the rest still run."""
    from .presets import PRESETS

    ids = lm.prompt_ids(QUESTION)
    chosen = list(PRESETS) if presets is None else presets
    steps: list[tuple[str, Callable[[], str]]] = [
        ("environment", lambda: environment(lm)),
        ("finite logits", lambda: _finite(lm, ids)),
        ("capture is invisible", lambda: _capture(lm, ids)),
        ("prefix cache", lambda: _prefix(lm, ids)),
        ("batched = serial", lambda: _batched(lm, ids)),
        ("every preset", lambda: _presets(lm, chosen)),
    ]
    checks = []
    for name, step in steps:
        t0 = time.perf_counter()
        try:
            detail, status = step(), "PASS"
        except Exception as exc:  # a failed check is reported, never raised
            detail, status = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", "FAIL"
        checks.append(Check(name, status, detail, time.perf_counter() - t0))
    return checks


def format_checks(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{c.status}  {c.name:<{width}}  {c.detail}  ({c.seconds:.1f} s)" for c in checks]
    failed = sum(c.status == "FAIL" for c in checks)
    lines.append(f"{len(checks) - failed} of {len(checks)} checks passed" + (f"; {failed} failed" if failed else ""))
    return "\n".join(lines) + "\n"


__all__ = ["Check", "environment", "format_checks", "run_checks"]
