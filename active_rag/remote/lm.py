"""``RemoteLM``: a model behind an OpenAI-compatible endpoint (llama.cpp's server, llama-cpp-python, vLLM, Ollama)
with the engine-facing interface of :class:`~active_rag.decoding.model.ActiveLM`.

The engine (:class:`~active_rag.engine.loop.ActiveRAG`) opens a session on prompt ids, generates a segment token by
token, stops it with its own rule (a sentence end, a ``[Search(...)]`` tag, the answer-complete guard), crops,
extends and reopens. A :class:`RemoteSession` does the same through the server:

- ``generate`` sends ``decode(ids)`` (completions) or the chat messages it holds (chat completions) with
  ``logprobs`` / ``top_logprobs``, ``stream: true`` and ``max_tokens``, and yields each token as it arrives with the
  server's log-probability and an entropy approximated from the top-k (:func:`~active_rag.remote.parse.topk_entropy`,
  a lower bound). When the engine's stop rule fires, the connection is closed and the server stops generating.
- ``crop`` / ``extend`` / ``commit`` only edit the id list: the next request carries the new text, and the
  server's own prompt cache (llama.cpp keeps the longest common prefix) avoids recomputing the shared part.
- FLARE-instruct's bias on "[" (App. A) becomes the request's ``logit_bias`` (the forbidding after a search
  ends after ``forbid_tokens`` tokens: that many tokens are requested with the ban, then the rest with the boost).

What needs the model's attention cannot run here: DRAGIN, the RIND trigger and the QFS / attention queries raise
:class:`~active_rag.errors.NeedsLocalModelError` when the engine is built. Every other method (wo-RAG, SR-RAG,
FL-RAG, FS-RAG, FLARE-direct, FLARE-instruct, self-ask, the TA-ARE and vanilla routers) needs only the
token probabilities. Concurrency: every session is independent, so many questions in flight
(:meth:`ActiveRAG.run_batch`, ``active-rag eval --batch-size``) are as many requests in flight.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._aio import check_cancelled
from ..errors import EndpointError, EndpointHTTPError, NeedsLocalModelError
from ..decoding.model import StopCondition
from ..decoding.prompt_usage import current_usage
from .http import EndpointClient
from .parse import Piece, parse_choice, reply_choice, utf8_decoder
from .transport import DEFAULT_MAX_REPLY_BYTES
from .vocab import PieceVocab, TokenizerVocab
from ..types import TokenStep

__all__ = ["ATTENTION_REFUSAL", "RemoteLM", "RemoteSession", "load_tokenizer"]

ATTENTION_REFUSAL = (
    "This method reads the model's attention (DRAGIN's RIND trigger, the QFS / attention queries), which an "
    "OpenAI-compatible endpoint does not return: it needs attention and a local model, so run it without --endpoint "
    "(ActiveLM.load(...)), or pick a method that needs token probabilities only (wo-rag, sr-rag, fl-rag, fs-rag, "
    "flare, flare-instruct, self-ask)."
)

USER_MARK = "\ue001"
"""Opens a user turn in the prompt text of a chat-API model (split into chat messages before sending)."""
ASSISTANT_MARK = "\ue002"
"""Opens the assistant's turn: what follows it in the last turn is the answer so far."""

DEFAULT_MAX_CONTEXT = 4096


@dataclass
class _Finish:
    reason: str


def load_tokenizer(name: str) -> tuple[Any, int | None]:
    """The Hugging Face tokenizer of a registry model, a model folder, a ``.gguf`` file or a cached hub id (no
    weights are loaded), and the model's context length from its ``config.json`` when there is one."""
    from transformers import AutoTokenizer

    from ..models.loading import _ensure_converted_file, _ensure_converted_registry
    from ..models.model_specs import MODELS

    path = Path(name).expanduser()
    if name in MODELS:
        folder: Path | None = _ensure_converted_registry(MODELS[name])
    elif path.suffix == ".gguf" and path.is_file():
        folder = _ensure_converted_file(path)
    elif path.is_dir():
        folder = path
    else:
        folder = None
    tokenizer = AutoTokenizer.from_pretrained(str(folder) if folder is not None else name, local_files_only=True)
    context = None
    if folder is not None and (folder / "config.json").is_file():
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        context = config.get("max_position_embeddings")
    return tokenizer, int(context) if context else None


class RemoteSession:
    """One decoding state over ``ids`` against the endpoint: the same calls as
    :class:`~active_rag.decoding.model.DecodingSession` (no attention rows: ``max_attention`` stays empty)."""

    def __init__(self, lm: RemoteLM, ids: list[int]) -> None:
        if not ids:
            raise ValueError("A decoding session needs at least one prompt token.")
        self.lm = lm
        self.ids = ids
        self.capture_attention = False
        self.max_attention: list[float] = []
        self.finished = False
        self.forward_passes = 0  # requests sent
        self.cached_tokens = 0
        self.prefilled_tokens = len(ids)  # the server's own prompt cache is not visible from here
        usage = current_usage()
        if usage is not None:
            usage.prefilled += self.prefilled_tokens
            usage.sessions += 1

    def __len__(self) -> int:
        return len(self.ids)

    def crop(self, length: int) -> None:
        """Forget every token from ``length`` on."""
        if not 1 <= length <= len(self.ids):
            raise ValueError(f"crop length must be in [1, {len(self.ids)}], got {length}")
        del self.ids[length:]
        self.finished = False

    def commit(self) -> None:
        """Nothing to release: no attention rows are kept."""

    def extend(self, new_ids: Sequence[int]) -> None:
        """Append tokens (a forced answer phrase) to the sequence."""
        self.ids.extend(int(i) for i in new_ids)
        self.finished = False

    def generate(
        self,
        max_new_tokens: int,
        *,
        stop: StopCondition | None = None,
        logits_processor: Any = None,
        temperature: float = 0.0,
        generator: Any = None,
    ) -> Iterator[TokenStep]:
        """Yield up to ``max_new_tokens`` tokens from the server (greedy unless ``temperature > 0``).

        Stops on the server's end of generation (``finished`` becomes ``True``) or when ``stop`` says so (the
        stream is closed). Log-probabilities are the server's; entropy is approximated from its top-k."""
        lm = self.lm
        steps: list[TokenStep] = []
        while len(steps) < max_new_tokens and not self.finished:
            bias, budget = lm._bias(logits_processor)
            want = max_new_tokens - len(steps) if budget is None else min(budget, max_new_tokens - len(steps))
            got = 0
            self.forward_passes += 1
            pieces = lm._pieces(self.ids, want, bias, temperature)
            try:
                for item in pieces:
                    check_cancelled()
                    if isinstance(item, _Finish):
                        if item.reason != "length":
                            self.finished = True
                        break
                    token_id = lm.vocab.intern(item.text)
                    step = TokenStep(id=token_id, text=item.text, logprob=item.logprob, entropy=item.entropy,
                                     position=len(self.ids))
                    self.ids.append(token_id)
                    steps.append(step)
                    got += 1
                    if logits_processor is not None:
                        lm._consumed(logits_processor)
                    yield step
                    if stop is not None and stop(steps):
                        return
                    if got >= want:
                        break
            finally:
                pieces.close()
            if got == 0 and not self.finished:
                self.finished = True  # the server ended without a reason and without a token
                return


class RemoteLM:
    """A model behind an OpenAI-compatible endpoint, usable wherever the engine takes an ``ActiveLM``.

    >>> lm = RemoteLM("http://127.0.0.1:8080/v1", model="qwen", tokenizer="qwen2.5-coder-0.5b")  # doctest: +SKIP
    >>> ActiveRAG.from_preset("flare", lm, BM25Index.demo()).run("Who wrote Hamlet?")  # doctest: +SKIP

    Args:
        base_url: the server's OpenAI base URL (``http://host:port/v1``); ``None``: ``$OPENAI_BASE_URL``.
        model: the model name the server knows; ``None``: the first of ``GET /models`` (one request now).
        api_key: ``None``: ``$OPENAI_API_KEY`` (a local server needs none).
        api: ``"completions"`` (default; the prompt text as the engine lays it out) or ``"chat"`` (the prompt as chat
            messages, the server applies its chat template; the answer so far is sent as a final assistant
            message to continue, ``continue_final_message``, which vLLM and llama.cpp's server honour).
        tokenizer: the same model's Hugging Face tokenizer, or a registry name / folder / ``.gguf`` to load it from
            (no weights are loaded): prompt ids, lengths and chat template then match the local engine's. ``None``:
            text pieces (:class:`~active_rag.remote.vocab.PieceVocab`) and a plain ``"...\\nAnswer:"`` prompt.
        name: the name thresholds and the default prompt mode are looked up by (default: the tokenizer's registry
            name, else ``model``).
        top_logprobs: alternatives per token the server returns (the entropy's ``k``; OpenAI allows 5 on
            completions, 20 on chat).
        timeout, retries, backoff, deadline, max_reply_bytes: see :class:`~active_rag.remote.http.EndpointClient`
            (``deadline``: seconds one request may take in all, default 10 x ``timeout``; ``max_reply_bytes``: the
            cap on one reply, default 64 MiB).
        max_context: the context length prompts are fitted to (default: the tokenizer's model config, else 4096).
        stop: stop sequences sent with every request (the server ends the segment there, ``finished``).
        stream: stream tokens (default); ``False``: one JSON reply per request, the whole ``max_tokens``.
        extra_body: more fields for every request (e.g. ``{"top_k": 1}`` or vLLM's sampling options).
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        api: str = "completions",
        tokenizer: Any = None,
        name: str | None = None,
        top_logprobs: int = 5,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        deadline: float | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        max_context: int | None = None,
        system_prompt: str | None = None,
        stop: Sequence[str] | None = None,
        stream: bool = True,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        from ..errors import InvalidOptionError
        from ..validation import check_int

        if api not in ("completions", "chat"):
            raise InvalidOptionError(f"api must be 'completions' or 'chat', got {api!r}.")
        self.api = api
        self.client = EndpointClient(base_url, api_key, timeout=timeout, retries=retries, backoff=backoff,
                                     deadline=deadline, max_reply_bytes=max_reply_bytes)
        self.top_logprobs = check_int("top_logprobs", top_logprobs, minimum=1, maximum=20,
                                      hint="It is the number of alternatives per token the server returns, e.g. 5")
        context = None
        tokenizer_name = None
        if isinstance(tokenizer, (str, Path)):
            tokenizer_name = str(tokenizer)
            tokenizer, context = load_tokenizer(tokenizer_name)
        self.vocab: PieceVocab = TokenizerVocab(tokenizer) if tokenizer is not None else PieceVocab()
        self.model_id = model if model else self._first_model()
        self.name = name or tokenizer_name or self.model_id
        self.system_prompt = system_prompt
        self.max_context = check_int("max_context", max_context if max_context is not None else (context or DEFAULT_MAX_CONTEXT),
                                     minimum=16, hint="It is the endpoint model's context length in tokens, e.g. 4096")
        self.stop_sequences = [str(s) for s in stop or []]
        self.stream_replies = bool(stream)
        self.extra_body = dict(extra_body or {})
        self.eos_token_ids: frozenset[int] = frozenset()
        self.attention_error: str | None = ATTENTION_REFUSAL
        self.captured_layer: int | None = None
        self.scheduler = None
        self.prefix_cache = None
        self.model_lock = threading.RLock()
        self._tok_lock = threading.Lock()
        self._bracket: list[int] | None = None
        self._warned: set[str] = set()

    # -- identity ------------------------------------------------------------------------------------
    def _first_model(self) -> str:
        try:
            data = self.client.get_json("models")
        except EndpointHTTPError:
            return "default"  # a server without GET /models: it serves one model whatever the name
        models = data.get("data") if isinstance(data, dict) else None
        if isinstance(models, list) and models and isinstance(models[0], dict) and models[0].get("id"):
            return str(models[0]["id"])
        return "default"

    @property
    def base_url(self) -> str:
        return self.client.base_url

    @property
    def tokenizer(self) -> Any:
        return self.vocab.tokenizer

    @property
    def weights(self) -> str:
        """``"endpoint"``: evaluation rows of a served model go to ``<model>-endpoint`` folders."""
        return "endpoint"

    @property
    def variant(self) -> str:
        return f"{self.name}[endpoint]"

    @property
    def supports_attention(self) -> bool:
        return False

    def require_attention(self) -> None:
        raise NeedsLocalModelError(ATTENTION_REFUSAL)

    def describe(self) -> dict[str, Any]:
        return {"endpoint": self.base_url, "model": self.model_id, "api": self.api, "name": self.name,
                "tokenizer": type(self.vocab.tokenizer).__name__ if self.vocab.tokenizer is not None else None,
                "top_logprobs": self.top_logprobs, "max_context": self.max_context}

    def __repr__(self) -> str:
        return f"RemoteLM({self.base_url!r}, model={self.model_id!r}, api={self.api!r}, name={self.name!r})"

    # -- tokens --------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.vocab.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, context: Sequence[int], token_id: int) -> str:
        """Text that ``token_id`` adds after ``context`` (a generated token: exactly the server's text)."""
        piece = self.vocab.piece(int(token_id))
        if piece is not None:
            return piece
        window = list(context[-6:])
        before = self.vocab.decode(window).rstrip("\ufffd")
        after = self.vocab.decode([*window, token_id]).rstrip("\ufffd")
        if after.startswith(before):
            return after[len(before):]
        return self.vocab.decode([token_id])

    @property
    def has_chat_template(self) -> bool:
        """A local chat template is applied only for the completions API (the chat API's server applies its own)."""
        return self.api == "completions" and bool(getattr(self.vocab.tokenizer, "chat_template", None))

    def chat_parts(self, user: str) -> tuple[str, str]:
        """``(before, after)`` around a user message, as :meth:`ActiveLM.chat_parts`: the tokenizer's chat template
        (completions API), turn marks that :meth:`_messages` splits into chat messages (chat API), or plain text."""
        if self.api == "chat":
            return USER_MARK, ASSISTANT_MARK
        if self.has_chat_template:
            marker = "\ue000ACTIVE_RAG_USER\ue000"
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages.append({"role": "user", "content": marker})
            with self._tok_lock:
                text = self.vocab.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            before, _, after = str(text).partition(marker)
            return before, after
        return (self.system_prompt + "\n\n" if self.system_prompt else ""), "\nAnswer:"

    def prompt_ids(self, user: str) -> list[int]:
        before, after = self.chat_parts(user)
        return self.encode(before + user + after)

    # -- requests ------------------------------------------------------------------------------------
    def _messages(self, text: str) -> tuple[list[dict[str, str]], str]:
        """Chat messages from a chat-API prompt text (turn marks, see :meth:`chat_parts`), and the answer so far."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        if USER_MARK not in text:
            head, _, answer = text.partition(ASSISTANT_MARK)
            messages.append({"role": "user", "content": head})
            return messages, answer
        head, *turns = text.split(USER_MARK)
        answer = ""
        for k, turn in enumerate(turns):
            user, _, assistant = turn.partition(ASSISTANT_MARK)
            messages.append({"role": "user", "content": (head + user) if k == 0 else user})
            if k < len(turns) - 1:
                messages.append({"role": "assistant", "content": assistant.strip()})
            else:
                answer = assistant
        return messages, answer

    def _body(self, ids: Sequence[int], max_tokens: int, bias: dict[str, float] | None, temperature: float) -> tuple[str, dict[str, Any]]:
        text = self.vocab.decode(ids, skip_special_tokens=False)
        body: dict[str, Any] = {"model": self.model_id, "max_tokens": int(max_tokens), "temperature": float(temperature)}
        if self.api == "chat":
            messages, answer = self._messages(text)
            if answer:
                messages.append({"role": "assistant", "content": answer})
                body.update(continue_final_message=True, add_generation_prompt=False)
            body.update(messages=messages, logprobs=True, top_logprobs=self.top_logprobs)
            path = "chat/completions"
        else:
            body.update(prompt=text, logprobs=self.top_logprobs)
            path = "completions"
        if self.stop_sequences:
            body["stop"] = list(self.stop_sequences)
        if bias:
            body["logit_bias"] = bias
        body.update(self.extra_body)
        return path, body

    def _pieces(self, ids: Sequence[int], max_tokens: int, bias: dict[str, float] | None, temperature: float) -> Iterator[Piece | _Finish]:
        """The tokens of one request, then a :class:`_Finish` with the server's finish reason."""
        path, body = self._body(ids, max_tokens, bias, temperature)
        where = f"{self.base_url}/{path}"
        events = self.client.post_stream(path, body) if self.stream_replies else iter([self.client.post_json(path, body)])
        decoder = utf8_decoder() if self.stream_replies else None  # one for the whole stream: no character cut
        try:
            for event in events:
                choice = reply_choice(event, where, streamed=self.stream_replies)
                if choice is None:  # an event without a choice (a usage report)
                    continue
                pieces, finish = parse_choice(choice, where, decoder)
                yield from pieces
                if finish:
                    yield _Finish(finish)
                    return
            yield _Finish("stop")
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    # -- FLARE-instruct's logit bias -----------------------------------------------------------------
    def _bias(self, processor: Any) -> tuple[dict[str, float] | None, int | None]:
        """``logit_bias`` for the next request from a logits processor, and for how many tokens it holds."""
        if processor is None:
            return None, None
        if not (hasattr(processor, "forbid_left") and hasattr(processor, "bias")):
            raise EndpointError(
                f"A logits processor ({type(processor).__name__}) cannot run on an endpoint, which takes only a "
                "logit_bias: use FLARE-instruct's bracket bias or none, or a local model.")
        ids = self._bracket_ids(processor)
        if not ids:
            return None, None
        if processor.forbid_left > 0:
            return {str(i): max(-100.0, float(processor.forbid_value)) for i in ids}, int(processor.forbid_left)
        return {str(i): float(processor.bias) for i in ids}, None

    @staticmethod
    def _consumed(processor: Any) -> None:
        if getattr(processor, "forbid_left", 0) > 0:
            processor.forbid_left -= 1

    def _bracket_ids(self, processor: Any) -> list[int]:
        """The server's ids of the tokens that start with "[": from the local tokenizer (the same model's), else the
        server's tokenize route (llama.cpp, llama-cpp-python, vLLM: only "[" and " ["), else none (warned once)."""
        if self._bracket is None:
            if self.vocab.tokenizer is not None and hasattr(processor, "bracket_ids"):
                self._bracket = [int(i) for i in processor.bracket_ids().tolist()]
            else:
                self._bracket = self._server_tokens(["[", " ["])
            if not self._bracket:
                self._warn("bracket", "FLARE-instruct's logit bias on '[' is not applied: no local tokenizer was given "
                           "(tokenizer=..., or --model NAME with --endpoint) and the server has no tokenize route.")
        return self._bracket

    def _server_tokens(self, texts: Sequence[str]) -> list[int]:
        root = self.base_url.removesuffix("/v1")
        probe = EndpointClient(self.base_url, self.client.api_key, timeout=self.client.timeout, retries=0,
                               deadline=self.client.deadline, max_reply_bytes=self.client.max_reply_bytes)
        ids: set[int] = set()
        for text in texts:
            for path, body in ((f"{root}/extras/tokenize", {"input": text}), (f"{root}/tokenize", {"content": text}),
                               (f"{root}/tokenize", {"model": self.model_id, "prompt": text})):
                try:
                    data = probe.post_json(path, body)
                except EndpointError:
                    continue
                tokens = data.get("tokens") if isinstance(data, dict) else None
                if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
                    ids.add(tokens[-1])
                    break
        return sorted(ids)

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    # -- generation ----------------------------------------------------------------------------------
    def session(self, ids: Sequence[int], *, capture_attention: bool = False) -> RemoteSession:
        if capture_attention:
            self.require_attention()
        return RemoteSession(self, list(ids))

    def stream(
        self, prompt: str | Sequence[int], *, max_new_tokens: int = 128, capture_attention: bool = False,
        stop: StopCondition | None = None, logits_processor: Any = None, chat: bool = True, temperature: float = 0.0,
    ) -> Iterator[TokenStep]:
        """Generate from a user message (in the chat layout when ``chat``) or from token ids."""
        if isinstance(prompt, str):
            ids = self.prompt_ids(prompt) if chat else self.encode(prompt)
        else:
            ids = list(prompt)
        yield from self.session(ids).generate(max_new_tokens, stop=stop, logits_processor=logits_processor, temperature=temperature)

    def complete(self, prompt: str, *, max_new_tokens: int = 32, chat: bool = True, stop: StopCondition | None = None) -> str:
        """Plain greedy completion (routers, question generation)."""
        return "".join(s.text for s in self.stream(prompt, max_new_tokens=max_new_tokens, chat=chat, stop=stop))
