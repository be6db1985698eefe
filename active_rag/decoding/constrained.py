"""Logits processors for :meth:`DecodingSession.generate <active_rag.decoding.model.DecodingSession.generate>`
that observe or constrain decoding without touching the engine's signals.

``generate`` computes every token's log-probability and entropy from the model's raw distribution and
hands a *copy* of the raw logits to its ``logits_processor`` only to choose the token, so:

- :class:`TopLogprobs` records, per step, the ``k`` most likely tokens of the raw distribution (the
  OpenAI ``top_logprobs`` field) and returns the logits unchanged;
- :class:`JsonSchemaConstraint` masks every token that would break a JSON schema (constrained
  decoding with `llguidance <https://github.com/guidance-ai/llguidance>`_'s Earley parser over the
  model's own tokenizer), and allows only end-of-sequence once the JSON value is complete, so the
  output always parses (objects with declared properties are closed: :func:`close_objects`). It needs the optional ``llguidance`` package and a fast HF tokenizer.
- :func:`chain` applies several processors in order.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .model import ActiveLM, LogitsProcessor

#: Compact JSON without free whitespace: a model cannot spend its budget on blank lines.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_TOKENIZERS: weakref.WeakKeyDictionary[ActiveLM, Any] = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()


def vocab_size(lm: ActiveLM) -> int:
    """The number of logits the model emits per step."""
    head = lm.model.get_output_embeddings()
    # packed int8/int4 heads (active_rag.models.quantized) have no dense weight, but every head knows its width
    return int(getattr(head, "out_features", None) or head.weight.shape[0])


class TopLogprobs:
    """Records the ``k`` most likely tokens of each step's raw distribution: ``steps[i]`` is a list of
    ``(token_id, text, logprob)``, most likely first. Returns the logits unchanged."""

    def __init__(self, lm: ActiveLM, k: int) -> None:
        if k < 1:
            raise ValueError(f"top_logprobs must be at least 1, got {k}.")
        self.lm = lm
        self.k = k
        self.steps: list[list[tuple[int, str, float]]] = []

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        values, indices = torch.topk(logprobs, min(self.k, logprobs.shape[-1]))
        self.steps.append(
            [(int(i), self.lm.token_text(ids, int(i)), float(v)) for v, i in zip(values.tolist(), indices.tolist())]
        )
        return logits


def _ll_tokenizer(lm: ActiveLM) -> Any:
    try:
        import llguidance
        import llguidance.hf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Constrained JSON decoding (structured output, forced tool calls) needs llguidance: "
            "pip install llguidance"
        ) from exc
    with _TOKENIZERS_LOCK:
        tok = _TOKENIZERS.get(lm)
        if tok is None:
            eos = sorted(lm.eos_token_ids) or None
            try:
                tok = llguidance.hf.from_tokenizer(lm.tokenizer, n_vocab=vocab_size(lm), eos_token=eos)
            except ValueError as exc:
                raise ValueError(
                    f"Constrained decoding needs a fast Hugging Face tokenizer; {lm.name!r} has a "
                    f"{type(lm.tokenizer).__name__}: {exc}"
                ) from exc
            _TOKENIZERS[lm] = tok
        return tok


def close_objects(schema: Any) -> Any:
    """A copy of ``schema`` in which every object that declares ``properties`` and says nothing about
    ``additionalProperties`` allows no others (as OpenAI's strict mode does): a small model would
    otherwise copy schema keywords such as ``"type"`` into the arguments."""
    if isinstance(schema, list):
        return [close_objects(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: close_objects(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


class JsonSchemaConstraint:
    """Constrain decoding to one JSON value valid under ``schema`` (``None``: any JSON object).

    Feed it to ``session.generate(..., logits_processor=...)`` of a session whose prompt is ``prompt_len``
    tokens long: every token generated after the prompt is checked against the grammar, every token
    that cannot continue a valid value is masked, and once the value is complete only end-of-sequence
    remains allowed (the session then finishes). The model needs an end-of-sequence token."""

    def __init__(self, lm: ActiveLM, schema: dict[str, Any] | None, prompt_len: int) -> None:
        import llguidance

        if not lm.eos_token_ids:
            raise ValueError(f"Constrained decoding needs an end-of-sequence token; {lm.name!r} declares none.")
        self.schema = close_objects(schema) if schema is not None else {"type": "object"}
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(self.schema), defaults=JSON_OPTIONS)
        self.matcher = llguidance.LLMatcher(_ll_tokenizer(lm), grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"Unsupported JSON schema for constrained decoding: {self.matcher.get_error()}")
        self.lm = lm
        self.seen = prompt_len
        self.eos = sorted(lm.eos_token_ids)

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        for token in ids[self.seen :]:
            if not self.matcher.consume_token(int(token)):
                raise RuntimeError(f"Constrained decoding went off the grammar: {self.matcher.get_error()}")
        self.seen = len(ids)
        if self.matcher.is_stopped():
            allowed = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            allowed[self.eos] = True
        else:
            bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
            mask = np.unpackbits(bits, bitorder="little")[: logits.shape[-1]].astype(bool)
            allowed = torch.from_numpy(mask).to(logits.device, non_blocking=True)  # the mask meets the logits' device
        return logits.masked_fill(~allowed, float("-inf"))


class _Chain:
    """Processors applied in order; any other attribute is the first processor's that has it (a trigger's hooks,
    e.g. FLARE-instruct's ``after_search``, stay reachable behind the chain)."""

    def __init__(self, processors: list[LogitsProcessor]) -> None:
        self.processors = processors

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        for p in self.processors:
            logits = p(ids, logits)
        return logits

    def __getattr__(self, name: str) -> Any:
        for p in self.__dict__.get("processors", ()):
            if hasattr(p, name):
                return getattr(p, name)
        raise AttributeError(name)


def chain(*processors: LogitsProcessor | None) -> LogitsProcessor | None:
    """One processor applying ``processors`` in order (``None`` entries skipped; ``None`` if none is left)."""
    active = [p for p in processors if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return _Chain(active)


__all__ = ["JsonSchemaConstraint", "TopLogprobs", "chain", "close_objects", "vocab_size", "JSON_OPTIONS"]
