"""A decode step without Python in the loop on a GPU: a static key/value pool and one CUDA graph per shape (beyond
the papers).

On a GPU a small model's decode step is bound by kernel launches, not by the bytes it reads: the 0.5B shape in
bfloat16 reads its weights in well under a millisecond on an H200, while the eager step, ours (:mod:`.lean_step`)
or ``model.generate``'s, launches some 400 kernels from Python and takes 50-60 ms under the lent machine's
virtualisation (``results/bench/gpu/``). A CUDA graph records those launches once and replays them in one call.

A graph replays fixed addresses and shapes, so this step does not read the sessions' own caches. Each sequence that
decodes through it is bound to a slot of a :class:`~active_rag.decoding.slot_cache.SlotPool` (its keys and values
copied there once; its cache's layers then view the slot, so prefills, crops and the prefix cache see what they saw
before). One graph is recorded per (batch bucket, length bucket, captured layer): rows ``0 .. batch-1`` of the pool
(the slots in use are the lowest free ones, so a batch of ``n`` live sequences has a bucket near ``n``) attend over
the first ``length`` positions with a key mask ``position <= p``. A row whose slot takes no step this time writes
its position 0 back unchanged (``torch.where`` on the ``active`` flag), so a bound sequence busy retrieving is never
touched. Inside the graph, per layer: the family's own norms, projections and rotary embedding (as in
:func:`~active_rag.decoding.lean_step.lean_step`), the new key and value written at each row's position, and
``scaled_dot_product_attention`` with the query heads that share a key/value head as that head's rows (the grouping
of :mod:`.one_token_attention`: each key/value head read once, no ``repeat_kv`` copy). On the captured layer the
head-averaged attention row (DRAGIN Eq. 2-3) is computed in float32 for every row, as
:func:`~active_rag.decoding.attention._attention_row` computes it. The last position's logits in float32 leave the
graph with each row's greedy token, its log-probability and the entropy (:func:`greedy_summary`), which a greedy
session reads instead of computing them itself; a session with a logits processor or a temperature reads the
logits as before.

On any device :class:`GraphStep` runs the same body without recording a graph (``graphs=False``: the unit tests run
it on the CPU against the eager step); on CUDA it records, and falls back to the body (and says why, in
:attr:`GraphStep.graph_error`) if a capture fails. A batch it cannot take (a sequence longer than a slot, no free
slot, a model with forward hooks) goes through the eager step as before.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..signals import entropies
from .admission import kv_bytes_per_token
from .lean_step import LeanStep, _Layer, _rotary, _unsupported, decode_step_choice
from .slot_cache import SlotBinding, SlotPool

__all__ = ["GRAPH_CAPACITY", "Greedy", "GraphStep", "graph_step", "graph_wanted", "greedy_summary"]

GRAPH_CAPACITY = 4096
"""Positions a slot holds by default (a longer sequence decodes through the eager step)."""
MIN_LENGTH_BUCKET = 256


@dataclass
class _Entry:
    graph: Any  # torch.cuda.CUDAGraph | None
    logits: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    greedy: torch.Tensor | None = None


def _buckets(limit: int, start: int) -> list[int]:
    out, n = [], start
    while n < limit:
        out.append(n)
        n *= 2
    return [*out, limit]


def _bucket(buckets: Sequence[int], n: int) -> int:
    return next(b for b in buckets if b >= n)


class GraphStep:
    """The graphed decode step of a model of a family :mod:`.lean_step` knows (see the module docstring).

    ``run(requests)`` takes the scheduler's requests (each with ``cache``, ``token``, ``position``, ``capture``) under
    the scheduler's model lock and returns ``(logits [n, vocab] float32, rows, greedy)`` or ``None`` when this batch
    must take the eager step."""

    def __init__(self, model: torch.nn.Module, *, slots: int, capacity: int = GRAPH_CAPACITY,
                 graphs: bool | None = None) -> None:
        reason = _unsupported(model)
        if reason is not None:
            raise ValueError(f"no graphed step for this model: {reason}")
        family = sys.modules[type(model).__module__]
        inner, config = model.model, model.config  # type: ignore[attr-defined]
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.graphs = (self.device.type == "cuda") if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a model on a CUDA device; pass graphs=False to run the step eagerly")
        self.graph_error: str | None = None
        self._embed, self._rotary_emb, self._norm, self._head = (inner.embed_tokens, inner.rotary_emb, inner.norm,
                                                                 model.lm_head)  # type: ignore[attr-defined]
        self._rope = _rotary(family.apply_rotary_pos_emb, model)
        self._layers = [_Layer(layer) for layer in inner.layers]
        self._attn_modules = [layer.self_attn for layer in inner.layers]
        attn = inner.layers[0].self_attn
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, attn.head_dim
        self.pool = SlotPool(layers=len(self._layers), slots=slots, capacity=capacity, kv_heads=kv_heads,
                             head_dim=attn.head_dim, device=self.device, dtype=self.dtype)
        self.batch_buckets = _buckets(slots, 1)
        self.length_buckets = _buckets(capacity, min(MIN_LENGTH_BUCKET, capacity))
        with torch.inference_mode():
            self._inputs = torch.zeros((3, slots), dtype=torch.long, device=self.device)  # token, position, active
            self._arange = torch.arange(max(slots, capacity), device=self.device)
        self._entries: dict[tuple[int, int, int], _Entry] = {}
        self._mempool: Any = torch.cuda.graph_pool_handle() if self.graphs else None
        self._hooks = LeanStep(model, lambda *a: None)  # type: ignore[arg-type, return-value]
        self.replays = 0
        self.eager_runs = 0

    @property
    def recorded(self) -> int:
        """How many shapes have a recorded graph."""
        return sum(entry.graph is not None for entry in self._entries.values())

    def hooked(self) -> bool:
        """Whether a module of the model has a forward hook now (the graph would skip it)."""
        return self._hooks.hooked()

    def captured_layer(self) -> int:
        """The layer whose attention rows are captured, or -1."""
        return next((i for i, m in enumerate(self._attn_modules) if getattr(m, "_active_rag_captured", False)), -1)

    # -- the body ------------------------------------------------------------------------------------
    def _body(self, batch: int, length: int, captured: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """One step of rows ``0 .. batch-1`` over ``length`` positions (the graph records this): the logits, the
        captured rows and, per row, the greedy token, its log-probability and the entropy (:func:`greedy_summary`)."""
        ids, positions, active = self._inputs[0, :batch], self._inputs[1, :batch], self._inputs[2, :batch] > 0
        rows_index = self._arange[:batch]
        hidden = self._embed(ids[:, None])
        rotation = self._rope.prepare(*self._rotary_emb(hidden, positions[:, None]))
        keep = self._arange[:length][None, :] <= positions[:, None]  # [batch, length]
        mask = keep[:, None, None, :]
        group = self.heads // self.kv_heads
        row: torch.Tensor | None = None
        for i, layer in enumerate(self._layers):
            x = layer.input_norm(hidden)
            shape = (batch, 1, -1, self.head_dim)
            query, key, value = (t.view(shape).transpose(1, 2) for t in layer.qkv(x))
            query, key = self._rope(query, key, rotation)
            keys = self.pool.keys[i][:batch, :, :length]
            values = self.pool.values[i][:batch, :, :length]
            flag = active[:, None, None]
            keys[rows_index, :, positions] = torch.where(flag, key[:, :, 0], keys[rows_index, :, positions])
            values[rows_index, :, positions] = torch.where(flag, value[:, :, 0], values[rows_index, :, positions])
            grouped = query.reshape(batch, self.kv_heads, group, self.head_dim)
            out = torch.nn.functional.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask,
                                                                   scale=layer.scaling)
            if i == captured:
                scores = (grouped.float() @ keys.float().transpose(-1, -2)) * layer.scaling
                scores = scores.masked_fill(~mask, float("-inf"))
                row = torch.softmax(scores, dim=-1).mean(dim=(1, 2))
            hidden = hidden + layer.o(out.reshape(batch, 1, -1))
            x = layer.post_norm(hidden)
            gate, up = layer.gate_up(x)
            hidden = hidden + layer.down(layer.act(gate) * up)
        logits = self._head(self._norm(hidden))[:, -1].float()
        return logits, row, greedy_summary(logits)

    def _entry(self, batch: int, length: int, captured: int) -> _Entry:
        key = (batch, length, captured)
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        entry = _Entry(None)
        if self.graphs:
            try:
                entry = self._record(batch, length, captured)
            except Exception as error:  # noqa: BLE001 - any capture failure: the same body, eagerly
                self.graphs = False
                self.graph_error = f"{type(error).__name__}: {error}"
                torch.cuda.synchronize(self.device)
        self._entries[key] = entry
        return entry

    def _record(self, batch: int, length: int, captured: int) -> _Entry:
        """Warm up and record the body for this shape, with every row idle (each writes its position 0 back)."""
        self._inputs[:, :batch].zero_()
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._body(batch, length, captured)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the other sessions go on sampling on their own threads while this one records
        with torch.cuda.graph(graph, pool=self._mempool, capture_error_mode="thread_local"):
            logits, rows, greedy = self._body(batch, length, captured)
        return _Entry(graph, logits, rows, greedy)

    # -- a step --------------------------------------------------------------------------------------
    def run(self, requests: Sequence[Any]) -> tuple[torch.Tensor, list[torch.Tensor | None], list[Greedy]] | None:
        """The step of ``requests``: logits ``[n, vocab]``, captured rows and greedy summaries; ``None`` when one of
        them cannot be bound (see the module docstring)."""
        bindings: list[SlotBinding] = []
        for r in requests:
            binding = self.pool.bind(r.cache, r.position)
            if binding is None:
                return None
            bindings.append(binding)
        slots = [b.slot for b in bindings]
        if len(set(slots)) != len(slots):
            return None
        batch = _bucket(self.batch_buckets, max(slots) + 1)
        length = _bucket(self.length_buckets, max(r.position for r in requests) + 1)
        captured = self.captured_layer()
        host = [[0] * batch, [0] * batch, [0] * batch]  # token, position, active: idle rows write position 0 back
        for r, slot in zip(requests, slots):
            host[0][slot], host[1][slot], host[2][slot] = int(r.token), int(r.position), 1
        # the caller holds the scheduler's model lock: one step at a time
        entry = self._entry(batch, length, captured)
        self._inputs[:, :batch].copy_(torch.tensor(host, dtype=torch.long, device="cpu"))
        if entry.graph is not None:
            entry.graph.replay()
            logits_all, rows_all, greedy_all = entry.logits, entry.rows, entry.greedy
            self.replays += 1
        else:
            logits_all, rows_all, greedy_all = self._body(batch, length, captured)
            self.eager_runs += 1
        assert logits_all is not None and greedy_all is not None
        index = torch.tensor(slots, dtype=torch.long, device=self.device)
        logits = logits_all.index_select(0, index)  # a copy: the next replay overwrites the graph's outputs
        greedy = [(int(t), lp, h) for t, lp, h in greedy_all.index_select(0, index).tolist()]  # one transfer
        rows: list[torch.Tensor | None] = []
        for r, slot in zip(requests, slots):
            rows.append(rows_all[slot, : r.position + 1].cpu() if r.capture and rows_all is not None else None)
        for r, binding in zip(requests, bindings):
            binding.advance(r.position + 1)
        return logits, rows, greedy


Greedy = tuple[int, float, float]
"""``(token, log-probability, entropy)`` of a row's greedy choice (:func:`greedy_summary`)."""


def greedy_summary(logits: torch.Tensor) -> torch.Tensor:
    """``[batch, 3]`` float32: per row of float32 ``logits``, ``argmax`` (the token a greedy session picks; exact in
    float32 below 2**24 tokens), its log-probability and the entropy of the distribution (DRAGIN Eq. 1, ``0 * log 0 =
    0``), as :meth:`~active_rag.decoding.model.DecodingSession.generate` computes them from one row: a greedy session
    reads the three numbers of every sequence in one transfer a step instead of running its own kernels and
    synchronising three times."""
    logprobs = torch.log_softmax(logits, dim=-1)
    token = logits.argmax(dim=-1)
    chosen = logprobs.gather(-1, token[:, None])[:, 0]
    return torch.stack([token.float(), chosen, entropies(logprobs)], dim=1)


def graph_wanted(model: torch.nn.Module) -> bool:
    """Whether a scheduler for ``model`` takes this step by default: a model on CUDA of a family the lean step knows,
    unless :data:`~active_rag.decoding.lean_step.DECODE_STEP_VARIABLE` names another step (``lean``,
    ``transformers``); ``graph`` there takes it on any device (off CUDA its body runs without a recording)."""
    choice = decode_step_choice()
    if choice in ("transformers", "off", "0", "false", "no", "lean", "eager"):
        return False
    if choice == "graph":
        return _unsupported(model) is None
    device = next(model.parameters()).device
    return device.type == "cuda" and _unsupported(model) is None


def graph_step(model: torch.nn.Module, *, kv_budget_bytes: int, max_batch: int,
               capacity: int = GRAPH_CAPACITY, graphs: bool | None = None) -> GraphStep | None:
    """A :class:`GraphStep` whose pool holds as many slots (at most ``max_batch``) of ``capacity`` positions as
    ``kv_budget_bytes`` allow; ``None`` when not one fits or the family is unknown."""
    if _unsupported(model) is not None:
        return None
    slots = min(max_batch, kv_budget_bytes // (capacity * max(1, kv_bytes_per_token(model))))
    if slots < 1:
        return None
    return GraphStep(model, slots=int(slots), capacity=capacity, graphs=graphs)
