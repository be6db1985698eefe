"""One decoding scheduler per :class:`~active_rag.decoding.model.ActiveLM`: concurrent callers share forward passes.

Every :class:`~active_rag.decoding.model.DecodingSession` asks the scheduler for its one-token decode steps. The
scheduler gathers the steps that the live sessions request at about the same time and runs them as one
ragged batched forward (:mod:`active_rag.decoding.attention`): projections and MLPs see a batch, attention runs
over each sequence's own cache, so no padding is computed and every sequence keeps its own length,
crops, documents and prompt. Prefills (a new question, the re-prompt after a retrieval) run alone under
the same model lock. Sequences join and leave at any step: continuous batching.

Because the callers are ordinary threads, everything built on the engine gets batching without code
changes: :meth:`~active_rag.engine.loop.ActiveRAG.run_batch`, LangChain's ``batch``/``abatch``, concurrent
``ainvoke`` calls behind a web server, LlamaIndex's ``aquery``.

How a step is formed: a caller enqueues its request; the first caller that finds no forward running
becomes the leader and waits until every session currently decoding has enqueued (or until no new
request has arrived for ``wait_s``), then runs the batch for all of them (at most ``max_batch``).
A session that is busy elsewhere (retrieving, prefilling, or in a slow consumer) is not waited for
beyond that pause.

On CUDA the batch runs through the recorded step (:mod:`active_rag.decoding.graph_step`: a static key/value pool
and one CUDA graph per shape, with each row's greedy token, log-probability and entropy computed inside), and through
the eager step (:mod:`active_rag.decoding.lean_step` or ``model(...)``) when it cannot take the batch.

Memory: the leader admits the waiting steps by the KV bytes the forward reads
(:mod:`active_rag.decoding.admission`: ``kv_budget_bytes``, from the device's free memory on CUDA) and leaves the rest
queued for the next forward. A forward that runs out of memory is rolled back and retried split in halves, so
the other sequences go on, and the budget drops to half that forward's KV so that the next steps do not repeat it; a step that runs out of memory alone fails with
:class:`~active_rag.errors.DecodeOutOfMemoryError`, its cache as before the step. Any other error fails every
step of the forward (each rolled back: :func:`roll_back`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from .admission import admit, batch_cost, default_kv_budget_bytes, is_out_of_memory, kv_bytes_per_token, release_cached_memory
from .attention import RAGGED
from .graph_step import GraphStep, Greedy, graph_step, graph_wanted
from .lean_step import lean_step
from ..errors import DecodeOutOfMemoryError
from .ragged_attention import ATTENTION_MODES, RaggedBatch, RaggedCache
from .step_summary import summaries


def roll_back(cache: Any, length: int) -> None:
    """Forget every key/value past ``length`` tokens in every layer of ``cache``: a forward that failed at layer
    ``k`` (out of memory, a fault) has already appended the new token to the layers before ``k``, and a session
    decoding on with layers of different lengths would answer wrongly without an error."""
    for layer in getattr(cache, "layers", ()):
        keys = getattr(layer, "keys", None)
        if keys is not None and keys.dim() == 4 and keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


@dataclass
class _Request:
    cache: Any
    token: int
    position: int
    capture: bool
    logits: torch.Tensor | None = None
    row: torch.Tensor | None = None
    greedy: Greedy | None = None
    error: BaseException | None = None
    done: bool = False


class DecodeScheduler:
    """Batches the one-token decode steps of concurrent sessions (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        *,
        max_batch: int = 64,
        wait_s: float = 0.01,
        kv_budget_bytes: int | None = None,
        attention: str = "auto",
        graph: bool | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}")
        self.model = model
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.attention = attention
        """The ragged attention path: ``auto``, ``loop`` or ``padded`` (:mod:`active_rag.decoding.ragged_attention`)."""
        self.kv_bytes_per_token = kv_bytes_per_token(model)
        self.kv_budget_bytes = default_kv_budget_bytes(model.device) if kv_budget_bytes is None else int(kv_budget_bytes)
        """The most KV bytes one batched forward reads (:mod:`active_rag.decoding.admission`); steps beyond it wait."""
        self.lock = threading.RLock()
        """Held around every model call (batched decode and prefill): one forward at a time."""
        self._lean = lean_step(model)
        self.graph: GraphStep | None = None
        """The graphed step (:mod:`active_rag.decoding.graph_step`): by default on CUDA (``graph=None``); ``graph=True``
        runs its static-pool body without recording a graph on any device, ``False`` never."""
        if graph or (graph is None and graph_wanted(model)):
            # the slot pool takes half the KV budget; the eager step's admission keeps the other half
            self.graph = graph_step(model, kv_budget_bytes=self.kv_budget_bytes // 2, max_batch=max_batch,
                                    graphs=None if graph is None else model.device.type == "cuda")
            if self.graph is not None:
                self.kv_budget_bytes -= self.graph.pool.slots * self.graph.pool.capacity * self.kv_bytes_per_token
        self.step_path = "graph" if self.graph is not None else "lean" if self._lean is not None else "transformers"
        """How a batched step runs: ``graph`` (:mod:`active_rag.decoding.graph_step`, recorded once per shape on
        CUDA, with ``lean`` for a batch it cannot take), ``lean`` (:mod:`active_rag.decoding.lean_step`, the same ops
        without transformers' per-call machinery) or ``transformers`` (``model(...)``)."""
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._active = 0
        self._running = False
        self._last_arrival = 0.0
        self.forward_calls = 0
        self.batched_tokens = 0
        self.max_batch_seen = 0
        self.held_back = 0
        """Steps that waited for a later forward because the KV budget was full."""
        self.oom_retries = 0
        self.oom_failures = 0
        self.graph_steps = 0
        """Forwards the graphed step ran (the rest took the eager step)."""

    # -- session bookkeeping -------------------------------------------------------------------------
    def enter(self) -> None:
        """A session starts decoding: the leader waits for its requests."""
        with self._cond:
            self._active += 1

    def leave(self) -> None:
        """A session stops decoding (finished, retrieving, cancelled)."""
        with self._cond:
            self._active = max(0, self._active - 1)
            self._cond.notify_all()

    @property
    def active(self) -> int:
        return self._active

    # -- stepping ------------------------------------------------------------------------------------
    def step(self, cache: Any, token: int, position: int,
             capture: bool) -> tuple[torch.Tensor, torch.Tensor | None, Greedy | None]:
        """Feed ``token`` at ``position`` to the sequence whose KV cache is ``cache``; returns the
        next-token logits (float32, ``[vocab]``), when ``capture`` the captured attention row, and the greedy
        token's ``(token, log-probability, entropy)`` where the step computed them (the graphed step), else
        ``None``."""
        request = _Request(cache, token, position, capture)
        with self._cond:
            self._pending.append(request)
            self._last_arrival = time.monotonic()
            # no wake-up for the waiting threads: the arrival that completes a batch leads it itself (below), and
            # one that does not completes nothing they wait for (waking all of them at every arrival cost
            # batch**2 thread switches a step)
            while not request.done:
                if not self._running and self._pending and self._ready():
                    batch = self._admit()
                    self._running = True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._running = False
                        # the sequences of this batch come back after their per-token work: wait for them
                        # from now, not from a request that arrived while the batch was running
                        self._last_arrival = time.monotonic()
                        self._cond.notify_all()
                else:
                    self._cond.wait(timeout=self.wait_s / 2)
        if request.error is not None:
            raise request.error
        assert request.logits is not None
        return request.logits, request.row, request.greedy

    def _admit(self) -> list[_Request]:
        """Take the next batch off the queue: the first steps whose KV fits the budget (at least one)."""
        tokens = [r.position + 1 for r in self._pending]
        n = admit(tokens, self.kv_bytes_per_token, self.kv_budget_bytes, self.max_batch)
        self.held_back += max(0, min(len(tokens), self.max_batch) - n)
        batch = self._pending[:n]
        del self._pending[:n]
        return batch

    def _ready(self) -> bool:
        if len(self._pending) >= min(self.max_batch, max(self._active, 1)):
            return True
        return time.monotonic() - self._last_arrival >= self.wait_s

    @torch.inference_mode()
    def _run(self, batch: list[_Request]) -> None:
        self._attempt(batch)
        self.batched_tokens += len(batch)
        self.max_batch_seen = max(self.max_batch_seen, len(batch))
        for r in batch:
            r.done = True

    def _attempt(self, batch: list[_Request]) -> None:
        """Run ``batch``; on out of memory, retry it split in halves (each half alone), down to single steps."""
        try:
            self._forward(batch)
            return
        except BaseException as error:  # every step of the try has its cache as before it
            for r in batch:
                roll_back(r.cache, r.position)
            if not is_out_of_memory(error):
                for r in batch:
                    r.error = error
                return
            # the traceback holds the failed forward's frames, and through them its tensors: drop it before retrying
            failure = error.with_traceback(None)
        release_cached_memory(self.model.device)
        if len(batch) == 1:
            self.oom_failures += 1
            batch[0].error = self._oom_error(batch[0], failure)
            return
        self.oom_retries += 1
        # the next forwards should not hit the same wall at every step: the budget becomes half this batch's KV
        cost = batch_cost([r.position + 1 for r in batch], self.kv_bytes_per_token)
        self.kv_budget_bytes = max(1, min(self.kv_budget_bytes, cost // 2))
        half = len(batch) // 2
        self._attempt(batch[:half])
        self._attempt(batch[half:])

    def _oom_error(self, request: _Request, cause: BaseException) -> DecodeOutOfMemoryError:
        tokens = request.position + 1
        mib = tokens * self.kv_bytes_per_token / 2**20
        error = DecodeOutOfMemoryError(
            f"The {self.model.device} device ran out of memory decoding a sequence of {tokens} tokens ({mib:.1f} MiB of "
            f"KV cache) even alone; any other sequences of its batch went on without it. Free memory (a smaller "
            f"prefix_cache_mb, fewer concurrent requests, lm.scheduler.kv_budget_bytes lower) or shorten the prompt "
            f"or max_new_tokens. Device error: {cause}"
        )
        error.__cause__ = cause
        return error

    def _forward(self, batch: list[_Request]) -> None:
        device = self.model.device
        input_ids = torch.tensor([[r.token] for r in batch], dtype=torch.long, device=device)
        position_ids = torch.tensor([[r.position] for r in batch], dtype=torch.long, device=device)
        self.forward_calls += 1
        with self.lock:
            if self.graph is not None and not self.graph.hooked():
                graphed = self.graph.run(batch)
                if graphed is not None:
                    logits, rows, greedy = graphed
                    for b, r in enumerate(batch):
                        r.logits, r.row, r.greedy, r.error = logits[b], rows[b], greedy[b], None
                    self.graph_steps += 1
                    return
            ragged = RaggedBatch(caches=[r.cache for r in batch], capture=[r.capture for r in batch], mode=self.attention)
            token = RAGGED.set(ragged)
            try:
                if self._lean is not None and not self._lean.hooked():
                    logits = self._lean(input_ids, position_ids, RaggedCache(ragged)).float()
                else:
                    out = self.model(
                        input_ids=input_ids,
                        cache=RaggedCache(ragged),
                        position_ids=position_ids,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                    logits = out.logits[:, -1].float()
            finally:
                RAGGED.reset(token)
        greedy = summaries(logits)  # each row's (token, log-probability, entropy) in one op, where it applies
        for b, r in enumerate(batch):
            r.logits = logits[b]
            r.row = ragged.rows[b]
            r.greedy = None if greedy is None else greedy[b]
            r.error = None

    def stats(self) -> dict[str, float]:
        """Counters of the forwards run so far (``forward_calls`` counts every try of an out-of-memory retry)."""
        calls = max(self.forward_calls, 1)
        return {
            "forward_calls": self.forward_calls,
            "tokens": self.batched_tokens,
            "mean_batch": round(self.batched_tokens / calls, 2),
            "max_batch": self.max_batch_seen,
            "held_back": self.held_back,
            "oom_retries": self.oom_retries,
            "oom_failures": self.oom_failures,
            "graph_steps": self.graph_steps,
        }


__all__ = ["DecodeScheduler", "roll_back"]
