"""How the engine retrieves: :class:`Retrieving`, the retrieval steps of one call.

- :meth:`Retrieving.retrieve`: one retrieval with the formulator's queries (merged rankings, ``top_k`` in all), the
  context policy's choice of what the prompt keeps, the passages fitted to the context window, and its
  :class:`~active_rag.types.Retrieval` record in the run's trace.
- :meth:`Retrieving.linked`: the own articles of the names worth following that the passages read mention
  (:func:`active_rag.answer.links.follow_links`), after choosing by the question's form what to read
  (:func:`active_rag.answer.read_choice.choose_reading`); the pages of what only the question's premise names leave
  the prompt once the page it describes is read (:func:`active_rag.answer.premise.premise_pages`).
- :meth:`Retrieving.follow`: the ``bridge`` trigger's action: retrieve the named entity's own article and start the
  next sentence with its name.
- :meth:`Retrieving.scorer`: the ``rerank`` context policy's score of a set of passages (the model's uncertainty
  about the next sentence with them in the prompt).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..decoding.model import count_prompt_tokens
from ..entities import is_own_passage
from ..components.context import ContextPolicy, record_held
from ..answer.link_filter import default_link_filter
from ..answer.links import Links, follow_links
from ..answer.premise import PREMISE_REASON, premise_pages
from ..answer.read_choice import choose_reading
from ..retrieval.rankings import count_retriever_calls, fetch_passages
from ..types import Passage, Retrieval, StreamEvent, TriggerDecision
from .generation import Generation
from .run import EngineView, Run

__all__ = ["Retrieving"]


class Retrieving:
    """The retrieval steps of one call (see the module docstring), on the engine ``engine``."""

    def __init__(self, engine: EngineView, generation: Generation) -> None:
        self.engine = engine
        self.generation = generation

    def retrieve(
        self, run: Run, queries: Sequence[str], *, position: int, decision: TriggerDecision, details: dict[str, Any],
        formulator: str | None = None, keep: Callable[[Passage], bool] | None = None,
        fetch: Callable[[set[str]], list[Passage]] | None = None,
        arrange: Callable[[list[Passage]], list[Passage]] | None = None, context: ContextPolicy | None = None,
    ) -> Retrieval:
        """Retrieve with ``queries`` (the question when they are empty); ``keep`` filters what came back (the
        others are recorded as dropped), ``fetch`` replaces the retriever's ranking (a linked look), ``arrange``
        orders what the prompt keeps, ``context`` is a look's own policy (else the engine's)."""
        engine = self.engine
        queries = [q.strip() for q in queries if q and q.strip()]
        reason = decision.reason
        if not queries:
            queries = [run.question]
            reason = (reason + "; " if reason else "") + f"{engine.query.name} produced an empty query, used the question"
        assert engine.retriever is not None
        context = context or engine.context
        held = {p.id for p in run.docs} if context.skip_held else set()
        if fetch is not None:  # a linked look reads the articles it follows: its retriever calls count here too
            with count_retriever_calls() as counter:
                passages = fetch(set(held))
            calls = counter.n
        else:
            passages, calls = fetch_passages(engine.retriever, queries, engine.top_k, held)
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
            top_k=engine.top_k,
            returned=returned,
            retriever_calls=calls,
        )
        kept = context.after_retrieval(run.docs, passages, self.scorer(run) if context.needs_scorer else None)
        if arrange is not None:  # the order the prompt reads them in (a linked look: ContextPolicy.arrange_links)
            kept = arrange(kept)
        left_out = [p for p in passages if p.id not in {k.id for k in kept}]
        if left_out:
            retrieval.passages = [p for p in passages if p not in left_out]
            retrieval.dropped = left_out
            premise = set(details.get("premise_pages") or ())  # Retrieving.linked: pages of the premise's names
            reasons = [f"context policy {context.name}: not kept" if any(p.id not in premise for p in left_out) else "",
                       PREMISE_REASON if any(p.id in premise for p in left_out) else ""]
            retrieval.dropped_reason = "; ".join(filter(None, reasons))
        if not_own:
            retrieval.dropped = not_own + list(retrieval.dropped)
            retrieval.dropped_reason = "; ".join(filter(None, ["not the bridge entity's own article", retrieval.dropped_reason]))
        before = list(run.docs)
        run.docs = self.generation.fit_passages(run, kept, retrieval)
        record_held(retrieval, before, run.docs)  # held_ids, new_ids and evicted_ids
        retrieval.formulator = formulator
        run.retrievals.append(retrieval)
        return retrieval

    def linked(self, run: Run, read: Sequence[Passage], *, position: int, decision: TriggerDecision,
               choose: bool = False) -> Retrieval:
        """Add the own articles of the names worth following that ``read`` mentions, looked up in the retriever's
        name index, then the question's next passages (:func:`active_rag.answer.links.follow_links`). The trace
        records the names followed, best first (``details["names"]``, a list), and which passage is whose article
        (``details["articles"]``); the query is the question, the only one the retriever may be asked.

        ``choose``: first choose by the question's form (:func:`active_rag.answer.read_choice.choose_reading`); a
        comparison of named things follows only the question's own names (``details["choice"]`` and
        ``details["choice_reason"]`` say which way and why), and the prompt keeps what the context policy keeps for
        that way (:meth:`~active_rag.components.context.ContextPolicy.for_look`)."""
        engine = self.engine
        details: dict[str, Any] = {}
        context = engine.context
        if choose:
            choice = choose_reading(run.question)
            details.update(choice=choice.way, choice_reason=choice.reason)
            context = context.for_look(choice.way)
            if choice.way == "compare":
                read = []

        found: list[Links] = []

        def fetch(held: set[str]) -> list[Passage]:
            links = follow_links(engine.retriever, read, run.question, engine.top_k, held, fill=context.fill_links,
                                 hub=getattr(context, "hub", 0) / 1000,
                                 link_filter=default_link_filter() if getattr(context, "link_filter", 0) else None)
            details.update(names=links.names, articles=links.articles)  # articles: the rest are the question's
            details["linked_from"] = dict(links.linked_from)
            if links.unrelated:  # names mentioned whose passage does not bear on the question: not read
                details["unrelated"] = list(links.unrelated)
            if links.outranked:  # names whose passage bears on the question less than the next chunk read instead
                details["outranked"] = list(links.outranked)
            if links.hubs:  # names that many of the corpus's passages mention (the context's hub): not followed
                details["hubs"] = list(links.hubs)
            if links.scores:  # the link filter's probability per name; those below its threshold: not read
                details["link_scores"] = {n: round(p, 4) for n, p in links.scores.items()}
                details["filtered"] = list(links.filtered)
            found.append(links)
            return links.passages

        def arrange(kept: list[Passage]) -> list[Passage]:
            kept = context.arrange_links(kept, found[-1]) if found else kept
            premise = premise_pages(run.question, kept)  # the described thing's page is read: the premise's pages go
            if premise:
                details["premise_pages"] = [p.id for p in premise]
            return [p for p in kept if p not in premise]

        return self.retrieve(run, [run.question], position=position, decision=decision, details=details,
                             formulator="linked", fetch=fetch, context=context, arrange=arrange)

    def follow(
        self, run: Run, queries: Sequence[str], position: int, decision: TriggerDecision, details: dict[str, Any],
        capture: bool,
    ) -> Generator[StreamEvent, None, bool]:
        """The ``follow`` action: retrieve with the bridge entities, keep only their own articles, and start the
        next sentence with the last entity whose article the prompt holds (``seed``); none held: no seed."""
        names = list(decision.entities or [decision.token or ""])
        yield self.retrieve(run, queries, position=position, decision=decision, details=details,
                            formulator=self.engine.query.name, keep=lambda p: any(is_own_passage(p, e) for e in names))
        target = next((e for e in reversed(names) if any(is_own_passage(p, e) for p in run.docs)), None)
        if target is None:
            return False
        decision.token = target
        run.followed.append(target)
        if getattr(run.trigger, "seed", True):
            self.generation.open_session(run, capture)
            assert run.session is not None
            text = run.output_text
            yield from self.generation.extend(run, (" " if text and not text.endswith((" ", "\n")) else "") + target)
        return True

    def scorer(self, run: Run) -> Callable[[Sequence[Passage]], float]:
        """The model's uncertainty about the next sentence with given passages in the prompt: the mean entropy
        of its first few greedy tokens (the rerank policy's score; prefills reuse the prefix cache)."""
        probe = int(getattr(self.engine.context, "probe_tokens", 4))
        generation = self.generation

        def score(passages: Sequence[Passage]) -> float:
            layout = generation.layout(run, passages)
            with count_prompt_tokens(run.usage):
                session = generation.model.session(layout.ids)
            steps = list(session.generate(probe))  # scoring, not answer tokens: not counted as generated
            return sum(s.entropy for s in steps) / len(steps) if steps else 0.0

        return score
