"""``ActiveHFLLM``: the engine's local model (``ActiveLM``) as a LlamaIndex LLM with per-token logprobs."""

from __future__ import annotations

import asyncio
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

from active_rag.model import ActiveLM
from active_rag.types import TokenStep

__all__ = ["ActiveHFLLM"]

_DONE = object()


def _logprob(step: TokenStep) -> LogProb:
    return LogProb(token=step.text, logprob=step.logprob, bytes=list(step.text.encode("utf-8")))


class ActiveHFLLM(CustomLLM):
    """A LlamaIndex LLM over a local ``ActiveLM``: greedy (or sampled) decoding with logprobs.

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
    - Async methods run the model in a worker thread, so the event loop stays free.

    Per-call ``max_new_tokens`` (or ``max_tokens``) and ``temperature`` keyword arguments override the fields.
    """

    max_new_tokens: int = Field(default=256, gt=0, description="Tokens to generate at most per call.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy decoding.")
    use_chat_template: bool = Field(default=True, description="Wrap complete() prompts in the chat template.")

    _lm: ActiveLM = PrivateAttr()

    def __init__(self, lm: ActiveLM, **kwargs: Any) -> None:
        if not isinstance(lm, ActiveLM):
            raise TypeError(f"ActiveHFLLM needs an active_rag.ActiveLM (e.g. ActiveLM.load('smollm2')), got {type(lm).__name__}.")
        super().__init__(**kwargs)
        self._lm = lm

    @classmethod
    def class_name(cls) -> str:
        return "ActiveHFLLM"

    @property
    def lm(self) -> ActiveLM:
        return self._lm

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self._lm.max_context,
            num_output=self.max_new_tokens,
            is_chat_model=self._lm.has_chat_template,
            model_name=self._lm.name,
        )

    # -- prompt building --------------------------------------------------------------------------
    def _chat_ids(self, messages: Sequence[ChatMessage]) -> list[int] | str:
        """Token ids of the messages in the chat template (or the ``messages_to_prompt`` text without one)."""
        msgs = list(messages)
        if self.system_prompt and not any(m.role == MessageRole.SYSTEM for m in msgs):
            msgs.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt))
        if not self._lm.has_chat_template:
            return self.messages_to_prompt(msgs)
        rendered = [{"role": m.role.value, "content": m.content or ""} for m in msgs]
        text = self._lm.tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=True)
        return self._lm.encode(str(text))

    def _completion_input(self, prompt: str, formatted: bool) -> tuple[list[int] | str, bool]:
        """``(prompt or ids, wrap_in_chat_template)`` for ``ActiveLM.stream``."""
        if formatted or not self.use_chat_template:
            return (prompt if formatted else self.completion_to_prompt(prompt)), False
        prompt = self.completion_to_prompt(prompt)
        if self.system_prompt and self._lm.has_chat_template:
            return self._chat_ids([ChatMessage(role=MessageRole.USER, content=prompt)]), False
        return prompt, True

    def _steps(self, source: list[int] | str, chat: bool, kwargs: dict[str, Any]) -> Iterator[TokenStep]:
        max_new = int(kwargs.get("max_new_tokens", kwargs.get("max_tokens", self.max_new_tokens)))
        temperature = float(kwargs.get("temperature", self.temperature))
        return self._lm.stream(source, max_new_tokens=max_new, capture_attention=False, chat=chat, temperature=temperature)

    # -- completion -------------------------------------------------------------------------------
    def _stream_completion(self, source: list[int] | str, chat: bool, kwargs: dict[str, Any]) -> CompletionResponseGen:
        text = ""
        for step in self._steps(source, chat, kwargs):
            text += step.text
            yield CompletionResponse(
                text=text,
                delta=step.text,
                logprobs=[[_logprob(step)]],
                additional_kwargs={"token_id": step.id, "entropy": step.entropy},
            )

    def _completion(self, source: list[int] | str, chat: bool, kwargs: dict[str, Any]) -> CompletionResponse:
        steps = list(self._steps(source, chat, kwargs))
        return CompletionResponse(
            text="".join(s.text for s in steps),
            logprobs=[[_logprob(s)] for s in steps],
            additional_kwargs={"token_ids": [s.id for s in steps], "entropies": [s.entropy for s in steps]},
        )

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        source, chat = self._completion_input(prompt, formatted)
        return self._completion(source, chat, kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        source, chat = self._completion_input(prompt, formatted)
        return self._stream_completion(source, chat, kwargs)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        source, chat = self._completion_input(prompt, formatted)
        return await asyncio.to_thread(self._completion, source, chat, kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        source, chat = self._completion_input(prompt, formatted)
        return _in_thread(self._stream_completion(source, chat, kwargs))

    # -- chat -------------------------------------------------------------------------------------
    @staticmethod
    def _to_chat(response: CompletionResponse) -> ChatResponse:
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=response.text),
            delta=response.delta,
            logprobs=response.logprobs,
            additional_kwargs=response.additional_kwargs,
        )

    def _chat_source(self, messages: Sequence[ChatMessage]) -> list[int] | str:
        return self._chat_ids(messages)

    def _stream_chat(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponseGen:
        for response in self._stream_completion(self._chat_source(messages), False, kwargs):
            yield self._to_chat(response)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._to_chat(self._completion(self._chat_source(messages), False, kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._stream_chat(messages, kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        source = self._chat_source(messages)
        return self._to_chat(await asyncio.to_thread(self._completion, source, False, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return _in_thread(self._stream_chat(messages, kwargs))


async def _in_thread(gen: Iterator[Any]) -> Any:
    """An async generator that pulls each item of a blocking generator in a worker thread."""
    while (item := await asyncio.to_thread(next, gen, _DONE)) is not _DONE:
        yield item
