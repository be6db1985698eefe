"""``ActiveHFLLM``: the engine's local model (``ActiveLM``) as a LlamaIndex LLM with per-token logprobs."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    LogProb,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

from active_rag._aio import aiter_in_thread, run_in_thread
from active_rag.decoding.model import ActiveLM
from active_rag.stopping import StopFilter
from active_rag.types import TokenStep

__all__ = ["ActiveHFLLM"]

#: Per-call keyword arguments of complete/chat (and their stream/async variants).
CALL_KWARGS = frozenset({"max_new_tokens", "max_tokens", "temperature", "stop"})
_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _load(name: str, weights: str) -> ActiveLM:
    return ActiveLM.load(name, weights=weights)


def load_shared(name: str, weights: str = "auto") -> ActiveLM:
    """``ActiveLM.load(name, weights=weights)`` once per process, name and weights (thread-safe), shared by every
    LLM built from it."""
    from active_rag.models.weights import check_weights

    with _LOAD_LOCK:
        return _load(name, check_weights(weights))


def _logprob(step: TokenStep, text: str | None = None) -> LogProb:
    token = step.text if text is None else text
    return LogProb(token=token, logprob=step.logprob, bytes=list(token.encode("utf-8")))


class ActiveHFLLM(CustomLLM):
    """A LlamaIndex LLM over a local ``ActiveLM``: greedy (or sampled) decoding with logprobs.

    Setup: ``pip install -e ".[llamaindex]"`` and a local model (``active-rag models``).

    Instantiate, from a loaded model or by name (loaded on first use, once per process and name)::

        llm = ActiveHFLLM(ActiveLM.load("smollm2"), max_new_tokens=64)
        llm = ActiveHFLLM.from_name("smollm2", stop=["\n\n"])      # or ActiveHFLLM(model_name="smollm2")

    - ``complete(prompt)`` wraps the prompt as a user message in the tokenizer's chat template (after
      ``completion_to_prompt``; with ``system_prompt`` as the system message when set);
      ``complete(prompt, formatted=True)`` or ``use_chat_template=False`` feeds the text as is.
    - ``chat(messages)`` renders the messages with the tokenizer's chat template (``messages_to_prompt``
      when the tokenizer has none).
    - ``CompletionResponse.logprobs`` / ``ChatResponse.logprobs``: one list per generated token holding
      one ``LogProb(token, logprob, bytes)``, the log-probability of the chosen token under the model's
      raw distribution (the engine's ``TokenStep.logprob``; no alternatives are computed).
      ``additional_kwargs`` holds ``token_ids`` and ``entropies`` (nats) per token.
    - ``stream_complete`` / ``stream_chat`` yield each token as it is generated: ``delta`` is the new
      text, ``text`` the text so far, ``logprobs`` the new token's.
    - Stop sequences (``stop`` field, or ``stop=[...]`` per call): generation ends at the first stop
      sequence, which is cut from the output with everything after it (a stop sequence spanning several
      tokens is held back while streaming, never streamed and then taken back).
    - Async methods run the model in a worker thread, so the event loop stays free.

    Per-call keyword arguments: ``max_new_tokens`` (or ``max_tokens``), ``temperature``, ``stop``; any other
    raises ``TypeError`` (so does an unknown constructor argument), as ``ChatActiveHF`` does.
    """

    model_name: str = Field(default="smollm2", description="Registry name, GGUF file or model folder for ActiveLM.load (when no model is given).")
    max_new_tokens: int = Field(default=256, gt=0, description="Tokens to generate at most per call.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy decoding.")
    stop: list[str] | None = Field(default=None, description="Stop sequences: the output ends before the first one.")
    use_chat_template: bool = Field(default=True, description="Wrap complete() prompts in the chat template.")
    weights: str = Field(default="auto", description="How a model loaded from model_name stores its linear layers: auto (mixed on the CPU), float32, int8, int4 or mixed.")

    _lm: ActiveLM | None = PrivateAttr(default=None)

    def __init__(self, lm: ActiveLM | None = None, **kwargs: Any) -> None:
        if lm is not None and not isinstance(lm, ActiveLM):
            raise TypeError(
                f"ActiveHFLLM needs an active_rag.ActiveLM (e.g. ActiveLM.load('smollm2')) or model_name=..., got {type(lm).__name__}."
            )
        unknown = sorted(set(kwargs) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"ActiveHFLLM got unexpected keyword argument(s) {unknown}.")
        if lm is not None and "model_name" not in kwargs:
            kwargs["model_name"] = lm.name
        if "weights" in kwargs:
            from active_rag.models.weights import check_weights

            kwargs["weights"] = check_weights(kwargs["weights"])  # InvalidOptionError for a bad value
        super().__init__(**kwargs)
        self._lm = lm

    @classmethod
    def from_name(cls, model_name: str, **kwargs: Any) -> ActiveHFLLM:
        """An LLM over ``ActiveLM.load(model_name)`` (a registry name such as ``"smollm2"``, a GGUF file or a
        model folder), loaded on first use and shared by every LLM of that name in the process."""
        return cls(model_name=model_name, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "ActiveHFLLM"

    @property
    def lm(self) -> ActiveLM:
        """The :class:`active_rag.ActiveLM` (loaded from ``model_name`` on first use when none was given)."""
        if self._lm is None:
            self._lm = load_shared(self.model_name, self.weights)
        return self._lm

    @property
    def metadata(self) -> LLMMetadata:
        lm = self.lm
        return LLMMetadata(
            context_window=lm.max_context,
            num_output=self.max_new_tokens,
            is_chat_model=lm.has_chat_template,
            model_name=lm.name,
        )

    # -- prompt building --------------------------------------------------------------------------
    def _chat_ids(self, messages: Sequence[ChatMessage]) -> list[int] | str:
        """Token ids of the messages in the chat template (or the ``messages_to_prompt`` text without one)."""
        lm = self.lm
        msgs = list(messages)
        if self.system_prompt and not any(m.role == MessageRole.SYSTEM for m in msgs):
            msgs.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt))
        if not lm.has_chat_template:
            return self.messages_to_prompt(msgs)
        rendered = [{"role": m.role.value, "content": m.content or ""} for m in msgs]
        text = lm.tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=True)
        return lm.encode(str(text))

    def _completion_input(self, prompt: str, formatted: bool) -> tuple[list[int] | str, bool]:
        """``(prompt or ids, wrap_in_chat_template)`` for ``ActiveLM.stream``."""
        if formatted or not self.use_chat_template:
            return (prompt if formatted else self.completion_to_prompt(prompt)), False
        prompt = self.completion_to_prompt(prompt)
        if self.system_prompt and self.lm.has_chat_template:
            return self._chat_ids([ChatMessage(role=MessageRole.USER, content=prompt)]), False
        return prompt, True

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The per-call generation options (checked before anything runs)."""
        unknown = sorted(set(kwargs) - CALL_KWARGS)
        if unknown:
            raise TypeError(f"ActiveHFLLM got unexpected keyword argument(s) {unknown}.")
        stops = kwargs["stop"] if kwargs.get("stop") is not None else self.stop
        return {
            "max_new_tokens": int(kwargs.get("max_new_tokens", kwargs.get("max_tokens", self.max_new_tokens))),
            "temperature": float(kwargs.get("temperature", self.temperature)),
            "stop": [stops] if isinstance(stops, str) else list(stops or []),
        }

    def _pieces(self, source: list[int] | str, chat: bool, options: dict[str, Any]) -> Iterator[tuple[str, TokenStep]]:
        """``(text, step)`` per released piece of output; the text is cut before the first stop sequence."""
        filt = StopFilter(options["stop"])
        steps = self.lm.stream(
            source, max_new_tokens=options["max_new_tokens"], capture_attention=False, chat=chat, temperature=options["temperature"]
        )
        try:
            for step in steps:
                yield from filt.push(step)
                if filt.stopped:
                    return
            yield from filt.flush()
        finally:
            steps.close()

    # -- completion -------------------------------------------------------------------------------
    def _stream_completion(self, source: list[int] | str, chat: bool, options: dict[str, Any]) -> CompletionResponseGen:
        text = ""
        for piece, step in self._pieces(source, chat, options):
            text += piece
            yield CompletionResponse(
                text=text,
                delta=piece,
                logprobs=[[_logprob(step, piece)]],
                additional_kwargs={"token_id": step.id, "entropy": step.entropy},
            )

    def _completion(self, source: list[int] | str, chat: bool, options: dict[str, Any]) -> CompletionResponse:
        pieces = list(self._pieces(source, chat, options))
        return CompletionResponse(
            text="".join(text for text, _ in pieces),
            logprobs=[[_logprob(step, text)] for text, step in pieces],
            additional_kwargs={"token_ids": [s.id for _, s in pieces], "entropies": [s.entropy for _, s in pieces]},
        )

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        options = self._options(kwargs)
        return self._completion(*self._completion_input(prompt, formatted), options)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        options = self._options(kwargs)
        return self._stream_completion(*self._completion_input(prompt, formatted), options)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        options = self._options(kwargs)
        return await run_in_thread(self._completion, *self._completion_input(prompt, formatted), options)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        options = self._options(kwargs)
        gen = self._stream_completion(*self._completion_input(prompt, formatted), options)
        return aiter_in_thread(lambda: gen)

    # -- chat -------------------------------------------------------------------------------------
    @staticmethod
    def _to_chat(response: CompletionResponse) -> ChatResponse:
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=response.text),
            delta=response.delta,
            logprobs=response.logprobs,
            additional_kwargs=response.additional_kwargs,
        )

    def _stream_chat(self, source: list[int] | str, options: dict[str, Any]) -> ChatResponseGen:
        for response in self._stream_completion(source, False, options):
            yield self._to_chat(response)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        options = self._options(kwargs)
        return self._to_chat(self._completion(self._chat_ids(messages), False, options))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        options = self._options(kwargs)
        return self._stream_chat(self._chat_ids(messages), options)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        options = self._options(kwargs)
        source = self._chat_ids(messages)
        return self._to_chat(await run_in_thread(self._completion, source, False, options))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        options = self._options(kwargs)
        gen = self._stream_chat(self._chat_ids(messages), options)
        return aiter_in_thread(lambda: gen)
