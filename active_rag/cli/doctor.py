"""``active-rag doctor``: one command that checks the engine on this machine's device.

The test suite runs on the CPU; a user with a GPU (or a CPU with other instructions) runs this to see that the
engine's paths hold there too, in the dtype and weights they chose:

- **environment**: torch, the device (GPU name and free memory, or the CPU's vector capability), dtype, weights and
  the decode kernel of packed weights (active-rag's and its instruction set, or torch's and why);
- **finite logits**: a prompt's next-token distributions over 16 greedy tokens hold no NaN/inf (float16 overflows
  on some models; :class:`~active_rag.errors.NonFiniteLogitsError`);
- **capture is invisible**: the greedy tokens with attention captured (RIND, QFS) equal those without;
- **prefix cache**: a session that starts from the cached prompt prefix yields the tokens of one that prefills all;
- **batched = serial**: sequences decoded together by the scheduler yield the tokens each yields alone;
- **padded attention = loop**: the ragged batch's one padded attention call (:mod:`active_rag.decoding.ragged_attention`)
  gives the per-sequence loop's next-token logits within rounding, teacher-forced over 16 steps;
- **graphed step = eager**: where the scheduler records its decode step as CUDA graphs
  (:mod:`active_rag.decoding.graph_step`), teacher-forced like the padded check, the recorded step gives the eager
  step's greedy tokens (every one with dense float32 weights) and its logits within the same bounds; skipped on a
  device whose step is not recorded;
- **out of memory isolated**: an out-of-memory error injected into a middle layer whenever a long sequence is in the
  batch fails that sequence alone (:class:`~active_rag.errors.DecodeOutOfMemoryError`) while the other decodes its
  serial tokens (:mod:`active_rag.decoding.admission`); the line also gives the scheduler's KV budget;
- **every preset**: each preset answers a question of the demo corpus with every tensor it makes on a named
  device (:mod:`active_rag.models.device_audit`).

Each check prints ``PASS``/``FAIL`` with one line of detail; the exit code is 1 when any fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..decoding.model import ActiveLM

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


def _head_dim(lm: ActiveLM) -> int:
    """The model's attention head size (64 where its config does not say)."""
    config = getattr(lm.model, "config", None)
    dim = getattr(config, "head_dim", None)
    if not dim and getattr(config, "num_attention_heads", None):
        dim = config.hidden_size // config.num_attention_heads  # type: ignore[union-attr]
    return int(dim or 64)


def environment(lm: ActiveLM) -> str:
    """torch, the device (GPU name and free memory, or the CPU's vector capability, threads, OpenMP's wait policy, how
    a decode step and a prompt after a cached prefix attend and a step summarises a greedy token), dtype, weights and,
    for packed weights, the kernel that decodes them (active-rag's and its instruction set, or torch's and why) and the path a
    prefill takes (the kernel, or a dense product and its dtype) and whether a decode step runs its layers as one op."""
    where = lm.device
    if where.type == "cuda":
        free, total = torch.cuda.mem_get_info(where)
        device = f"{torch.cuda.get_device_name(where)} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free)"
    else:
        from ..decoding.one_token_attention import describe as describe_attention
        from ..decoding.prefill_attention import describe as describe_prompt_attention
        from ..decoding.step_summary import describe as describe_summary
        from ..omp_wait import describe_wait_policy

        device = (f"{where.type} ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, "
                  f"OpenMP wait policy {describe_wait_policy()}, decode attention {describe_attention()}, prompt "
                  f"attention after a cached prefix {describe_prompt_attention(lm.dtype, _head_dim(lm))}, greedy "
                  f"summary {describe_summary()})")
    from ..models.prefill_path import prefills_with_kernel
    from ..models.quantized import decode_kernel, prefill_dtype

    kernel = decode_kernel(lm.model)
    if kernel == "none":
        packed = ""
    else:  # and how a prompt's rows are multiplied (models/prefill_path.py)
        dense = f"dense {str(prefill_dtype()).removeprefix('torch.')}"
        packed = f", decode kernel {kernel}, prefill {'kernel' if prefills_with_kernel(lm.model) else dense}"
        lean = getattr(getattr(lm, "scheduler", None), "_lean", None)
        if lean is not None:  # decoding/kernel_layers.py
            packed += f", decode layers {'in one op' if lean.layers_op else 'as a Python loop'}"
    return (f"torch {torch.__version__}, {device}, model {lm.name}, dtype {str(lm.dtype).removeprefix('torch.')}, "
            f"weights {lm.weights}" + packed)


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


def _together(lm: ActiveLM, prompts: list[list[int]], arm: Callable[[], None] | None = None) -> list[list[int] | BaseException]:
    """Every prompt decoded greedily from a thread of its own (the scheduler batches their steps); ``arm`` runs once the
    prompts are read."""
    sessions = [lm.session(p) for p in prompts]
    if arm is not None:
        arm()
    together: list[list[int] | BaseException] = [[] for _ in prompts]

    def decode(i: int) -> None:
        try:
            together[i] = [s.id for s in sessions[i].generate(TOKENS)]
        except BaseException as exc:  # reported by the caller, with the other sequences' outcomes
            together[i] = exc

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return together


def _batched(lm: ActiveLM, ids: list[int]) -> str:
    prompts = [ids, lm.prompt_ids("Which Danish goalkeeper won the IFFHS award in 1992?")]
    serial = [_greedy(lm, p) for p in prompts]
    together = _together(lm, prompts)
    for outcome in together:
        if isinstance(outcome, BaseException):
            raise outcome
    if together != serial:
        raise AssertionError(f"batched decoding gave {together}, one at a time {serial}")
    batch = lm.scheduler.stats()["max_batch"] if lm.scheduler is not None else 1
    return f"2 sequences, same tokens as one at a time (largest batch {batch})"


def _teacher_forced(lm: ActiveLM, paths: dict[str, Callable[[], None]]) -> tuple[float, float, int, int]:
    """Three prompts decoded over :data:`TOKENS` steps along each of two paths (``paths``: name -> what sets the
    scheduler up for it), both reading the first path's greedy tokens: the largest logit difference, the logits'
    largest magnitude, and at how many of how many steps the second path's greedy token is the first's."""
    from ..decoding.decode_scheduler import _Request

    scheduler = lm.scheduler
    assert scheduler is not None
    prompts = [lm.prompt_ids(QUESTION), lm.prompt_ids("Which Danish goalkeeper won the IFFHS award in 1992?"),
               lm.prompt_ids("Hi")]
    sessions = {path: [lm.session(p) for p in prompts] for path in paths}
    first, second = list(paths)
    tokens = [int(s._next_logits.argmax()) for s in sessions[first]]  # type: ignore[union-attr]
    worst, scale, same = 0.0, 0.0, 0
    with scheduler.lock:  # no other caller's steps in between
        for _ in range(TOKENS):
            logits = {}
            for path, group in sessions.items():
                paths[path]()
                requests = [_Request(s._cache, t, s._fed, False) for s, t in zip(group, tokens, strict=True)]
                scheduler._run(requests)
                for s, r in zip(group, requests, strict=True):
                    if r.error is not None:
                        raise r.error
                    s._fed += 1
                logits[path] = torch.stack([r.logits for r in requests])  # type: ignore[misc]
            worst = max(worst, float((logits[first] - logits[second]).abs().max()))
            scale = max(scale, float(logits[first].abs().max()))
            tokens = [int(t) for t in logits[first].argmax(dim=-1)]
            same += sum(int(a == b) for a, b in zip(tokens, logits[second].argmax(dim=-1).tolist()))
    return worst, scale, same, TOKENS * len(prompts)


def _bound(lm: ActiveLM, scale: float) -> tuple[float, str]:
    """The allowed logit difference (1e-3 of the logits' scale with dense float32 weights, 5% in reduced precision)
    and how to say it."""
    dense = lm.weights == "float32" and lm.dtype == torch.float32
    share = 1e-3 if dense else 5e-2
    return share * scale, (f"tolerance {share * scale:.2g}: {share:.1%} of the logits' largest magnitude {scale:.3g}, "
                           + ("float32" if dense else "reduced precision"))


def _padded(lm: ActiveLM, ids: list[int]) -> str:
    """Teacher-forced: both paths read the same tokens (the loop's greedy ones) from the same prompts; their next-token
    logits must agree within rounding: 1e-3 of the logits' scale with dense float32 weights, 5% in reduced precision
    (bfloat16, float16, int8/int4 layers that round to bfloat16), where an exact tie may flip a greedy token."""
    scheduler = lm.scheduler
    if scheduler is None:
        return "skipped: batching is off"
    mode = scheduler.attention
    try:
        worst, scale, _, _ = _teacher_forced(lm, {"loop": lambda: setattr(scheduler, "attention", "loop"),
                                                  "padded": lambda: setattr(scheduler, "attention", "padded")})
    finally:
        scheduler.attention = mode
    tolerance, allowed = _bound(lm, scale)
    if worst > tolerance:
        raise AssertionError(f"the padded attention call's logits differ from the loop's by {worst:.3g} ({allowed})")
    return f"3 sequences x {TOKENS} steps, logits within {worst:.2g} of the loop's ({allowed}); {_attention_path(mode, lm.device.type)}"


def _attention_path(mode: str, device_type: str) -> str:
    """Which attention path batched decoding takes on this device with the scheduler's ``attention`` setting."""
    from ..decoding.ragged_attention import PADDED_MIN_BATCH, PADDED_MIN_FILL

    if mode != "auto":
        return f"batched decoding takes the {mode} path (attention={mode!r})"
    threshold = PADDED_MIN_BATCH.get(device_type)
    if threshold is None:
        return (f"batched decoding uses the per-sequence loop on {device_type} (attention='auto': the padded call was "
                "not measured faster there)")
    return (f"batched decoding pads from {threshold} sequences on {device_type} when at least {PADDED_MIN_FILL:.0%} of "
            "the padded keys are real, else takes the loop (attention='auto')")


def _layers_op(lm: ActiveLM) -> str:
    """Teacher-forced as :func:`_padded`: three sequences through the lean step's Python loop over the layers and
    through the kernels' one op (:mod:`active_rag.decoding.kernel_layers`): the same logits to the bit."""
    lean = getattr(lm.scheduler, "_lean", None)
    if lean is None or not lean.layers_op:
        return "skipped: this model's decode step runs its layers as a Python loop"
    try:
        worst, _, same, total = _teacher_forced(lm, {"loop": lambda: setattr(lean, "layers_op", False),
                                                     "one op": lambda: setattr(lean, "layers_op", True)})
    finally:
        lean.layers_op = True
    if worst != 0.0 or same != total:
        raise AssertionError(f"the one op's logits differ from the loop's by {worst:.3g} (greedy tokens the same at "
                             f"{same} of {total} steps)")
    return f"3 sequences x {TOKENS} steps, the same logits to the bit"


def _graphed(lm: ActiveLM, ids: list[int]) -> str:
    """Teacher-forced as :func:`_padded`: three sequences read the eager step's greedy tokens through the recorded
    step and through the eager one; the next-token logits agree within the same bounds and, with dense float32
    weights, every greedy token is the same."""
    scheduler = lm.scheduler
    if scheduler is None:
        return "skipped: batching is off"
    graph = scheduler.graph
    if graph is None:
        return f"skipped: the decode step is {scheduler.step_path!r} on {lm.device.type} (recorded on CUDA only)"
    replays, steps = graph.replays, scheduler.graph_steps
    try:
        worst, scale, same, total = _teacher_forced(lm, {"eager": lambda: setattr(scheduler, "graph", None),
                                                         "graph": lambda: setattr(scheduler, "graph", graph)})
    finally:
        scheduler.graph = graph
    if graph.graph_error is not None:
        raise AssertionError(f"recording the step failed, it ran eagerly: {graph.graph_error}")
    if scheduler.graph_steps - steps < TOKENS:
        raise AssertionError("the batches did not go through the graphed step")
    if graph.graphs and graph.replays == replays:
        raise AssertionError("no step was replayed from a recorded graph")
    tolerance, allowed = _bound(lm, scale)
    if worst > tolerance:
        raise AssertionError(f"the graphed step's logits differ from the eager step's by {worst:.3g} ({allowed})")
    if lm.weights == "float32" and lm.dtype == torch.float32 and same != total:
        raise AssertionError(f"the graphed step's greedy token differs from the eager step's at {total - same} of {total} steps")
    how = (f"{graph.replays - replays} replays, {graph.recorded} shapes recorded" if graph.graphs
           else f"its body without a recording on {lm.device.type}")
    return (f"3 sequences x {TOKENS} steps, greedy tokens the eager step's at {same} of {total}, logits within "
            f"{worst:.2g} ({allowed}; {how}; {graph.pool.slots} slots of {graph.pool.capacity} positions)")


def _out_of_memory(lm: ActiveLM, ids: list[int]) -> str:
    from ..decoding.attention import RAGGED, attention_modules
    from ..errors import DecodeOutOfMemoryError

    scheduler = lm.scheduler
    if scheduler is None:
        return "skipped: batching is off"
    long_ids = lm.prompt_ids(QUESTION + " Answer with the club he played for, his titles and his awards." * 4)
    limit = len(ids) + TOKENS + 1
    serial = _greedy(lm, ids)
    armed = [False]

    def fault(*_: Any) -> None:
        batch = RAGGED.get()
        if armed[0] and batch is not None and any(c.get_seq_length() > limit for c in batch.caches):
            raise torch.OutOfMemoryError("injected by active-rag doctor: out of memory")

    modules = attention_modules(lm.model)
    handle = modules[len(modules) // 2].register_forward_pre_hook(fault)
    budget = scheduler.kv_budget_bytes
    try:
        outcome = _together(lm, [ids, long_ids], arm=lambda: armed.__setitem__(0, True))
    finally:
        handle.remove()
        scheduler.kv_budget_bytes = budget  # an out-of-memory retry lowers it: give it back
    if not isinstance(outcome[1], DecodeOutOfMemoryError):
        raise AssertionError(f"the long sequence should have failed with DecodeOutOfMemoryError, got {outcome[1]!r}")
    if outcome[0] != serial:
        raise AssertionError(f"the other sequence decoded {outcome[0]!r} beside the failing one, {serial} alone")
    return (f"the other sequence decoded its serial tokens; KV budget {budget / 2**30:.2f} GiB, "
            f"{scheduler.kv_bytes_per_token / 1024:.1f} KiB a token")


def _presets(lm: ActiveLM, presets: list[str]) -> str:
    from ..models.device_audit import audited
    from ..engine import ActiveRAG
    from ..retrieval.bm25 import BM25Index

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
    from ..components.presets import PRESETS

    ids = lm.prompt_ids(QUESTION)
    chosen = list(PRESETS) if presets is None else presets
    steps: list[tuple[str, Callable[[], str]]] = [
        ("environment", lambda: environment(lm)),
        ("finite logits", lambda: _finite(lm, ids)),
        ("capture is invisible", lambda: _capture(lm, ids)),
        ("prefix cache", lambda: _prefix(lm, ids)),
        ("batched = serial", lambda: _batched(lm, ids)),
        ("padded attention = loop", lambda: _padded(lm, ids)),
        ("layers in one op = loop", lambda: _layers_op(lm)),
        ("graphed step = eager", lambda: _graphed(lm, ids)),
        ("out of memory isolated", lambda: _out_of_memory(lm, ids)),
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
