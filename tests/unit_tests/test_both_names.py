"""A "both" question asked name by name (``AnswerStage(each_name=True)``, :mod:`active_rag.answer.both_names`)."""

from __future__ import annotations

import io
import json

import pytest

from active_rag import ActiveRAG, AnswerStage, Passage
from active_rag.answer.both_names import both_question, settle_both, yes_or_no
from active_rag.components.settings import engine_kwargs
from tests.unit_tests.test_loop import ScriptedLM, Word, words


@pytest.mark.parametrize("question, names, asked", [
    ("Are both Jim McBride and Neil Jordan American?", ("Jim McBride", "Neil Jordan"),
     ("Is Jim McBride American?", "Is Neil Jordan American?")),
    ("Are Ranger Rick and Tennis both sports magazines?", ("Ranger Rick", "Tennis"),
     ("Is Ranger Rick sports magazines?", "Is Tennis sports magazines?")),
    ("Were both the Battle of Stones River and the Battle of the Ch'ongch'on River fought in the 19th century?",
     ("the Battle of Stones River", "the Battle of the Ch'ongch'on River"),
     ("Was the Battle of Stones River fought in the 19th century?",
      "Was the Battle of the Ch'ongch'on River fought in the 19th century?")),
    ("Are both Adolfo Bioy Casares and James Norman Hall Argentinian authors?",
     ("Adolfo Bioy Casares", "James Norman Hall"),
     ("Is Adolfo Bioy Casares Argentinian authors?", "Is James Norman Hall Argentinian authors?")),
    ("Are both Dziga Vertov and Roger Donaldson are involved in the film industry?", ("Dziga Vertov", "Roger Donaldson"),
     ("Is Dziga Vertov involved in the film industry?", "Is Roger Donaldson involved in the film industry?")),
    ("Can Stenocereus and Pachypodium both include tree like plants?", ("Stenocereus", "Pachypodium"),
     ("Can Stenocereus include tree like plants?", "Can Pachypodium include tree like plants?")),
    ("Are both Elko Regional Airport and Gerald R. Ford International Airport located in Michigan?",
     ("Elko Regional Airport", "Gerald R. Ford International Airport"),
     ("Is Elko Regional Airport located in Michigan?", "Is Gerald R. Ford International Airport located in Michigan?")),
])
def test_a_both_question_becomes_one_question_a_name(question: str, names: tuple, asked: tuple) -> None:
    parsed = both_question(question)
    assert parsed is not None and parsed.names == names and parsed.questions == asked


@pytest.mark.parametrize("question", [
    "Are Mauritz Stiller and Johannes Grenzfurthner both of the same nationality?",  # "same": not one property each
    "Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?",
    "What genre of music was played by both Tappi Tíkarrass and INXS?",  # not a yes-no question
    "Josey Scott and Ian Watkins were both promising musicians. Which of these men was incarcerated?",
    "Is Karjiang a mountain and Sherpi Kangri a mountain peak?",  # no "both"
    "Who is older, Annie Morton or Terry Richardson?",
])
def test_other_questions_are_not_read_as_both_questions(question: str) -> None:
    assert both_question(question) is None


def test_yes_or_no_reads_the_answer_span_and_settle_both_needs_every_yes() -> None:
    assert yes_or_no("Neil Jordan is Irish. So the answer is no.") == "no"
    assert yes_or_no("Yes, he is. So the answer is: Yes.") == "yes"
    assert yes_or_no("No. He is Irish, so the answer is yes.") == "yes"  # the span after the phrase decides
    assert yes_or_no("He is a director. So the answer is Irish.") is None
    assert settle_both(["yes", "no"]) == "no" and settle_both(["no", None]) == "no"
    assert settle_both(["yes", "yes"]) == "yes"
    assert settle_both(["yes", None]) is None and settle_both([]) is None


Q = "Are both Jim McBride and Neil Jordan American?"
JIM = Passage(id="j", title="Jim McBride", text="Jim McBride is an American film director.")
NEIL = Passage(id="n", title="Neil Jordan", text="Neil Jordan is an Irish film director.")


class Corpus:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return [JIM, NEIL][:k]


def _script(prompt: str) -> list[Word]:
    if "Is Neil Jordan American?" in prompt:
        return words("Neil Jordan is an Irish film director. So the answer is no.")
    if "Is Jim McBride American?" in prompt:
        return words("Jim McBride is an American film director. So the answer is yes.")
    return words("Both are American film directors. So the answer is yes.")


def _engine(lm: ScriptedLM, **kwargs) -> ActiveRAG:
    return ActiveRAG(lm, Corpus(), trigger="once", query="input", top_k=2, **kwargs)


def test_a_yes_stands_only_when_each_name_is_a_yes() -> None:
    lm = ScriptedLM(script=_script)
    rag = _engine(lm, answer=AnswerStage(each_name=True))
    result = rag.run(Q)
    assert result.answer == "Both are American film directors. So the answer is yes."  # what the model wrote
    assert result.short_answer == "no"
    record = result.each_name
    assert record is not None and record["answer"] == "no" and record["names"] == ["Jim McBride", "Neil Jordan"]
    assert [a["verdict"] for a in record["asked"]] == ["yes", "no"]
    assert record["passage_ids"] == ["j", "n"]
    # each name's question was asked with the passages the answer was written from, in their order
    asked = [s.prompt_text for s in lm.sessions if "Is Neil Jordan American?" in s.prompt_text]
    assert asked and asked[0].index("Jim McBride is an American") < asked[0].index("Neil Jordan is an Irish")
    assert len(result.retrievals) == 1  # no retrieval for them
    data = json.loads(json.dumps(result.to_dict()))
    assert data["short_answer"] == "no" and data["each_name"]["asked"][1]["question"] == "Is Neil Jordan American?"
    assert rag.describe()["ask_each_name"] is True
    # what the questions cost is counted: three answers' generated tokens
    plain = _engine(ScriptedLM(script=_script)).run(Q)
    assert result.generated_tokens > plain.generated_tokens and plain.each_name is None and plain.short_answer == "yes"
    assert "ask_each_name" not in _engine(ScriptedLM(script=_script)).describe()


def test_a_no_and_other_questions_are_not_asked_again() -> None:
    lm = ScriptedLM(script=lambda prompt: words("Neil Jordan is Irish. So the answer is no."))
    result = _engine(lm, answer=AnswerStage(each_name=True)).run(Q)
    assert result.each_name is None and result.short_answer == "no" and len(lm.sessions) == 1
    lm = ScriptedLM(script=lambda prompt: words("They are. So the answer is yes."))
    result = _engine(lm, answer=AnswerStage(each_name=True)).run("Are Jim McBride and Neil Jordan of the same nationality?")
    assert result.each_name is None and len(lm.sessions) == 1


def test_the_flat_name_and_ask_prints_what_each_name_answered() -> None:
    from active_rag.cli.commands import _print_checks_and_cost

    assert engine_kwargs({"ask_each_name": True})["answer"] == AnswerStage(each_name=True)
    result = _engine(ScriptedLM(script=_script), answer=AnswerStage(each_name=True)).run(Q)
    out = io.StringIO()
    _print_checks_and_cost(result, out)
    assert ("Each name asked: 'Is Jim McBride American?': yes; 'Is Neil Jordan American?': no -> no"
            in out.getvalue().splitlines())


def _row(key: str, qid: str, question: str, prediction: str) -> dict:
    return {"id": qid, "question": question, "gold": ["no"], "prediction": prediction, "answer": "yes",
            "metrics": {"em": 0.0, "f1": 0.0}, "engine_key": key}


def test_a_resume_carries_over_every_row_the_rule_would_not_ask_again(tmp_path) -> None:
    import warnings

    from active_rag.evaluation.scoring import _read_rows
    from active_rag.evaluation.settled import convert_row

    path = tmp_path / "look-again-choose.jsonl"
    rows = [_row("old", "q1", Q, "Both are. So the answer is yes."),  # asked again
            _row("old", "q2", Q, "Neil Jordan is Irish. So the answer is no."),  # a "no": carried over
            _row("old", "q3", "Who directed Angel?", "So the answer is Neil Jordan."),  # not a both question
            _row("older", "q4", "Who is older, Annie Morton or Terry Richardson?",
                 "Annie Morton was born in 1970 and Terry Richardson in 1965. So the answer is Annie Morton.")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = _read_rows(path, "new", {"old": "each-name", "older": "dates+each-name"})
    assert sorted(done) == ["q2", "q3", "q4"]
    assert all(done[i]["engine_key"] == "new" and done[i]["settled_from"] in ("old", "older") for i in done)
    assert done["q4"]["answer"] == "Terry Richardson"  # the dates settled on the way
    assert "1 will be answered again" in " ".join(str(w.message) for w in caught)
    aside = [json.loads(line) for p in (tmp_path / "other-settings").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(aside) == 4  # nothing lost
    assert convert_row(rows[0], "new", "each-name") is None

