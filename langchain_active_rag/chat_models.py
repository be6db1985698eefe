"""``ChatActiveHF``: a LangChain chat model over the engine's :class:`active_rag.ActiveLM`.

Messages are rendered with the tokenizer's chat template (``apply_chat_template``; consecutive
messages of the same role are merged), then decoded with one KV-cached
:meth:`ActiveLM.session(...).generate <active_rag.DecodingSession.generate>` pass. With
``logprobs=True`` (field or ``.bind(logprobs=True)``) the response carries OpenAI-shaped log-probabilities
in ``response_metadata["logprobs"]``: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": []}]}``
(``top_logprobs`` is always empty: the engine keeps the chosen token's log-probability only).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ChatMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, model_validator

from active_rag import ActiveLM, TokenStep

_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _load(name: str) -> ActiveLM:
    return ActiveLM.load(name)


def load_active_lm(name: str) -> ActiveLM:
    """``ActiveLM.load(name)``, once per process and name (thread-safe)."""
    with _LOAD_LOCK:
        return _load(name)


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


def to_chat_turns(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """``[{"role", "content"}]`` for a chat template; consecutive turns of one role are merged."""
    turns: list[dict[str, str]] = []
    for m in messages:
        role = m.role if isinstance(m, ChatMessage) else _ROLES.get(m.type, "user")
        content = m.text if isinstance(m.text, str) else str(m.content)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    return turns


def logprob_entry(step: TokenStep, text: str | None = None) -> dict[str, Any]:
    """One OpenAI-style ``logprobs.content`` item."""
    token = step.text if text is None else text
    return {"token": token, "logprob": step.logprob, "bytes": list(token.encode("utf-8")), "top_logprobs": []}


class _StopFilter:
    """Holds back text that may begin a stop sequence; cuts the output before the first stop sequence."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""
        self.pending: list[tuple[TokenStep, int, int]] = []  # (step, start, end) not yet released
        self.stopped = False

    def push(self, step: TokenStep) -> list[tuple[str, TokenStep]]:
        start = len(self.text)
        self.text += step.text
        self.pending.append((step, start, len(self.text)))
        if not self.stops:
            return self._release(len(self.text))
        hits = [i for i in (self.text.find(s, max(0, start - len(s))) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            return self._release(min(hits), partial=True)
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.text)), hold, -1):
                if self.text.endswith(s[:n]):
                    hold = n
                    break
        return self._release(len(self.text) - hold)

    def flush(self) -> list[tuple[str, TokenStep]]:
        return self._release(len(self.text))

    def _release(self, limit: int, partial: bool = False) -> list[tuple[str, TokenStep]]:
        out: list[tuple[str, TokenStep]] = []
        keep: list[tuple[TokenStep, int, int]] = []
        for step, start, end in self.pending:
            if end <= limit:
                out.append((self.text[start:end], step))
            elif partial and start < limit:
                out.append((self.text[start:limit], step))
            elif not partial:
                keep.append((step, start, end))
        self.pending = keep
        return out


class ChatActiveHF(BaseChatModel):
    """A local Hugging Face chat model (through :class:`active_rag.ActiveLM`) as a LangChain chat model.

    >>> chat = ChatActiveHF(model_name="smollm2", max_tokens=32)      # loads lazily  # doctest: +SKIP
    >>> chat.bind(logprobs=True).invoke("Hi").response_metadata["logprobs"]["content"][0]  # doctest: +SKIP
    {'token': 'Hello', 'logprob': -0.41, 'bytes': [72, 101, 108, 108, 111], 'top_logprobs': []}

    Build it from a registry name / local path (``model_name``, loaded on first use with
    ``ActiveLM.load`` and shared per process) or from a loaded model (``lm=``, never serialized).
    """

    model_name: str = Field(default="smollm2", alias="model")
    """Registry name, GGUF file or local folder for ``ActiveLM.load`` (ignored when ``lm`` is given)."""
    lm: ActiveLM | None = Field(default=None, exclude=True)
    """An already loaded model; takes precedence over ``model_name``."""
    max_tokens: int = 256
    temperature: float = 0.0
    """0 decodes greedily; above 0 samples."""
    stop: list[str] | None = None
    logprobs: bool = False
    seed: int | None = None
    """Seed for sampling (``temperature > 0``)."""
    streaming: bool = False
    """Accepted for compatibility; ``stream()`` always streams token by token."""

    model_config = ConfigDict(populate_by_name=True, arbitrary_types_allowed=True, protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _name_from_lm(cls, values: Any) -> Any:
        if isinstance(values, dict) and isinstance(values.get("lm"), ActiveLM):
            if "model_name" not in values and "model" not in values:
                values = {**values, "model_name": values["lm"].name}
        return values

    # -- LangChain metadata ---------------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "active-hf"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "logprobs": self.logprobs,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "active_rag"
        if "ls_stop" not in params and (stop or self.stop):
            params["ls_stop"] = stop or self.stop
        return params

    # -- model ----------------------------------------------------------------------------------------
    @property
    def active_lm(self) -> ActiveLM:
        """The :class:`active_rag.ActiveLM` (loaded on first use when built from ``model_name``)."""
        if self.lm is None:
            self.lm = load_active_lm(self.model_name)
        return self.lm

    def _lm_for(self, model: str | None) -> ActiveLM:
        if model is None or model == self.model_name or (self.lm is not None and model == self.lm.name):
            return self.active_lm
        return load_active_lm(model)

    def prompt_ids(self, messages: Sequence[BaseMessage], lm: ActiveLM | None = None) -> list[int]:
        """Token ids of the conversation, ending where the assistant's answer starts."""
        lm = lm or self.active_lm
        turns = to_chat_turns(messages)
        if lm.has_chat_template:
            text = str(lm.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True))
        else:
            labels = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
            text = "".join(f"{labels.get(t['role'], t['role'].title())}: {t['content']}\n\n" for t in turns) + "Assistant:"
        ids = lm.encode(text)
        if not ids:
            raise ValueError("The conversation is empty: pass at least one message with some text.")
        return ids

    def _pieces(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> Iterator[tuple[str, TokenStep | None, dict[str, Any]]]:
        """Yield ``(text, step, {})`` per released piece of output, then ``("", None, info)`` once."""
        unknown = set(kwargs) - {"max_tokens", "temperature", "logprobs", "seed", "model", "stop"}
        if unknown:
            raise TypeError(f"ChatActiveHF got unexpected keyword argument(s) {sorted(unknown)}.")
        lm = self._lm_for(kwargs.get("model"))
        max_tokens = int(kwargs.get("max_tokens") or self.max_tokens)
        temperature = float(kwargs.get("temperature", self.temperature) or 0.0)
        seed = kwargs.get("seed", self.seed)
        stops = stop if stop is not None else (kwargs.get("stop") or self.stop or [])
        ids = self.prompt_ids(messages, lm)
        generator = torch.Generator().manual_seed(int(seed)) if temperature > 0 and seed is not None else None
        session = lm.session(ids)
        filt = _StopFilter(stops)
        generated = 0
        for step in session.generate(max_tokens, temperature=temperature, generator=generator):
            generated += 1
            for text, s in filt.push(step):
                yield text, s, {}
            if filt.stopped:
                break
        if not filt.stopped:
            for text, s in filt.flush():
                yield text, s, {}
        finish = "stop" if filt.stopped or session.finished else "length"
        yield "", None, {"finish_reason": finish, "input_tokens": len(ids), "output_tokens": generated, "model_name": lm.name}

    def _wants_logprobs(self, kwargs: dict[str, Any]) -> bool:
        return bool(kwargs.get("logprobs", self.logprobs))

    @staticmethod
    def _usage(info: dict[str, Any]) -> UsageMetadata:
        return UsageMetadata(
            input_tokens=info["input_tokens"],
            output_tokens=info["output_tokens"],
            total_tokens=info["input_tokens"] + info["output_tokens"],
        )

    # -- BaseChatModel --------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        want_logprobs = self._wants_logprobs(kwargs)
        texts: list[str] = []
        entries: list[dict[str, Any]] = []
        info: dict[str, Any] = {}
        for text, step, extra in self._pieces(messages, stop, kwargs):
            if step is None:
                info = extra
                continue
            texts.append(text)
            if want_logprobs:
                entries.append(logprob_entry(step, text))
        metadata: dict[str, Any] = {"model_name": info["model_name"], "finish_reason": info["finish_reason"]}
        if want_logprobs:
            metadata["logprobs"] = {"content": entries}
        message = AIMessage(content="".join(texts), response_metadata=metadata, usage_metadata=self._usage(info))
        return ChatResult(generations=[ChatGeneration(message=message, generation_info={"finish_reason": info["finish_reason"]})])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        want_logprobs = self._wants_logprobs(kwargs)
        for text, step, info in self._pieces(messages, stop, kwargs):
            if step is None:
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content="",
                        response_metadata={"model_name": info["model_name"], "finish_reason": info["finish_reason"]},
                        usage_metadata=self._usage(info),
                        chunk_position="last",
                    ),
                    generation_info={"finish_reason": info["finish_reason"]},
                )
                return
            metadata = {"logprobs": {"content": [logprob_entry(step, text)]}} if want_logprobs else {}
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text, response_metadata=metadata))
            if run_manager is not None:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk


__all__ = ["ChatActiveHF", "load_active_lm", "to_chat_turns", "logprob_entry"]
