"""Follow the bridge (issue 28): the ``bridge`` trigger, the ``entity`` query and the loop's ``follow`` action,
driven by the scripted word-level model of test_loop so that every prompt the model saw is known."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, Passage
from active_rag.entities import entities_of, generated_entities, is_own_passage, same_entity
from active_rag.errors import InvalidOptionError
from active_rag.components.queries import EntityQuery, QueryContext
from active_rag.components.triggers import BridgeTrigger, SegmentContext, make_trigger
from active_rag.types import TokenStep, TriggerDecision
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.recipes import recipe

QUESTION = "Where was the husband of Octavie Coudreau born?"
OCTAVIE = Passage(id="octavie", title="Octavie Coudreau", text="Octavie Coudreau married Henri Coudreau.")
HENRI = Passage(id="henri", title="Henri Coudreau", text="Henri Coudreau was born in Sonnac.")
FRENCH = Passage(id="french", title="French Guiana", text="French Guiana, which Henri Coudreau explored.")
SONNAC = Passage(id="sonnac", title="Sonnac", text="Sonnac is a commune.")


class Wiki:
    """A retriever with fixed rankings per query; records the queries."""

    def __init__(self, rankings: dict[str, list[Passage]]) -> None:
        self.rankings = rankings
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return list(self.rankings.get(query, [FRENCH]))[:k]


BRIDGE_ONLY = "The husband of Octavie Coudreau was Henri Coudreau. So the answer is Henri Coudreau."
FOLLOWED = "The husband of Octavie Coudreau was Henri Coudreau. Henri Coudreau was born in Sonnac. So the answer is Sonnac."


def reader(prompt: str) -> list[Word]:
    """Names the bridge; reads on to the answer only with the bridge's own article in its prompt."""
    return words(FOLLOWED if "Sonnac." in prompt.split("Question")[0] or "born in Sonnac" in prompt else BRIDGE_ONLY)


def _steps(text: str) -> list[TokenStep]:
    return [TokenStep(id=i, text=" " + w, logprob=-0.1, entropy=0.1, position=i) for i, w in enumerate(text.split())]


# -- entities ------------------------------------------------------------------------------------------
def test_entities_of_a_sentence_are_the_names_the_question_does_not_have() -> None:
    sentence = "The husband of Octavie Coudreau was Henri Coudreau, born on 6 May 1859 in French Guiana."
    assert entities_of(sentence, QUESTION) == ["Henri Coudreau", "6 May 1859", "French Guiana"]
    assert entities_of(sentence, QUESTION, names_only=True) == ["Henri Coudreau", "French Guiana"]
    assert entities_of("Ögedei Khan's father is Genghis Khan.", "Who is Boraqchin's father-in-law?") == [
        "Ögedei Khan", "Genghis Khan"]  # fmt: skip
    assert generated_entities("Octavie Coudreau was married. He was French. It is.", QUESTION) == ["French"]
    assert same_entity("Ögedei Khan's", "ogedei khan") and not same_entity("Henri Coudreau", "Henri")


@pytest.mark.parametrize(
    ("title", "text", "entity", "own"),
    [
        ("Henri Coudreau", "", "Henri Coudreau", True),
        ("Hypocrite (Film)", "", "Hypocrite", True),  # a parenthesis is not part of the name
        ("Miguel Morayta", "", "Miguel Morayta Martinez", True),  # one word more
        ("Ögedei Khan", "", "Ogedei Khan", True),  # accents
        ("French Guiana", "", "Henri Coudreau", False),
        ("Sonnac", "", "Henri Coudreau", False),
        ("France national football team", "", "France", False),  # more than one word apart
        ("", "Henri Coudreau (1859-1899) was an explorer.", "Henri Coudreau", True),  # no title: the text's start
        ("", "An explorer, Henri Coudreau.", "Henri Coudreau", False),
    ],
)
def test_own_passage_is_the_article_whose_title_names_the_entity(title: str, text: str, entity: str, own: bool) -> None:
    assert is_own_passage(Passage(id="p", title=title, text=text or "text"), entity) is own


# -- the trigger and the query -------------------------------------------------------------------------
def test_bridge_trigger_fires_on_a_new_name_and_never_on_the_answer_sentence() -> None:
    trigger = BridgeTrigger()
    ctx = SegmentContext(_steps("The husband of Octavie Coudreau was Henri Coudreau."), question=QUESTION)
    fired = trigger.check(ctx)
    assert fired.fire and fired.token == "Henri Coudreau" and fired.entities == ["Henri Coudreau"]
    # the answer sentence, a sentence with nothing new, an entity already followed, the hop budget
    assert not trigger.check(SegmentContext(_steps("So the answer is Henri Coudreau."), question=QUESTION)).fire
    assert not trigger.check(SegmentContext(_steps("Octavie Coudreau was married."), question=QUESTION)).fire
    followed = SegmentContext(ctx.segment, question=QUESTION, followed=("henri coudreau",))
    assert trigger.check(followed).reason == "names nothing the question does not"
    spent = BridgeTrigger(max_follows=1).check(SegmentContext(ctx.segment, question=QUESTION, followed=("X",)))
    assert not spent.fire and "max_follows=1" in spent.reason
    # it also checks the last sentence, after generation ended
    assert trigger.check(SegmentContext(ctx.segment, question=QUESTION, finished=True)).fire
    assert make_trigger("bridge", max_follows=3).max_follows == 3
    with pytest.raises(InvalidOptionError, match="max_follows"):
        BridgeTrigger(max_follows=-1)


def test_entity_query_asks_each_entity_alone() -> None:
    decision = TriggerDecision(fire=True, trigger="bridge", entities=["Henri Coudreau", "French Guiana"])
    ctx = QueryContext(question=QUESTION, output=[], segment=_steps("x."), decision=decision)
    assert EntityQuery().formulate(ctx) == ["Henri Coudreau", "French Guiana"]
    assert ctx.details["entities"] == ["Henri Coudreau", "French Guiana"]
    # another trigger: the latest generated sentence's entities, else the question
    other = TriggerDecision(fire=True, trigger="fixed-sentence")
    assert EntityQuery().formulate(QueryContext(QUESTION, _steps("He was Henri Coudreau."), [], other)) == ["Henri Coudreau"]
    assert EntityQuery().formulate(QueryContext(QUESTION, _steps("He was."), [], other)) == [QUESTION]


# -- the loop ------------------------------------------------------------------------------------------
def test_follow_adds_the_bridge_article_and_starts_the_next_sentence_with_its_name() -> None:
    lm = ScriptedLM(script=reader)
    wiki = Wiki({QUESTION: [OCTAVIE, FRENCH], "Henri Coudreau": [FRENCH, HENRI, SONNAC]})
    result = ActiveRAG(lm, wiki, **recipe("follow-bridge", top_k=2)).run(QUESTION)
    assert wiki.queries == [QUESTION, "Henri Coudreau", "Sonnac"]  # Sonnac: the followed sentence names it
    first, follow, second = result.retrievals
    assert first.position == 0 and first.held_ids == ["octavie", "french"]
    # only the entity's own article joins the prompt; the rest is dropped, with the reason
    assert follow.passage_ids == ["henri"] and follow.token == "Henri Coudreau"
    assert follow.held_ids == ["octavie", "french", "henri"] and follow.new_ids == ["henri"]
    assert [p.id for p in follow.dropped] == ["sonnac"] and "own article" in follow.dropped_reason
    assert follow.returned == 2  # what the retriever gave (French Guiana is held: skipped), before the filter
    assert follow.position == len("The husband of Octavie Coudreau was Henri Coudreau.".split())
    assert result.answer == FOLLOWED
    # the seeded words are in the prompt of the session that wrote the next sentence, after the article
    last = lm.sessions[-1]
    assert "born in Sonnac" in last.prompt_text and lm.decode(last.ids[last.answer_start:]).startswith(
        "The husband of Octavie Coudreau was Henri Coudreau. Henri Coudreau was born")
    assert result.final_passage_ids == ["octavie", "french", "henri"]
    # the followed sentence names Sonnac, a second hop, but it has no own article here: nothing joins, no seed
    decisions = [d for d in result.decisions if d.fire]
    assert [d.token for d in decisions] == ["Henri Coudreau", "Sonnac"]
    assert second.passage_ids == [] and second.dropped == []  # French Guiana is held: skipped


def test_follow_seeds_from_an_article_the_prompt_already_holds_and_not_without_one() -> None:
    held = Wiki({QUESTION: [OCTAVIE, HENRI]})
    lm = ScriptedLM(script=reader)
    result = ActiveRAG(lm, held, **recipe("follow-bridge", top_k=2)).run(QUESTION)
    assert result.answer == FOLLOWED and result.retrievals[1].passage_ids == []  # held: skipped, still followed
    # no article of its own anywhere: the answer is what the model wrote, and generation ended there
    lm = ScriptedLM(script=reader)
    none = ActiveRAG(lm, Wiki({QUESTION: [OCTAVIE]}), **recipe("follow-bridge", top_k=1)).run(QUESTION)
    assert none.answer == BRIDGE_ONLY and none.retrievals[1].passage_ids == []
    assert [p.id for p in none.retrievals[1].dropped] == ["french"]


def test_follow_without_seed_retrieves_but_lets_the_model_go_on() -> None:
    lm = ScriptedLM(script=reader)
    wiki = Wiki({QUESTION: [OCTAVIE], "Henri Coudreau": [HENRI]})
    result = ActiveRAG(lm, wiki, **recipe("follow-bridge", top_k=1, trigger=BridgeTrigger(seed=False))).run(QUESTION)
    assert result.retrievals[1].passage_ids == ["henri"]
    # the model wrote its next sentence itself, with the article in its prompt: no forced words
    sessions = lm.sessions
    assert len(sessions) == 3 and "born in Sonnac" in sessions[1].prompt_text
    assert result.answer == FOLLOWED


def test_the_answer_sentence_is_never_followed_and_hops_stop_at_max_follows() -> None:
    def chain(prompt: str) -> list[Word]:
        return words("A is B Bee. B Bee is C Cee. C Cee is D Dee. So the answer is D Dee.")

    pages = {n: [Passage(id=n, title=n, text=f"{n} text.")] for n in ("B Bee", "C Cee", "D Dee")}
    lm = ScriptedLM(script=chain)
    result = ActiveRAG(lm, Wiki(pages), **recipe("follow-bridge", top_k=1, trigger=BridgeTrigger(max_follows=1))).run("What is A?")
    fired = [d.token for d in result.decisions if d.fire]
    assert fired == ["B Bee"]  # one hop, then the budget holds every check
    assert result.answer.endswith("So the answer is D Dee.")


def test_reanswer_writes_the_answer_again_with_every_passage_held() -> None:
    from active_rag.types import TokenEvent

    def reader_first_hop_only(prompt: str) -> list[Word]:
        # with the bridge's article the model answers at once; without it, it names the bridge
        if "born in Sonnac" in prompt:
            return words("Henri Coudreau was born in Sonnac. So the answer is Sonnac.")
        return words(BRIDGE_ONLY)

    lm = ScriptedLM(script=reader_first_hop_only)
    wiki = Wiki({QUESTION: [OCTAVIE], "Henri Coudreau": [HENRI]})
    rag = ActiveRAG(lm, wiki, **recipe("follow-bridge-reanswer", top_k=1))
    events = list(rag.stream(QUESTION))
    result = events[-1]
    # the draft went on from the seed; the answer was written again from its first word with both passages
    assert result.draft is not None and result.draft.startswith("The husband of Octavie Coudreau was Henri Coudreau. Henri")
    assert result.answer == "Henri Coudreau was born in Sonnac. So the answer is Sonnac."
    assert result.final_passage_ids == ["octavie", "henri"]
    last = lm.sessions[-1]
    assert "born in Sonnac" in last.prompt_text and "Octavie Coudreau married" in last.prompt_text
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    restart = max(i for i, e in enumerate(tokens) if e.position == 0)
    assert restart > 0 and "".join(e.text for e in tokens[restart:]).strip() == result.answer  # streamed from 0 again
    assert result.to_dict()["draft"] == result.draft and rag.describe()["reanswer"] is True
    # nothing added after the first token: no second answer
    plain = ActiveRAG(ScriptedLM(script=reader), Wiki({QUESTION: [OCTAVIE, HENRI]}), **recipe("follow-bridge-reanswer", top_k=2)).run(QUESTION)
    assert plain.draft is None and "draft" not in plain.to_dict()
    assert "reanswer" not in ActiveRAG(lm, wiki, **recipe("follow-bridge")).describe()
