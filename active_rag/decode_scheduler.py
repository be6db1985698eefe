"""One decoding scheduler per :class:`~active_rag.model.ActiveLM`: concurrent callers share forward passes.

Every :class:`~active_rag.model.DecodingSession` asks the scheduler for its one-token decode steps. The
scheduler gathers the steps that the live sessions request at about the same time and runs them as one
ragged batched forward (:mod:`active_rag.attention`): projections and MLPs see a batch, attention runs
over each sequence's own cache, so no padding is computed and every sequence keeps its own length,
crops, documents and prompt. Prefills (a new question, the re-prompt after a retrieval) run alone under
the same model lock. Sequences join and leave at any step: continuous batching.

Because the callers are ordinary threads, everything built on the engine gets batching without code
changes: :meth:`~active_rag.loop.ActiveRAG.run_batch`, LangChain's ``batch``/``abatch``, concurrent
``ainvoke`` calls behind a web server, LlamaIndex's ``aquery``.

How a step is formed: a caller enqueues its request; the first caller that finds no forward running
becomes the leader and waits until every session currently decoding has enqueued (or until no new
request has arrived for ``wait_s``), then runs the batch for all of them (at most ``max_batch``).
A session that is busy elsewhere (retrieving, prefilling, or in a slow consumer) is not waited for
beyond that pause.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from .attention import RAGGED, RaggedBatch, RaggedCache


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
    error: BaseException | None = None
    done: bool = False


class DecodeScheduler:
    """Batches the one-token decode steps of concurrent sessions (see the module docstring)."""

    def __init__(self, model: Any, *, max_batch: int = 64, wait_s: float = 0.01) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.model = model
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.lock = threading.RLock()
        """Held around every model call (batched decode and prefill): one forward at a time."""
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._active = 0
        self._running = False
        self._last_arrival = 0.0
        self.forward_calls = 0
        self.batched_tokens = 0
        self.max_batch_seen = 0

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
    def step(self, cache: Any, token: int, position: int, capture: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed ``token`` at ``position`` to the sequence whose KV cache is ``cache``; returns the
        next-token logits (float32, ``[vocab]``) and, when ``capture``, the captured attention row."""
        request = _Request(cache, token, position, capture)
        with self._cond:
            self._pending.append(request)
            self._last_arrival = time.monotonic()
            self._cond.notify_all()
            while not request.done:
                if not self._running and self._pending and self._ready():
                    batch = self._pending[: self.max_batch]
                    del self._pending[: self.max_batch]
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
        return request.logits, request.row

    def _ready(self) -> bool:
        if len(self._pending) >= min(self.max_batch, max(self._active, 1)):
            return True
        return time.monotonic() - self._last_arrival >= self.wait_s

    @torch.inference_mode()
    def _run(self, batch: list[_Request]) -> None:
        device = self.model.device
        input_ids = torch.tensor([[r.token] for r in batch], dtype=torch.long, device=device)
        position_ids = torch.tensor([[r.position] for r in batch], dtype=torch.long, device=device)
        ragged = RaggedBatch(caches=[r.cache for r in batch], capture=[r.capture for r in batch])
        try:
            with self.lock:
                token = RAGGED.set(ragged)
                try:
                    out = self.model(
                        input_ids=input_ids,
                        past_key_values=RaggedCache(ragged),
                        position_ids=position_ids,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                finally:
                    RAGGED.reset(token)
            logits = out.logits[:, -1].float()
            for b, r in enumerate(batch):
                r.logits = logits[b]
                r.row = ragged.rows[b]
        except BaseException as error:  # every caller of the batch sees it, with its cache as before the step
            for r in batch:
                roll_back(r.cache, r.position)
                r.error = error
        self.forward_calls += 1
        self.batched_tokens += len(batch)
        self.max_batch_seen = max(self.max_batch_seen, len(batch))
        for r in batch:
            r.done = True

    def stats(self) -> dict[str, float]:
        calls = max(self.forward_calls, 1)
        return {
            "forward_calls": self.forward_calls,
            "tokens": self.batched_tokens,
            "mean_batch": round(self.batched_tokens / calls, 2),
            "max_batch": self.max_batch_seen,
        }


__all__ = ["DecodeScheduler", "roll_back"]
