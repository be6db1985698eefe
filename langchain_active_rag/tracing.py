"""The engine's generation as LangChain chat-model runs (LangSmith, ``astream_events``, callback handlers).

:class:`ActiveRAG <langchain_active_rag.ActiveRAG>` runs the engine, which decodes with the model
directly; this module reports that decoding the way a ``BaseChatModel`` call reports its own: a child
chat-model run (``on_chat_model_start`` -> ``on_llm_new_token`` per token, with the chunk and its
OpenAI-shaped logprobs -> ``on_llm_end`` with token usage and the model name) for

- every generation segment between two retrievals: the tokens the engine accepted from one prompt
  (the question with the passages that prompt held, as each token's ``passage_ids`` names them, and the
  answer so far as the assistant's prefix). A token belongs to the segment of the last retrieval whose
  ``position`` is at or before the token's own (``Retrieval.position`` counts the output tokens before the
  retrieval point), so a retrieval that fires after a segment (FL-RAG, FS-RAG) closes that segment at the
  right token even though the engine streams it before the segment's tokens. An answer written again from
  its first word (``reanswer``, an answer check: a new ``attempt``) is a run of its own; a kept draft that
  the engine streams once more is not generated again and is not reported twice;
- the router's decision (TA-ARE or vanilla): its prompt in, its raw output out.

Retriever runs stay siblings of these runs, under the chain. Only accepted tokens are reported
(tentative look-ahead sentences that FLARE discards are not). ``input_tokens`` counts the segment's
prompt tokens as the engine lays them out (its prompt mode, then the answer so far);
``output_tokens`` the segment's tokens. Nothing is computed when no callback handler listens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import CallbackManager, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langchain_core.runnables import RunnableConfig

from active_rag import ActiveLM, Passage, PromptTemplate, Retrieval, RouteDecision, TokenEvent

#: The name of the chat-model runs (the class a user would call for the same model).
RUN_NAME = "ChatActiveHF"
_SERIALIZED = {"lc": 1, "type": "not_implemented", "id": ["langchain_active_rag", "chat_models", RUN_NAME], "name": RUN_NAME}


def logprob_entry(text: str, logprob: float, top_logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One OpenAI-style ``logprobs.content`` item."""
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8")), "top_logprobs": top_logprobs or []}


def ls_params(lm: ActiveLM, **extra: Any) -> dict[str, Any]:
    """LangSmith's run metadata for a chat call of ``lm``."""
    return {"ls_provider": "active_rag", "ls_model_name": lm.name, "ls_model_type": "chat", **extra}


@dataclass
class _Segment:
    run: CallbackManagerForLLMRun
    key: tuple[Any, ...]  # (attempt, latest retrieval's index or -1, the prompt's passage ids)
    input_tokens: int
    texts: list[str] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


class GenerationTracer:
    """Reports one engine call's generation as child chat-model runs of the run whose child ``config`` is given.

    Feed it the engine's stream events in order (:meth:`route`, :meth:`retrieval`, :meth:`token`), then
    :meth:`finish` (or :meth:`error`)."""

    def __init__(
        self,
        config: RunnableConfig | None,
        lm: ActiveLM,
        prompt: PromptTemplate | None = None,
        question: str = "",
        *,
        max_new_tokens: int = 0,
        temperature: float = 0.0,
        prompt_mode: str = "single",
    ) -> None:
        self.lm = lm
        self.prompt = prompt
        self.prompt_mode = prompt_mode
        self.question = question
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self._configure(config)
        self.retrievals: list[Retrieval] = []
        self.passages: dict[str, Passage] = {}  # every retrieved passage by id
        self.attempt = 0  # the latest answer attempt reported
        self.base = -1  # the latest retrieval before the current attempt started (-1: none)
        self.accepted: list[str] = []  # text of every accepted token so far (of the current attempt)
        self.segment: _Segment | None = None

    def _configure(self, config: RunnableConfig | None) -> None:
        config = config or {}
        self.manager = CallbackManager.configure(
            inheritable_callbacks=config.get("callbacks"),
            inheritable_tags=config.get("tags"),
            inheritable_metadata={
                **(config.get("metadata") or {}),
                **ls_params(self.lm, ls_temperature=self.temperature, ls_max_tokens=self.max_new_tokens),
            },
        )
        self.enabled = bool(self.manager.handlers)

    def rebind(self, config: RunnableConfig | None, finish_reason: str = "retrieval") -> None:
        """Report the next runs as children of the run whose child ``config`` is given, closing the open segment
        (with ``finish_reason``) under the old one: a LangGraph node that advances the engine is a run of its own
        (:mod:`langchain_active_rag.graph`), and the segments it reports belong under it."""
        self._close(finish_reason)
        self._configure(config)

    # -- runs ---------------------------------------------------------------------------------------------
    def _start(self, messages: list[BaseMessage], max_tokens: int | None) -> CallbackManagerForLLMRun:
        params: dict[str, Any] = {"_type": "active-hf", "model": self.lm.name, "model_name": self.lm.name,
                                  "temperature": self.temperature, "logprobs": True}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        (run,) = self.manager.on_chat_model_start(
            _SERIALIZED, [messages], invocation_params=params, options={"stop": None}, name=RUN_NAME, batch_size=1
        )
        return run

    def _messages(self, user: str, prefix: str = "") -> list[BaseMessage]:
        messages: list[BaseMessage] = []
        if self.lm.system_prompt:
            messages.append(SystemMessage(self.lm.system_prompt))
        messages.append(HumanMessage(user))
        if prefix:
            messages.append(AIMessage(prefix))
        return messages

    def _end(self, run: CallbackManagerForLLMRun, texts: Sequence[str], entries: list[dict[str, Any]],
             input_tokens: int, output_tokens: int, finish_reason: str) -> None:
        usage = UsageMetadata(input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens)
        metadata: dict[str, Any] = {"model_name": self.lm.name, "model_provider": "active_rag", "finish_reason": finish_reason}
        if entries:
            metadata["logprobs"] = {"content": entries}
        message = AIMessage(content="".join(texts), id=f"lc_run--{run.run_id}", usage_metadata=usage, response_metadata=metadata)
        generation = ChatGeneration(message=message, generation_info={"finish_reason": finish_reason})
        token_usage = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": usage["total_tokens"]}
        run.on_llm_end(LLMResult(generations=[[generation]], llm_output={"token_usage": token_usage, "model_name": self.lm.name}))

    # -- events ---------------------------------------------------------------------------------------------
    def route(self, decision: RouteDecision) -> None:
        """The router's generation as one run: its prompt in, its raw output out (one chunk)."""
        if not self.enabled:
            return
        run = self._start(self._messages(decision.prompt), max_tokens=None)
        text = decision.raw_output
        chunk = ChatGenerationChunk(message=AIMessageChunk(content=text, id=f"lc_run--{run.run_id}"))
        run.on_llm_new_token(text, chunk=chunk)
        input_tokens = len(self.lm.prompt_ids(decision.prompt)) if decision.prompt else 0
        self._end(run, [text], [], input_tokens, len(self.lm.encode(text)) if text else 0, "stop")

    def retrieval(self, retrieval: Retrieval) -> None:
        self.retrievals.append(retrieval)
        self.passages.update((p.id, p) for p in retrieval.passages)

    def token(self, event: TokenEvent) -> None:
        if event.position < len(self.accepted):  # an answer from its first word again (or the kept draft replayed)
            del self.accepted[event.position:]
        if event.attempt > self.attempt:  # every retrieval so far holds for the new answer from its first token
            self.base = len(self.retrievals) - 1
        replay = event.attempt < self.attempt
        if self.enabled and not replay:
            source = self.base
            for i in range(self.base + 1, len(self.retrievals)):
                if self.retrievals[i].position <= event.position:
                    source = i
            ids = tuple(event.passage_ids) if event.passage_ids is not None else None
            key = (event.attempt, source, ids)
            if self.segment is None or self.segment.key != key:
                self._close("retrieval" if event.attempt == self.attempt else "stop")
                self._open(key, event.position)
            segment = self.segment
            assert segment is not None
            entry = logprob_entry(event.text, event.logprob)
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content=event.text, id=f"lc_run--{segment.run.run_id}", response_metadata={"logprobs": {"content": [entry]}}
                )
            )
            segment.run.on_llm_new_token(event.text, chunk=chunk, logprobs={"content": [entry]})
            segment.texts.append(event.text)
            segment.entries.append(entry)
        self.attempt = max(self.attempt, event.attempt)
        self.accepted.append(event.text)

    def _open(self, key: tuple[Any, ...], position: int) -> None:
        _, source, ids = key
        if ids is not None:  # exactly the passages of the prompt that wrote the token
            passages = [self.passages[i] for i in ids if i in self.passages]
        else:
            passages = self.retrievals[source].passages if source >= 0 else []
        messages, input_tokens = self._segment_prompt(passages, position)
        run = self._start(messages, max_tokens=self.max_new_tokens - position)
        self.segment = _Segment(run=run, key=key, input_tokens=input_tokens)

    def _segment_prompt(self, passages: Sequence[Passage], position: int) -> tuple[list[BaseMessage], int]:
        """The segment's prompt as messages (the answer so far as the assistant's prefix) and its token count."""
        assert self.prompt is not None, "segments need the engine's prompt template"
        prefix = "".join(self.accepted[:position])
        try:  # the engine's own prompt layout, in every prompt mode
            from active_rag.methods.prompt_layout import build_layout, chat_messages, completion_text
        except ImportError:  # pragma: no cover - an engine without prompt modes renders one user message
            user = self.prompt.render(self.question, passages)
            return self._messages(user, prefix), len(self.lm.prompt_ids(user)) + position
        layout = build_layout(self.lm, self.prompt, self.prompt_mode, self.question, passages)
        if self.prompt_mode == "chat-turns":
            turns = chat_messages(self.prompt, self.question, passages, self.lm.system_prompt)
            kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
            messages: list[BaseMessage] = [kinds[t["role"]](t["content"]) for t in turns]
        elif self.prompt_mode == "completion":
            messages = [HumanMessage(completion_text(self.prompt, self.question, passages, self.lm.system_prompt))]
        else:
            messages = self._messages(self.prompt.render(self.question, passages))
        if prefix:
            messages.append(AIMessage(prefix))
        return messages, len(layout.ids) + position

    def _close(self, finish_reason: str) -> None:
        segment, self.segment = self.segment, None
        if segment is not None:
            self._end(segment.run, segment.texts, segment.entries, segment.input_tokens, len(segment.texts), finish_reason)

    def finish(self) -> None:
        """Close the open segment (the answer is complete)."""
        self._close("stop" if len(self.accepted) < self.max_new_tokens else "length")

    def error(self, exc: BaseException) -> None:
        """Report ``exc`` on the open segment, if any."""
        segment, self.segment = self.segment, None
        if segment is not None:
            segment.run.on_llm_error(exc)


__all__ = ["GenerationTracer", "RUN_NAME", "logprob_entry", "ls_params"]
