"""Context policies (issue 28): what the prompt keeps across retrievals, driven by the scripted word-level model
of test_loop so that every prompt the model saw is known."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, Passage, RunSettings, UnknownNameError
from active_rag.components.context import AccumulateContext, FocusContext, RerankContext, make_context
from active_rag.errors import InvalidOptionError
from tests.unit_tests.test_loop import QUESTION, Recorder, ScriptedLM, Word, _two_trigger_script, run, words
from tests.recipes import build, recipe

FOCUS = {"Kasper's", "father", "Bob", "Zonk", "Peter"}


def _prompts(lm: ScriptedLM) -> list[str]:
    return [s.prompt_text for s in lm.sessions]


def test_dragin_replace_drops_the_passages_after_the_regenerated_sentence() -> None:
    """The released code: the documents serve the one sentence regenerated after a retrieval; the next sentences
    are generated (and checked) without documents."""
    result, rec, lm = run("dragin", _two_trigger_script, focus=FOCUS, max_new_tokens=60)
    prompts = _prompts(lm)
    assert "evidence" not in prompts[0]  # DRAGIN starts without documents
    assert "evidence1" in prompts[1]  # the regenerated sentence sees the first retrieval's passages
    assert "evidence" not in prompts[2]  # ... and the sentence after it sees none
    assert len(result.retrievals) == 2 and [r.position for r in result.retrievals] == [3, 4]
    # the trace says what the prompt held: the retrieval's passages, then nothing for the next checked segment
    assert result.retrievals[0].held_ids == ["r1-0", "r1-1", "r1-2"]
    checked_after = [d for d in result.decisions if d.output_start == 4]
    assert checked_after and checked_after[0].passage_ids == []
    data = result.to_dict()
    assert data["retrievals"][0]["held_ids"] == ["r1-0", "r1-1", "r1-2"]
    assert data["final_passage_ids"] == result.final_passage_ids


def test_keep_newest_keeps_the_passages_for_the_rest_of_the_answer() -> None:
    result, _, lm = run("dragin", _two_trigger_script, focus=FOCUS, max_new_tokens=60, context="keep-newest")
    prompts = _prompts(lm)
    assert "evidence1" in prompts[1] and all("evidence" in p for p in prompts[1:])  # never without documents again
    assert result.answer == "Kasper's father is Peter. Peter won IFFHS. So the answer is IFFHS."
    assert result.final_passage_ids == ["r2-0", "r2-1", "r2-2"]


def test_dragin_with_initial_retrieval_retrieves_with_the_question_before_the_first_token() -> None:
    result, rec, lm = run("dragin", _two_trigger_script, focus=FOCUS, max_new_tokens=60, initial_retrieval=True)
    assert rec.queries[0] == QUESTION
    assert result.retrievals[0].position == 0 and result.retrievals[0].token is None
    assert "evidence1" in _prompts(lm)[0]


def test_accumulate_keeps_distinct_passages_oldest_first_within_the_budget() -> None:
    answer = "One is here. Two is here. Three is here. So the answer is three."
    result, rec, lm = run("fs-rag", lambda p: words(answer), top_k=2, context=AccumulateContext(max_passages=4))
    held = [r.held_ids for r in result.retrievals]
    assert held[0] == ["r1-0", "r1-1"]
    assert held[1] == ["r1-0", "r1-1", "r2-0", "r2-1"]
    assert held[2] == ["r2-0", "r2-1", "r3-0", "r3-1"]  # the oldest retrieval left first
    # documented order in the prompt: retrieval order, the newest nearest the question
    prompt = _prompts(lm)[1]  # the second sentence's: both retrievals so far
    assert prompt.index("evidence1") < prompt.index("evidence2")
    assert "evidence3" not in prompt


class SameRanking:
    """Returns the same ranking for every query; records the k it was asked for."""

    def __init__(self, n: int = 8) -> None:
        self.passages = [Passage(id=f"p{i}", title=f"P{i}", text=f"passage{i} text") for i in range(n)]
        self.asked: list[int] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.asked.append(k)
        return self.passages[:k]


def test_a_retrieval_skips_the_passages_the_prompt_already_holds() -> None:
    retriever = SameRanking()
    lm = ScriptedLM(script=lambda p: words("One is here. Two is here. So the answer is two."))
    result = ActiveRAG.from_preset("fs-rag", lm, retriever, top_k=2, context="accumulate").run(QUESTION)
    assert [r.passage_ids for r in result.retrievals[:3]] == [["p0", "p1"], ["p2", "p3"], ["p4", "p5"]]
    assert retriever.asked[:3] == [2, 4, 6]  # top_k beyond what the prompt holds
    # replace takes the ranking as it is
    again = ActiveRAG.from_preset("fs-rag", lm, SameRanking(), top_k=2, context="replace").run(QUESTION)
    assert all(r.passage_ids == ["p0", "p1"] for r in again.retrievals)


def test_rerank_keeps_the_passage_that_lowers_the_model_uncertainty() -> None:
    def script(prompt: str) -> list[Word]:
        sure = "passage3" in prompt  # the model is certain only when passage 3 is in its prompt
        return [Word(w, 0.9, 0.1 if sure else 4.0) for w in "Peter is the father. So the answer is Peter.".split()]

    lm = ScriptedLM(script=script)
    result = ActiveRAG.from_preset("sr-rag", lm, SameRanking(), top_k=5, context=RerankContext(keep=1)).run(QUESTION)
    r = result.retrievals[0]
    assert r.held_ids == ["p3"] and r.passage_ids == ["p3"]
    assert [p.id for p in r.dropped] == ["p0", "p1", "p2", "p4"] and "rerank" in r.dropped_reason
    # five scoring sessions (one passage each), then the answer's session with passage 3 alone
    assert "passage3" in _prompts(lm)[-1] and "passage0" not in _prompts(lm)[-1]
    assert result.final_passage_ids == ["p3"]


def test_context_policy_names_and_settings_are_checked() -> None:
    assert make_context(None).name == "replace"
    assert make_context("accumulate", max_passages=9).max_passages == 9
    with pytest.raises(UnknownNameError, match="context policy"):
        make_context("forget")
    with pytest.raises(InvalidOptionError, match="max_passages"):
        AccumulateContext(max_passages=0)
    with pytest.raises(InvalidOptionError, match="keep"):
        RerankContext(keep=0)
    # settings after a colon, as the CLI writes them
    assert make_context("rerank:keep=4, probe_tokens=2") == RerankContext(keep=4, probe_tokens=2)
    assert make_context("Accumulate:max_passages=9").max_passages == 9
    with pytest.raises(InvalidOptionError, match="'size=4' is not a setting.*max_passages"):
        make_context("accumulate:size=4")
    with pytest.raises(InvalidOptionError, match="keep must be an integer"):
        make_context("rerank:keep=four")
    with pytest.raises(InvalidOptionError, match="is not a setting; .*none"):
        make_context("replace:keep=1")
    with pytest.raises(InvalidOptionError, match="keep must be at least 1"):
        make_context("rerank:keep=0")


def test_engine_description_names_the_policy_only_where_it_changes_behaviour() -> None:
    lm = ScriptedLM(script=lambda p: words("Peter."))
    assert "context" not in ActiveRAG.from_preset("fs-rag", lm, Recorder()).describe()  # replace == before
    assert "context" not in ActiveRAG.from_preset("dragin", lm, Recorder(), context="keep-newest").describe()
    assert ActiveRAG.from_preset("dragin", lm, Recorder()).describe()["context"].startswith("replace")
    assert ActiveRAG.from_preset("fs-rag", lm, Recorder(), context="accumulate").describe()["context"].startswith("accumulate")


class ByQuery:
    """A ranking per query: the entity's own passage for "Peter", the question's ranking otherwise."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        ids = ["peter", "q0"] if query == "Peter" else [f"q{i}" for i in range(8)]
        return [Passage(id=i, title=i, text=f"{i} text") for i in ids][:k]


def test_next_hop_query_merges_the_entity_passage_with_the_question_s_next_passages() -> None:
    """``next-hop`` asks for the generated entity and for the question; with ``accumulate`` the retrieval holds the
    entity's passage and the question's next-ranked passages that the prompt does not hold yet."""
    retriever = ByQuery()
    lm = ScriptedLM(script=lambda p: words("His father is Peter. So the answer is Peter."))
    rag = ActiveRAG(lm, retriever, trigger="fixed-sentence", query="next-hop", top_k=3, context="accumulate",
                    settings=RunSettings(initial_retrieval=True))
    result = rag.run(QUESTION)
    first, second = result.retrievals[:2]
    assert first.passage_ids == ["q0", "q1", "q2"]
    assert retriever.queries[1:3] == ["Peter", QUESTION]
    assert second.passage_ids == ["peter", "q3", "q4"]  # round-robin, held q0 skipped in both rankings
    assert second.held_ids == ["q0", "q1", "q2", "peter", "q3", "q4"]
    assert second.details["entities"] == ["Peter"]


class QuestionThenNames:
    """The question's own ranking q0..q9 (each passage names a person); asked with anything else, the passage titled
    with it (its own article), as a name lookup finds it."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        if query == QUESTION:
            return [Passage(id=f"q{i}", title=f"Q{i}", text=f"Kasper met Person{i} Smith.") for i in range(10)][:k]
        return [Passage(id=f"name:{query}", title=query, text=f"{query} is a person.")][:k]


def _top_k_5_answers() -> ScriptedLM:
    return ScriptedLM(script=lambda p: words("Kasper's father is Peter. So the answer is Peter."))


@pytest.mark.filterwarnings("ignore:follow_links")
@pytest.mark.parametrize("preset", ["sr-rag-linked", "look-again", "look-again-linked"])
def test_accumulate_with_top_k_5_keeps_the_question_s_passages(preset: str) -> None:
    """A fixed six passages kept q4 and five added ones at top_k 5: q0-q3, the passages the links came from, were
    gone. ``accumulate``'s bound is twice top_k: the question's five and the five added stay, none is evicted."""
    rag = build(preset, _top_k_5_answers(), QuestionThenNames(), top_k=5)
    assert rag.context.max_passages == 10 and rag.describe()["context"] == "accumulate(max_passages=10)"
    result = rag.run(QUESTION)
    first, second = result.retrievals
    assert first.passage_ids == [f"q{i}" for i in range(5)] and len(second.passages) == 5
    assert set(first.passage_ids) <= set(second.held_ids) and len(second.held_ids) == 10
    assert first.evicted_ids == [] and second.evicted_ids == [] and second.to_dict()["evicted_ids"] == []
    # at the default top_k the bound, and so every committed row's engine description, is the six it was
    assert build(preset, _top_k_5_answers(), QuestionThenNames()).describe()["context"] == \
        "accumulate(max_passages=6)"


def test_every_eviction_is_recorded_in_the_trace() -> None:
    """An explicit bound below two retrievals evicts the oldest held passages: each is named in its retrieval's
    ``evicted_ids`` (the trace before recorded only new passages left out, in ``dropped``)."""
    rag = ActiveRAG(_top_k_5_answers(), QuestionThenNames(), **recipe("look-again", top_k=5, context="accumulate:max_passages=6"))
    assert rag.context.max_passages == 6  # an explicit bound is kept whatever top_k
    first, second = rag.run(QUESTION).retrievals
    assert second.passage_ids == [f"q{i}" for i in range(5, 10)] and second.dropped == []
    assert second.held_ids == ["q4", "q5", "q6", "q7", "q8", "q9"]
    assert second.evicted_ids == ["q0", "q1", "q2", "q3"] and second.to_dict()["evicted_ids"] == ["q0", "q1", "q2", "q3"]
    # a new passage the policy does not keep is in dropped, not in evicted_ids
    result, _, _ = run("fs-rag", lambda p: words("One is here. Two is here. So the answer is two."), top_k=2,
                       context=AccumulateContext(max_passages=1))
    r = result.retrievals[1]
    assert [p.id for p in r.dropped] == ["r2-0"] and r.held_ids == ["r2-1"] and r.evicted_ids == ["r1-1"]


def test_accumulate_follows_top_k_only_when_its_bound_is_not_given() -> None:
    assert make_context("accumulate", top_k=5).max_passages == 10
    assert make_context("accumulate:max_passages=4", top_k=5).max_passages == 4
    given = AccumulateContext()
    resolved = make_context(given, top_k=4)
    assert resolved.max_passages == 8 and given.max_passages is None  # the instance given is not changed
    assert make_context("rerank", top_k=9) == RerankContext()  # top_k sets no other policy's settings
    # outside an engine the bound is six
    six = [Passage(id=f"p{i}", title="", text="t") for i in range(8)]
    assert [p.id for p in AccumulateContext().after_retrieval(six[:4], six[4:])] == ["p2", "p3", "p4", "p5", "p6", "p7"]


def test_focus_reads_the_question_s_best_passages_and_the_look_s_best() -> None:
    """``focus``: after a later retrieval the prompt holds the question's first two passages and that retrieval's
    first one; every passage that leaves is named in the trace."""
    answer = "One is here. Two is here. Three is here. So the answer is three."
    result, _, lm = run("fs-rag", lambda p: words(answer), top_k=3, context="focus")
    first, second, third = result.retrievals[:3]
    assert first.held_ids == ["r1-0", "r1-1", "r1-2"]
    assert second.held_ids == ["r1-0", "r1-1", "r2-0"]
    assert second.evicted_ids == ["r1-2"] and [p.id for p in second.dropped] == ["r2-1", "r2-2"]
    assert third.held_ids == ["r1-0", "r1-1", "r3-0"] and third.evicted_ids == ["r2-0"]
    prompt = _prompts(lm)[1]  # the second sentence's: the question's two, then the second retrieval's best
    assert "evidence2" in prompt and prompt.index("evidence1") < prompt.index("evidence2")
    assert "evidence3" in _prompts(lm)[2] and "evidence2" not in _prompts(lm)[2]
    held = [Passage(id=f"q{i}", title="", text="t") for i in range(3)]
    assert FocusContext().after_retrieval(held, []) == held  # nothing new: nothing leaves
    assert make_context("focus:question=1,look=2", top_k=3) == make_context("focus", question=1, look=2, max_passages=6)
    with pytest.raises(InvalidOptionError, match="look"):
        make_context("focus:look=0")
