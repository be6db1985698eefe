"""How the engine retrieves: :class:`RetrievalSteps` (:class:`~active_rag.loop.ActiveRAG` inherits them).

- :meth:`RetrievalSteps._retrieve`: one retrieval with the formulator's queries (merged rankings, ``top_k`` in
  all), the context policy's choice of what the prompt keeps, the passages fitted to the context window, and its
  :class:`~active_rag.types.Retrieval` record in the run's trace.
- :meth:`RetrievalSteps._follow`: the ``bridge`` trigger's action: retrieve the named entity's own article and
  start the next sentence with its name.
- :meth:`RetrievalSteps._scorer`: the ``rerank`` context policy's score of a set of passages (the model's
  uncertainty about the next sentence with them in the prompt).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from .answering import AnswerSteps
from ..entities import is_own_passage
from ..decoding.model import count_prompt_tokens
from .context import ContextPolicy, record_held
from ..retrieval.rankings import fetch_passages
from ..types import Passage, Retrieval, StreamEvent, TriggerDecision

__all__ = ["RetrievalSteps"]


class RetrievalSteps(AnswerSteps):
    """Retrieval steps of the engine; see the module docstring. The engine provides the model, the retriever, the
    settings and the session helpers."""

    context: Any
    query: Any

    def _fit_passages(self, run: Any, held: Sequence[Passage], retrieval: Retrieval) -> list[Passage]:  # pragma: no cover - engine
        raise NotImplementedError

    def _layout(self, run: Any, docs: Sequence[Passage]) -> Any:  # pragma: no cover - engine
        raise NotImplementedError

    def _follow(
        self, run: Any, queries: Sequence[str], position: int, decision: TriggerDecision, details: dict[str, Any],
        capture: bool,
    ) -> Generator[StreamEvent, None, bool]:
        """The ``follow`` action: retrieve with the bridge entities, keep only their own articles, and start the
        next sentence with the last entity whose article the prompt holds (``seed``); none held: no seed."""
        names = list(decision.entities or [decision.token or ""])
        yield self._retrieve(run, queries, position=position, decision=decision, details=details,
                             formulator=self.query.name, keep=lambda p: any(is_own_passage(p, e) for e in names))
        target = next((e for e in reversed(names) if any(is_own_passage(p, e) for p in run.docs)), None)
        if target is None:
            return False
        decision.token = target
        run.followed.append(target)
        if getattr(run.trigger, "seed", True):
            self._open_session(run, capture)
            assert run.session is not None
            yield from self._extend(run, (" " if run.output_text and not run.output_text.endswith((" ", "\n")) else "") + target)
        return True

    def _retrieve(
        self, run: Any, queries: Sequence[str], *, position: int, decision: TriggerDecision, details: dict[str, Any],
        formulator: str | None = None, keep: Callable[[Passage], bool] | None = None,
        fetch: Callable[[set[str]], list[Passage]] | None = None,
        arrange: Callable[[list[Passage]], list[Passage]] | None = None, context: ContextPolicy | None = None,
    ) -> Retrieval:
        queries = [q.strip() for q in queries if q and q.strip()]
        reason = decision.reason
        if not queries:
            queries = [run.question]
            reason = (reason + "; " if reason else "") + f"{self.query.name} produced an empty query, used the question"
        assert self.retriever is not None
        context = context or self.context  # a look's own (ContextPolicy.for_look), else the engine's
        held = {p.id for p in run.docs} if context.skip_held else set()
        passages, calls = fetch_passages(self.retriever, queries, self.top_k, held, fetch)
        returned = len(passages)
        not_own = [p for p in passages if keep is not None and not keep(p)]
        passages = [p for p in passages if p not in not_own]
        retrieval = Retrieval(
            position=position,
            query=" | ".join(queries),
            passages=passages,
            trigger=decision.trigger,
            token=decision.token,
            score=decision.score,
            threshold=decision.threshold,
            threshold_source=decision.threshold_source,
            reason=reason,
            details=details,
            top_k=self.top_k,
            returned=returned,
            retriever_calls=calls,
        )
        kept = context.after_retrieval(run.docs, passages, self._scorer(run) if context.needs_scorer else None)
        if arrange is not None:  # the order the prompt reads them in (a linked look: ContextPolicy.arrange_links)
            kept = arrange(kept)
        left_out = [p for p in passages if p.id not in {k.id for k in kept}]
        if left_out:
            retrieval.passages = [p for p in passages if p not in left_out]
            retrieval.dropped = left_out
            retrieval.dropped_reason = f"context policy {context.name}: not kept"
        if not_own:
            retrieval.dropped = not_own + list(retrieval.dropped)
            retrieval.dropped_reason = "; ".join(filter(None, ["not the bridge entity's own article", retrieval.dropped_reason]))
        before = list(run.docs)
        run.docs = self._fit_passages(run, kept, retrieval)
        record_held(retrieval, before, run.docs)  # held_ids, new_ids and evicted_ids
        retrieval.formulator = formulator
        run.retrievals.append(retrieval)
        return retrieval

    def _scorer(self, run: Any) -> Callable[[Sequence[Passage]], float]:
        """The model's uncertainty about the next sentence with given passages in the prompt: the mean entropy
        of its first few greedy tokens (the rerank policy's score; prefills reuse the prefix cache)."""
        probe = int(getattr(self.context, "probe_tokens", 4))

        def score(passages: Sequence[Passage]) -> float:
            layout = self._layout(run, passages)
            with count_prompt_tokens(run.usage):
                session = self.model.session(layout.ids)
            steps = list(session.generate(probe))  # scoring, not answer tokens: not counted as generated
            return sum(s.entropy for s in steps) / len(steps) if steps else 0.0

        return score
