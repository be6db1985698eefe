"""The engine's generation as LlamaIndex LLM calls, for observability tools (instrumentation events).

LlamaIndex tools (Arize Phoenix / OpenInference, Langfuse, custom ``BaseEventHandler`` s) see an LLM's work
through ``LLMCompletionStartEvent`` / ``LLMCompletionInProgressEvent`` / ``LLMCompletionEndEvent``. The
active retrieval loop does not call an LLM object: it decodes with the engine. :class:`GenerationTrace`
reports what the engine did in those terms, from the engine's own stream:

- one completion per *generation segment*: the answer tokens generated with one set of passages (the
  first segment starts at the question; a retrieval at output position ``p`` starts a new segment at
  the token of position ``p``, because from there the model is prompted with the new passages. With
  FL-RAG / FS-RAG the retrieval after a segment is made before that segment's tokens are streamed;
  they still belong to the segment before it). An answer written again from its first word (``reanswer``,
  an answer check: a new ``TokenEvent.attempt``) starts a completion of its own; a kept draft that the engine
  streams once more was not generated again and is not reported twice. ``prompt`` is the text the model
  continued: the chat template around the method's prompt with the passages that prompt held (each token's
  ``passage_ids``; ``PromptTemplate.render``),
  followed by the answer accepted so far; ``additional_kwargs`` of the start event names the method,
  the segment number, the output position it starts at and the passage ids in the prompt.
- one ``LLMCompletionInProgressEvent`` per accepted token (``delta`` = the token, ``text`` = the
  segment so far, ``logprobs`` = the token's), and an ``LLMCompletionEndEvent`` with the segment's text,
  logprobs, ``token_ids`` and ``entropies``.
- a router verdict (TA-ARE / vanilla) is a completion of its own: the router's prompt and raw output.

Tokens are reported as the engine accepts them. Tokens the engine generated and then discarded (a
segment FLARE regenerates after a retrieval, a sentence cut back by a trigger) never reach its stream,
so they are in no event; ``ActiveRAGResult.generated_tokens`` counts them.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, LogProb
from llama_index.core.instrumentation.events.llm import (
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)

from active_rag.loop import ActiveRAG
from active_rag.types import Passage, Retrieval, RouteDecision, TokenEvent

from .events import dispatch

__all__ = ["GenerationTrace"]


def _logprob(event: TokenEvent) -> LogProb:
    return LogProb(token=event.text, logprob=event.logprob, bytes=list(event.text.encode("utf-8")))


class GenerationTrace:
    """Turns one question's engine events into LlamaIndex LLM completion events (see the module docstring).

    ``model_dict`` identifies the LLM in the start events (``ActiveHFLLM.to_dict()``: class, model name,
    settings). Call :meth:`token`, :meth:`retrieval`, :meth:`route` as the engine streams, then :meth:`close`.
    """

    def __init__(self, rag: ActiveRAG, question: str, model_dict: dict[str, Any]) -> None:
        self.rag = rag
        self.question = question
        self.model_dict = model_dict
        self.docs: list[Passage] = []
        self.passages: dict[str, Passage] = {}  # every retrieved passage by id
        self.pending: list[Retrieval] = []  # retrievals whose position no streamed token has reached yet
        self.attempt = 0  # the latest answer attempt reported
        self.tokens: list[str] = []  # every accepted token of the current attempt so far
        self.ids: tuple[str, ...] | None = None  # the open segment's passage ids, as its tokens name them
        self.segments = 0
        self.prompt: str | None = None  # the open segment's prompt (None: no segment open)
        self.events: list[TokenEvent] = []

    def segment_prompt(self) -> str:
        """The text the model continues now: the chat template around the method's prompt with the
        current passages, then the answer accepted so far."""
        user = self.rag.prompt.render(self.question, self.docs)
        before, after = self.rag.model.chat_parts(user)
        return before + user + after + "".join(self.tokens)

    def token(self, event: TokenEvent) -> None:
        if event.attempt < self.attempt:  # the kept draft streamed once more: not generated again
            return
        if event.attempt > self.attempt or event.position < len(self.tokens):  # the answer from its first word
            self.close()
            self.attempt = event.attempt
            del self.tokens[event.position:]
            while self.pending:  # every retrieval so far holds for the new answer from its first token
                self.docs = list(self.pending.pop(0).passages)
        if self.pending and self.pending[0].position <= event.position:
            self.close()  # the passages changed: a new segment starts with this token
            while self.pending and self.pending[0].position <= event.position:
                self.docs = list(self.pending.pop(0).passages)
        ids = tuple(event.passage_ids) if event.passage_ids is not None else None
        if ids is not None and ids != self.ids:
            self.close()
            self.docs = [self.passages[i] for i in ids if i in self.passages]  # exactly what the prompt held
        self.ids = ids
        if self.prompt is None:
            self.prompt = self.segment_prompt()
            self.events = []
            dispatch(
                LLMCompletionStartEvent(
                    prompt=self.prompt,
                    additional_kwargs={
                        "method": self.rag.method,
                        "segment": self.segments,
                        "output_start": event.position,
                        "passage_ids": [p.id for p in self.docs],
                    },
                    model_dict=self.model_dict,
                )
            )
            self.segments += 1
        self.events.append(event)
        self.tokens.append(event.text)
        text = "".join(e.text for e in self.events)
        response = CompletionResponse(
            text=text,
            delta=event.text,
            logprobs=[[_logprob(event)]],
            additional_kwargs={"token_id": event.token_id, "entropy": event.entropy, "position": event.position},
        )
        dispatch(LLMCompletionInProgressEvent(prompt=self.prompt, response=response))

    def retrieval(self, retrieval: Retrieval) -> None:
        """The tokens from ``retrieval.position`` on are generated with these passages."""
        self.pending.append(retrieval)
        self.passages.update((p.id, p) for p in retrieval.passages)

    def route(self, decision: RouteDecision) -> None:
        """The router's own completion (its prompt, its raw output)."""
        dispatch(
            LLMCompletionStartEvent(
                prompt=decision.prompt, additional_kwargs={"router": decision.router}, model_dict=self.model_dict
            )
        )
        response = CompletionResponse(text=decision.raw_output, additional_kwargs={"retrieve": decision.retrieve})
        dispatch(LLMCompletionEndEvent(prompt=decision.prompt, response=response))

    def close(self) -> None:
        """End the open segment, if any (a retrieval, or the end of the answer)."""
        if self.prompt is None:
            return
        events, prompt = self.events, self.prompt
        self.prompt, self.events = None, []
        response = CompletionResponse(
            text="".join(e.text for e in events),
            logprobs=[[_logprob(e)] for e in events],
            additional_kwargs={
                "token_ids": [e.token_id for e in events],
                "entropies": [e.entropy for e in events],
                "positions": [e.position for e in events],
            },
        )
        dispatch(LLMCompletionEndEvent(prompt=prompt, response=response))
