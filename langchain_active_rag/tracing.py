"""The engine's generation as LangChain chat-model runs (LangSmith, ``astream_events``, callback handlers).

:class:`ActiveRAG <langchain_active_rag.ActiveRAG>` runs the engine, which decodes with the model
directly; this module reports that decoding the way a ``BaseChatModel`` call reports its own: a child
chat-model run (``on_chat_model_start`` -> ``on_llm_new_token`` per token, with the chunk and its
OpenAI-shaped logprobs -> ``on_llm_end`` with token usage and the model name) for

- every generation segment: the tokens the engine accepted from one prompt, whose messages are the method's
  prompt with the passages that prompt held and the answer so far as the assistant's prefix. Where a segment
  begins and ends (a retrieval, even one streamed before the tokens of the segment it closes; an answer written
  again from its first word; a kept draft streamed again, which is not reported twice) is decided once, for
  every adapter, by :class:`active_rag.event_segments.EventSegmenter`; this module maps its events onto runs;
- the router's decision (TA-ARE or vanilla): its prompt in, its raw output out.

Retriever runs stay siblings of these runs, under the chain. Only accepted tokens are reported
(tentative look-ahead sentences that FLARE discards are not). ``input_tokens`` counts the segment's
prompt tokens as the engine lays them out (its prompt mode, then the answer so far);
``output_tokens`` the segment's tokens. A segment's ``finish_reason`` is ``"retrieval"`` when its passages
changed, ``"length"`` when the answer reached ``max_new_tokens``, else ``"stop"`` (the answer ended, or was
written again or cut back). When no callback handler listens, no prompt is rendered and no run is reported: only the
segmenter's bookkeeping runs, so that a :meth:`GenerationTracer.rebind` to a listening run reports from the next token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManager, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langchain_core.runnables import RunnableConfig

from active_rag import ActiveLM, PromptTemplate, Retrieval, RouteDecision, TokenEvent
from active_rag.event_segments import EventSegmenter, RouterCall, SegmentEnd, SegmentEvent, SegmentStart, SegmentToken

#: The name of the chat-model runs (the class a user would call for the same model).
RUN_NAME = "ChatActiveHF"
_SERIALIZED = {"lc": 1, "type": "not_implemented", "id": ["langchain_active_rag", "chat_models", RUN_NAME], "name": RUN_NAME}


def logprob_entry(text: str, logprob: float, top_logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One OpenAI-style ``logprobs.content`` item."""
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8")), "top_logprobs": top_logprobs or []}


def ls_params(lm: ActiveLM, **extra: Any) -> dict[str, Any]:
    """LangSmith's run metadata for a chat call of ``lm``."""
    return {"ls_provider": "active_rag", "ls_model_name": lm.name, "ls_model_type": "chat", **extra}


class GenerationTracer:
    """Reports one engine call's generation as child chat-model runs of the run whose child ``config`` is given.

    Feed it the engine's stream events in order (:meth:`route`, :meth:`retrieval`, :meth:`token`), then
    :meth:`finish` (or :meth:`error`). Where the segments begin and end is :class:`~active_rag.event_segments.EventSegmenter`'s
    to say; this class maps its events onto callback runs."""

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
        self.segments = EventSegmenter()
        self.run: tuple[int, CallbackManagerForLLMRun, int] | None = None  # (segment index, its run, its input tokens)

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
        self._report(self.segments.close("closed"), finish_reason)
        self._configure(config)

    # -- events ---------------------------------------------------------------------------------------------
    def route(self, decision: RouteDecision) -> None:
        """The router's generation as one run: its prompt in, its raw output out (one chunk)."""
        self._report(self.segments.feed(decision))

    def retrieval(self, retrieval: Retrieval) -> None:
        self._report(self.segments.feed(retrieval))

    def token(self, event: TokenEvent) -> None:
        self._report(self.segments.feed(event))

    def finish(self) -> None:
        """Close the open segment (the answer is complete)."""
        self._report(self.segments.close("end"))

    def error(self, exc: BaseException) -> None:
        """Report ``exc`` on the open segment, if any."""
        self.segments.close("error")
        held, self.run = self.run, None
        if held is not None:
            held[1].on_llm_error(exc)

    # -- segment events -> runs -------------------------------------------------------------------------------
    def _report(self, events: Sequence[SegmentEvent], finish_reason: str | None = None) -> None:
        for event in events:
            if isinstance(event, SegmentToken):
                self._token(event)
            elif isinstance(event, SegmentStart):
                if self.enabled:
                    messages, input_tokens = self._segment_prompt(event)
                    run = self._start(messages, max_tokens=self.max_new_tokens - event.position)
                    self.run = (event.index, run, input_tokens)
            elif isinstance(event, SegmentEnd):
                held = self.run
                if held is not None and held[0] == event.index:
                    self.run = None
                    reason = finish_reason or self._finish_reason(event)
                    self._end(held[1], event.text, [_entry(t) for t in event.tokens], held[2], len(event.tokens), reason)
            elif isinstance(event, RouterCall) and self.enabled:
                self._router(event)

    def _finish_reason(self, end: SegmentEnd) -> str:
        if end.cause == "retrieval":
            return "retrieval"
        if end.cause == "end" and end.answer_tokens >= self.max_new_tokens:
            return "length"
        return "stop"

    def _token(self, event: SegmentToken) -> None:
        held = self.run
        if held is None or held[0] != event.index:
            return
        run, entry = held[1], _entry(event.token)
        chunk = ChatGenerationChunk(
            message=AIMessageChunk(
                content=event.token.text, id=f"lc_run--{run.run_id}", response_metadata={"logprobs": {"content": [entry]}}
            )
        )
        run.on_llm_new_token(event.token.text, chunk=chunk, logprobs={"content": [entry]})

    def _router(self, call: RouterCall) -> None:
        run = self._start(self._messages(call.prompt), max_tokens=None)
        text = call.output
        chunk = ChatGenerationChunk(message=AIMessageChunk(content=text, id=f"lc_run--{run.run_id}"))
        run.on_llm_new_token(text, chunk=chunk)
        input_tokens = len(self.lm.prompt_ids(call.prompt)) if call.prompt else 0
        self._end(run, text, [], input_tokens, len(self.lm.encode(text)) if text else 0, "stop")

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

    def _end(self, run: CallbackManagerForLLMRun, text: str, entries: list[dict[str, Any]],
             input_tokens: int, output_tokens: int, finish_reason: str) -> None:
        usage = UsageMetadata(input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens)
        metadata: dict[str, Any] = {"model_name": self.lm.name, "model_provider": "active_rag", "finish_reason": finish_reason}
        if entries:
            metadata["logprobs"] = {"content": entries}
        message = AIMessage(content=text, id=f"lc_run--{run.run_id}", usage_metadata=usage, response_metadata=metadata)
        generation = ChatGeneration(message=message, generation_info={"finish_reason": finish_reason})
        token_usage = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": usage["total_tokens"]}
        run.on_llm_end(LLMResult(generations=[[generation]], llm_output={"token_usage": token_usage, "model_name": self.lm.name}))

    def _segment_prompt(self, start: SegmentStart) -> tuple[list[BaseMessage], int]:
        """The segment's prompt as messages (the answer so far as the assistant's prefix) and its token count."""
        assert self.prompt is not None, "segments need the engine's prompt template"
        passages, prefix = list(start.passages), start.prefix
        try:  # the engine's own prompt layout, in every prompt mode
            from active_rag.components.prompt_layout import build_layout, chat_messages, completion_text
        except ImportError:  # pragma: no cover - an engine without prompt modes renders one user message
            user = self.prompt.render(self.question, passages)
            return self._messages(user, prefix), len(self.lm.prompt_ids(user)) + start.position
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
        return messages, len(layout.ids) + start.position


def _entry(token: TokenEvent) -> dict[str, Any]:
    return logprob_entry(token.text, token.logprob)


__all__ = ["GenerationTracer", "RUN_NAME", "logprob_entry", "ls_params"]
