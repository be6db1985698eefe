"""``ActiveLM``: a local Hugging Face causal LM that exposes, for every generated token, its id, text,
log-probability, entropy of the full distribution, and its attention row over all earlier positions.

Everything comes from the one KV-cached generation pass. Only the captured layer (by default the last, as DRAGIN
uses, §3.1 footnote 2) computes explicit attention weights, and only on one-token decode steps; every other layer,
and every prefill, keeps the model's fast kernel (sdpa). The attention row of token ``t_i`` is the row it writes as
the query when it is fed back to the model, i.e. ``A_{i,<i}`` of DRAGIN's Eq. 2. Extra memory is one row per live
token, linear in the sequence length. Two things make many questions cheap:

- a :class:`~active_rag.decoding.prefix_cache.PrefixCache` of prompt prefixes: a session starts from the longest
  token-identical prefix already computed (the shared exemplars) and prefills only the rest;
- a :class:`~active_rag.decoding.decode_scheduler.DecodeScheduler`: the one-token steps of sessions decoding at the
  same time (threads, asyncio workers, :meth:`ActiveRAG.run_batch`) share one batched forward pass.

The wiring is in :mod:`active_rag.decoding.attention` (transformers' ``AttentionInterface``).
"""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .attention import CAPTURE, IMPLEMENTATION, Capture, attention_modules, install
from .._aio import check_cancelled
from .decode_scheduler import DecodeScheduler, roll_back
from .graph_step import Greedy
from ..errors import AttentionCaptureError
from .kv_layer import growing_cache
from .host_memory import hold_prefill_heap, trim_host_memory
from .prefix_cache import PrefixCache, default_prefix_cache_mb
from .session_prefix import SessionPrefixCache
from ..signals import entropy_from_logprobs, finite_entropy
from .prompt_usage import PromptUsage, count_prompt_tokens, current_usage
from ..types import TokenStep

CAPTURE_IMPLEMENTATION = IMPLEMENTATION

LogitsProcessor = Callable[[Sequence[int], torch.Tensor], torch.Tensor]
"""``(all token ids so far, next-token logits [vocab]) -> processed logits``; used for sampling only."""

StopCondition = Callable[[list[TokenStep]], bool]
"""Called after every token with the tokens generated so far in this call; ``True`` stops."""


_LOGITS_KEPT = 4
"""Next-token logits kept per session for the most recent positions (see ``DecodingSession.crop``)."""


@dataclass
class DecodingSession(SessionPrefixCache):
    """One KV-cached decoding state over ``ids``: generate token by token, crop, extend.

    ``max_attention[j]`` is DRAGIN's ``a_max(j)`` (Eq. 3): the largest attention that any later token
    generated in this session with capture on (and not cropped since) paid to position ``j``.
    ``cached_tokens`` prompt tokens came from the model's prefix cache; ``prefilled_tokens`` were computed.
    """

    lm: ActiveLM
    ids: list[int]
    capture_attention: bool = False
    max_attention: torch.Tensor = field(default_factory=lambda: torch.zeros(0, device="cpu"))
    finished: bool = False
    forward_passes: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("A decoding session needs at least one prompt token.")
        self._cache = growing_cache(self.lm.model.config)
        self._fed = 0  # number of ids already in the KV cache
        self._next_logits: torch.Tensor | None = None
        self._next_greedy: Greedy | None = None  # the graphed step's summary of _next_logits
        self._logits_at: dict[int, torch.Tensor] = {}  # tokens fed -> next-token logits (the last few)
        # rows of the tokens generated since the last commit() (position -> row), and a_max of everything
        # committed before: crop() can rebuild a_max exactly while memory stays one segment of rows
        self._rows: dict[int, torch.Tensor] = {}
        self._committed_max = torch.zeros(0, dtype=torch.float32, device="cpu")  # a_max: on the CPU, as the captured rows
        self._committed = len(self.ids)
        self.max_attention = torch.zeros(len(self.ids), dtype=torch.float32, device="cpu")
        # look up, prefill and remember under the model lock: sessions opened together on a shared prompt
        # (a batch of questions) then read it once, the later ones from the first one's entry
        with self.lm.model_lock:
            self._start_from_prefix_cache()
            if len(self.ids) - self._fed > 1:
                self._forward(self.ids[self._fed : -1], capture=False, alone=True)
                self._remember_prompt()
        self._feed_pending()  # the last prompt token: its logits (and attention row) come from this session
        self._remember_prompt()
        usage = current_usage()
        if usage is not None:
            usage.cached += self.cached_tokens
            usage.prefilled += self.prefilled_tokens
            usage.sessions += 1

    # -- low level -----------------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, new_ids: list[int], capture: bool, *, alone: bool = False) -> torch.Tensor | None:
        """Feed ``new_ids``; one token joins the decode scheduler's batch unless ``alone`` (a caller that holds
        the model lock must not wait for a batch: the batch's leader needs that lock to run it)."""
        lm = self.lm
        start = self._fed
        if len(new_ids) == 1 and lm.scheduler is not None and not alone:
            logits, row, greedy = lm.scheduler.step(self._cache, new_ids[0], start, capture)
            self.forward_passes += 1
            self._fed += 1
            self._keep_logits(logits, greedy)
            if capture and row is None:
                raise self._capture_error()
            return row if capture else None
        model = lm.model
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=model.device)
        position_ids = torch.arange(start, start + len(new_ids), device=model.device).unsqueeze(0)
        cap = Capture() if capture and len(new_ids) == 1 else None
        cpu_prefill = len(new_ids) > 1 and model.device.type == "cpu"
        if cpu_prefill:  # its blocks stay in the heap until it ends (host_memory.py)
            hold_prefill_heap()
        with lm.model_lock:
            token = CAPTURE.set(cap)
            try:
                out = model(
                    input_ids=input_ids,
                    cache=self._cache,
                    position_ids=position_ids,
                    use_cache=True,
                    logits_to_keep=1,
                )
            except BaseException:
                roll_back(self._cache, start)  # the layers before a fault hold the new tokens: forget them
                raise
            finally:
                CAPTURE.reset(token)
        self.forward_passes += 1
        self._fed += len(new_ids)
        self._keep_logits(out.logits[0, -1].float())
        if cpu_prefill:  # its activations were freed: hand the pages back
            trim_host_memory()
        if cap is None:
            return None
        if cap.row is None:
            raise self._capture_error()
        return cap.row

    def _keep_logits(self, logits: torch.Tensor, greedy: Greedy | None = None) -> None:
        """The next-token logits after ``_fed`` tokens; the last few are kept so that a crop of the tokens
        generated past a sentence end (FLARE's look-ahead overshoot) needs no forward pass to re-feed."""
        self._next_logits, self._next_greedy = logits, greedy
        self._logits_at[self._fed] = logits
        for fed in [f for f in self._logits_at if f <= self._fed - _LOGITS_KEPT]:
            del self._logits_at[fed]

    def _capture_error(self) -> AttentionCaptureError:
        return AttentionCaptureError(
            f"Model {self.lm.name!r} ({type(self.lm.model).__name__}) did not route its attention through transformers' "
            "AttentionInterface, so its attention weights cannot be captured. Use a model family that does "
            "(Llama, Qwen2, Mistral, Gemma, Phi3, ...), or use a trigger/query that needs no attention "
            "(e.g. --method flare instead of dragin)."
        )

    def _feed_pending(self, capture: bool = False) -> torch.Tensor | None:
        pending = self.ids[self._fed :]
        if not pending:
            return None
        if len(pending) > 1:
            self._forward(pending[:-1], capture=False)
        return self._forward(pending[-1:], capture=capture)

    def _record_row(self, row: torch.Tensor) -> torch.Tensor:
        """Keep row over earlier positions only and fold it into the running ``a_max`` (Eq. 3)."""
        earlier = row[:-1].clone()
        n = earlier.shape[0]
        if self.max_attention.shape[0] < n + 1:
            grown = torch.zeros(n + 1, dtype=torch.float32, device="cpu")
            grown[: self.max_attention.shape[0]] = self.max_attention
            self.max_attention = grown
        torch.maximum(self.max_attention[:n], earlier, out=self.max_attention[:n])
        self._rows[n] = earlier
        return earlier

    # -- public --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def crop(self, length: int) -> None:
        """Forget every token from ``length`` on. The KV cache keeps the first ``length`` tokens when their
        next-token logits are still known (a recent position), else the first ``length - 1`` and the last
        kept token is fed again."""
        if not 1 <= length <= len(self.ids):
            raise ValueError(f"crop length must be in [1, {len(self.ids)}], got {length}")
        if length == len(self.ids):
            return
        if length < self._committed:
            raise ValueError(f"cannot crop to {length}: the first {self._committed} tokens were committed")
        known = self._fed >= length and length in self._logits_at
        keep = length if known else min(self._fed, length - 1)
        if keep < self._fed:
            self._cache.crop(keep - self._fed)  # a negative count removes that many cached positions
        self._fed = keep
        self._logits_at = {f: v for f, v in self._logits_at.items() if f <= keep}
        if known:
            self._next_logits, self._next_greedy = self._logits_at[length], None
        del self.ids[length:]
        # a_max must not keep the attention of the forgotten tokens: rebuild it from the committed part and
        # the rows that remain
        self._rows = {p: r for p, r in self._rows.items() if p < length}
        self.max_attention = torch.zeros(length, dtype=torch.float32, device="cpu")
        base = self._committed_max[:length]
        self.max_attention[: base.shape[0]] = base
        for r in self._rows.values():
            torch.maximum(self.max_attention[: r.shape[0]], r, out=self.max_attention[: r.shape[0]])
        self.finished = False
        self._feed_pending()

    def commit(self) -> None:
        """Accept every token so far: their attention rows are released (only ``a_max`` is kept), so the
        session holds at most one segment of rows and extra memory stays linear in the sequence length.
        Committed tokens can no longer be cropped away."""
        self._committed_max = self.max_attention.clone()
        self._committed = len(self.ids)
        self._rows.clear()

    def extend(self, new_ids: Sequence[int]) -> None:
        """Append tokens (e.g. a forced answer phrase) to the sequence."""
        self.ids.extend(int(i) for i in new_ids)
        self.finished = False
        self._feed_pending()

    def generate(
        self,
        max_new_tokens: int,
        *,
        stop: StopCondition | None = None,
        logits_processor: LogitsProcessor | None = None,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> Iterator[TokenStep]:
        """Yield up to ``max_new_tokens`` tokens (greedy unless ``temperature > 0``).

        Log-probability and entropy (DRAGIN Eq. 1) come from the model's raw distribution, before any
        logits processor (which only steers the choice, e.g. FLARE-instruct's bias on "["). Stops on an
        end-of-sequence token (not yielded; ``finished`` becomes ``True``) or when ``stop`` says so.
        """
        lm = self.lm
        steps: list[TokenStep] = []
        scheduler = lm.scheduler
        if scheduler is not None:
            scheduler.enter()  # the scheduler waits for this session's steps while it decodes
        try:
            for _ in range(max_new_tokens):
                check_cancelled()  # an async caller that was cancelled stops its decoding here
                if self._fed < len(self.ids):
                    self._feed_pending()
                assert self._next_logits is not None
                logits = self._next_logits
                # a greedy step of the graphed decode step comes with this row's (token, logprob, entropy)
                greedy = self._next_greedy if logits_processor is None and temperature <= 0 else None
                if greedy is not None:
                    token_id = greedy[0]
                else:
                    logprobs = torch.log_softmax(logits, dim=-1)
                    scores = logits if logits_processor is None else logits_processor(self.ids, logits.clone())
                    if temperature > 0:
                        probs = torch.softmax(scores / temperature, dim=-1)
                        if generator is not None and generator.device != probs.device:
                            probs = probs.to(generator.device)  # a seeded generator samples on its own device
                        token_id = int(torch.multinomial(probs, 1, generator=generator).item())
                    else:
                        token_id = int(torch.argmax(scores).item())
                if token_id in lm.eos_token_ids:
                    self.finished = True
                    return
                if greedy is not None:
                    lp, entropy = greedy[1], finite_entropy(greedy[2], f"float32 on {logits.device}")
                else:
                    lp, entropy = float(logprobs[token_id]), entropy_from_logprobs(logprobs)
                position = len(self.ids)
                text = lm.token_text(self.ids, token_id)
                self.ids.append(token_id)
                attention = None
                if self.capture_attention:
                    row = self._forward([token_id], capture=True)
                    assert row is not None
                    attention = self._record_row(row)
                step = TokenStep(id=token_id, text=text, logprob=lp, entropy=entropy, position=position, attention=attention)
                steps.append(step)
                yield step
                if stop is not None and stop(steps):
                    return
        finally:
            if scheduler is not None:
                scheduler.leave()


_MODEL_STAMPS: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
_STAMPS_LOCK = threading.Lock()


class ActiveLM:
    """A local causal LM that exposes logits and attentions while it generates.

    >>> lm = ActiveLM.load("smollm2")            # doctest: +SKIP
    >>> for step in lm.stream("Who wrote Hamlet?", max_new_tokens=8):  # doctest: +SKIP
    ...     print(step.text, step.prob, step.entropy, step.attention.shape)
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str | None = None,
        attention_layer: int = -1,
        system_prompt: str | None = None,
        prefix_cache: bool | PrefixCache = True,
        prefix_cache_mb: float | None = None,
        batching: bool = True,
        max_batch: int = 64,
    ) -> None:
        """Wrap a loaded causal LM and its tokenizer.

        Args:
            attention_layer: the layer whose attention rows are captured (DRAGIN uses the last, ``-1``).
            system_prompt: a system message for the chat template.
            prefix_cache: keep the KV cache of computed prompt prefixes (``True``, default), not
                (``False``), or share a given :class:`~active_rag.decoding.prefix_cache.PrefixCache`.
            prefix_cache_mb: its bound in MiB (LRU beyond it); ``None``: :func:`~active_rag.decoding.prefix_cache.default_prefix_cache_mb`.
            batching: serve the decode steps of concurrent sessions with shared batched forwards.
            max_batch: the most sequences one batched forward advances.
        """
        from ..validation import check_int, check_number

        mb = default_prefix_cache_mb(model.device) if prefix_cache_mb is None else check_number(
            "prefix_cache_mb", prefix_cache_mb, minimum=0, hint="It is the prefix KV cache's memory bound in MiB, e.g. 1024; 0 turns the cache off")
        check_int("max_batch", max_batch, minimum=1)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.system_prompt = system_prompt
        self._tok_lock = threading.Lock()
        eos: set[int] = set()
        for source in (getattr(model, "generation_config", None), model.config, tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, (list, tuple)):
                eos.update(int(v) for v in value)
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self.max_context: int = int(
            getattr(model.config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", 2048)
        )
        self.attention_error: str | None = None
        self.captured_layer: int | None = None
        self._install_capture(attention_layer)
        if isinstance(prefix_cache, PrefixCache):
            self.prefix_cache: PrefixCache | None = prefix_cache
        else:
            self.prefix_cache = PrefixCache(int(mb * 2**20)) if prefix_cache and mb > 0 else None
        self.scheduler: DecodeScheduler | None = (
            DecodeScheduler(self.model, max_batch=max_batch) if batching and self.attention_error is None else None
        )
        self.model_lock = self.scheduler.lock if self.scheduler is not None else threading.RLock()

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        name_or_path: str | None = None,
        *,
        device: str = "auto",
        dtype: Any = None,
        weights: str = "auto",
        **kwargs: Any,
    ) -> ActiveLM:
        """Load a registry name (default ``smollm2``), a GGUF file, a local folder or a cached hub id.

        ``device``: ``"auto"`` (a CUDA GPU when present, else Apple ``mps``, else the CPU), ``"cpu"``,
        ``"cuda"``, ``"cuda:1"``, ``"mps"``. ``dtype``: a ``torch.dtype`` or its name; by default bfloat16 on
        a CUDA GPU that supports it, float32 elsewhere. ``weights``: ``"auto"`` (mixed on the CPU, dense
        elsewhere), ``"float32"`` (dense), ``"int8"`` or ``"int4"`` (packed weight-only linear layers,
        :mod:`active_rag.models.weights`). Other keyword arguments go to :class:`ActiveLM`.
        """
        from ..models.devices import resolve_device, resolve_dtype
        from ..models.loading import load_pretrained
        from ..models.model_specs import DEFAULT_MODEL
        from ..models.weights import resolve_weights

        name = name_or_path or DEFAULT_MODEL
        where = resolve_device(device)
        packed = resolve_weights(weights, where)
        model, tokenizer = load_pretrained(name, dtype=resolve_dtype(dtype, where), device=where, weights=packed)
        return cls(model, tokenizer, name=name, **kwargs)

    @property
    def weights(self) -> str:
        """``"float32"`` (dense, in the model's dtype), ``"int8"`` or ``"int4"``."""
        from ..models.weights import model_weights

        return model_weights(self.model)

    @property
    def variant(self) -> str:
        """The model's name, with its weights, dtype and device unless dense float32 on the CPU: what a
        calibrated threshold is keyed by (scores differ between these)."""
        dtype = str(self.dtype).removeprefix("torch.")
        if (self.weights, dtype, self.device.type) == ("float32", "float32", "cpu"):
            return self.name
        return f"{self.name}[{self.weights},{dtype},{self.device.type}]"

    @property
    def cache_namespace(self) -> tuple[str, str, str]:
        """The prefix cache's key of this model: the model object's identity (two wrappers of one model share
        prefixes, two models never do), its dtype and device (a model moved or cast gets entries of its own)."""
        with _STAMPS_LOCK:  # held by the table, not the model: a deep copy of the model is another model
            stamp = _MODEL_STAMPS.get(self.model)
            if stamp is None:
                stamp = _MODEL_STAMPS[self.model] = uuid.uuid4().hex
        return (stamp, str(self.dtype), str(self.device))

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's dense parameters (embeddings, norms; float32 unless loaded otherwise)."""
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return self.model.device

    def _install_capture(self, layer: int) -> None:
        modules = attention_modules(self.model)
        if not modules:
            self.attention_error = (
                f"Model {self.name!r} ({type(self.model).__name__}) has no attention modules that transformers' "
                "AttentionInterface dispatches, so its attention cannot be captured; use a trigger/query that needs "
                "no attention (e.g. --method flare) or a Llama/Qwen2/Mistral-family model."
            )
            return
        module = modules[layer]
        install(modules, module)
        self.captured_layer = module.layer_idx

    @property
    def supports_attention(self) -> bool:
        return self.attention_error is None

    def require_attention(self) -> None:
        if self.attention_error is not None:
            raise AttentionCaptureError(self.attention_error)

    # -- tokenizer helpers --------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        with self._tok_lock:
            return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        with self._tok_lock:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_text(self, context: Sequence[int], token_id: int) -> str:
        """Text that ``token_id`` adds after ``context`` (robust to byte-level pieces and leading spaces).

        A character split over several byte-level tokens is attributed to the token that completes it
        (the earlier pieces add ``""``), so the texts of consecutive tokens join to the decoded text."""
        window = list(context[-6:])
        decode = self._raw_decode
        with self._tok_lock:
            before, after = decode(window), decode([*window, token_id])
        # An incomplete UTF-8 sequence at the end decodes to U+FFFD; it is not text yet.
        before, after = before.rstrip("\ufffd"), after.rstrip("\ufffd")
        if after.startswith(before):
            return after[len(before) :]
        with self._tok_lock:
            return str(self.tokenizer.decode([token_id], skip_special_tokens=False))

    @functools.cached_property
    def _raw_decode(self) -> Callable[[list[int]], str]:
        """``tokenizer.decode(ids, skip_special_tokens=False)``, through the fast tokenizer's own backend where that
        is the same text (no clean-up of tokenization spaces configured): the per-token text of every session,
        without transformers' argument conversions (about half the Python cost of a greedy token)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        try:
            from transformers.tokenization_utils_tokenizers import TokenizersBackend

            plain = (type(self.tokenizer)._decode is TokenizersBackend._decode  # type: ignore[attr-defined]
                     and type(self.tokenizer).decode is TokenizersBackend.decode)
        except (ImportError, AttributeError):
            plain = False
        if plain and backend is not None and not getattr(self.tokenizer, "clean_up_tokenization_spaces", True):
            return lambda ids: str(backend.decode(ids, skip_special_tokens=False))
        return lambda ids: str(self.tokenizer.decode(ids, skip_special_tokens=False))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def chat_parts(self, user: str) -> tuple[str, str]:
        """The prompt text around ``user``: ``(before, after)`` so that ``before + user + after`` is the
        full prompt ending where the assistant's answer starts (chat template when the model has one)."""
        marker = "\uE000ACTIVE_RAG_USER\uE000"
        if self.has_chat_template:
            messages = []
            if self.system_prompt:
                messages.append({"role": "system", "content": self.system_prompt})
            messages.append({"role": "user", "content": marker})
            with self._tok_lock:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = (self.system_prompt + "\n\n" if self.system_prompt else "") + marker + "\nAnswer:"
        before, _, after = str(text).partition(marker)
        return before, after

    def prompt_ids(self, user: str) -> list[int]:
        before, after = self.chat_parts(user)
        with self._tok_lock:
            return list(self.tokenizer.encode(before + user + after, add_special_tokens=False))

    # -- generation ---------------------------------------------------------------------------------
    def session(self, ids: Sequence[int], *, capture_attention: bool = False) -> DecodingSession:
        if capture_attention:
            self.require_attention()
        return DecodingSession(self, list(ids), capture_attention=capture_attention)

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        max_new_tokens: int = 128,
        capture_attention: bool = True,
        stop: StopCondition | None = None,
        logits_processor: LogitsProcessor | None = None,
        chat: bool = True,
        temperature: float = 0.0,
    ) -> Iterator[TokenStep]:
        """Generate from a user message (wrapped in the chat template when ``chat``) or from token ids."""
        if isinstance(prompt, str):
            ids = self.prompt_ids(prompt) if chat else self.encode(prompt)
        else:
            ids = list(prompt)
        session = self.session(ids, capture_attention=capture_attention and self.supports_attention)
        yield from session.generate(max_new_tokens, stop=stop, logits_processor=logits_processor, temperature=temperature)

    def complete(self, prompt: str, *, max_new_tokens: int = 32, chat: bool = True, stop: StopCondition | None = None) -> str:
        """Plain greedy completion (no signals kept): used by routers and question generation."""
        steps = list(self.stream(prompt, max_new_tokens=max_new_tokens, capture_attention=False, chat=chat, stop=stop))
        return "".join(s.text for s in steps)

    def __repr__(self) -> str:
        return f"ActiveLM(name={self.name!r}, layers={getattr(self.model.config, 'num_hidden_layers', '?')}, captured_layer={self.captured_layer})"


__all__ = [
    "ActiveLM",
    "DecodingSession",
    "PromptUsage",
    "count_prompt_tokens",
    "CAPTURE_IMPLEMENTATION",
    "LogitsProcessor",
    "StopCondition",
]
