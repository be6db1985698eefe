"""A "same X" question answered by each name's X (``AnswerStage(same=True)``, :mod:`active_rag.answer.same_value`)."""

from __future__ import annotations

import io
import json

import pytest

from active_rag import ActiveRAG, AnswerStage, Passage
from active_rag.answer.same_value import same_question, same_value, settle_same, value_of
from active_rag.components.presets import PRESETS
from active_rag.components.settings import engine_kwargs
from tests.unit_tests.test_loop import ScriptedLM, words


@pytest.mark.parametrize("question, names, asked", [
    ("Do parso and jedi have the same author?", ("parso", "jedi"),
     ("Who is the author of parso?", "Who is the author of jedi?")),
    ("Do both nest-asyncio and nest-asyncio2 share the same license?", ("nest-asyncio", "nest-asyncio2"),
     ("What is the license of nest-asyncio?", "What is the license of nest-asyncio2?")),
    ("Are Mauritz Stiller and Johannes Grenzfurthner both of the same nationality?",
     ("Mauritz Stiller", "Johannes Grenzfurthner"),
     ("What is the nationality of Mauritz Stiller?", "What is the nationality of Johannes Grenzfurthner?")),
    ("Were Halldór Laxness and Timothy Leary from the same country?", ("Halldór Laxness", "Timothy Leary"),
     ("Which country was Halldór Laxness from?", "Which country was Timothy Leary from?")),
    ("Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?",
     ("the Laleli Mosque", "Esma Sultan Mansion"),
     ("In which neighborhood is the Laleli Mosque located?", "In which neighborhood is Esma Sultan Mansion located?")),
    ("Are the flowering plants Ecballium and Elatostema in the same family?",
     ("the flowering plants Ecballium", "Elatostema"),
     ("In which family is the flowering plants Ecballium?", "In which family is Elatostema?")),
    ("Do director of film Invisible Ghost and director of film Africa Texas Style have the same nationality?",
     ("director of film Invisible Ghost", "director of film Africa Texas Style"),
     ("What is the nationality of director of film Invisible Ghost?",
      "What is the nationality of director of film Africa Texas Style?")),
])
def test_a_same_question_becomes_one_question_a_name(question: str, names: tuple, asked: tuple) -> None:
    parsed = same_question(question)
    assert parsed is not None and parsed.names == names and parsed.questions == asked


@pytest.mark.parametrize("question", [
    "Are both Jim McBride and Neil Jordan American?",  # a "both" question: AnswerStage(each_name=True)
    "Who is the author of parso?",
    "Which requires a newer minimum Python version, typer or Pygments?",
    "Do both films Goodbye Again and The Mystery Of Pine Creek Camp have the directors that share the same nationality?",
    "Is parso the same package as jedi?",
])
def test_other_questions_are_not_read_as_same_questions(question: str) -> None:
    assert same_question(question) is None


def test_values_compare_by_their_words() -> None:
    assert value_of("The author of parso is David Halter. So the answer is David Halter <davidhalter88@gmail.com>.") \
        == "David Halter"
    assert value_of("So the answer is unknown.") == "" and value_of("So the answer is not mentioned.") == ""
    assert value_of("So the answer is Noam Chomsky.") == "Noam Chomsky"  # not a "no"
    assert same_value("David Halter", "david halter") is True
    assert same_value("The Jupyter Development Team", "Jupyter Development Team") is True
    assert same_value("U.S.", "American") is True and same_value("British", "United Kingdom") is True
    assert same_value("Andrew Svetlov", "Andrew Godwin") is False
    assert same_value("", "Andrew Godwin") is None
    assert settle_same(["David Halter", "David Halter"]) == "yes"
    assert settle_same(["David Halter", "Kenneth Reitz"]) == "no"
    assert settle_same(["David Halter", ""]) is None and settle_same([]) is None


Q = "Do parso and jedi have the same author?"
PARSO = Passage(id="p", title="parso", text="Name: parso\nAuthor: David Halter\nA Python parser.")
JEDI = Passage(id="j", title="jedi", text="Name: jedi\nAuthor: David Halter\nAn autocompletion tool for Python.")


class Corpus:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return [PARSO, JEDI][:k]


def _script(prompt: str):
    if "Who is the author of parso?" in prompt:
        return words("The author of parso is David Halter. So the answer is David Halter.")
    if "Who is the author of jedi?" in prompt:
        return words("Jedi is written by David Halter. So the answer is David Halter <davidhalter88@gmail.com>.")
    return words("They are different packages. So the answer is no.")


def _engine(lm: ScriptedLM, **kwargs) -> ActiveRAG:
    return ActiveRAG(lm, Corpus(), trigger="once", query="input", top_k=2, **kwargs)


def test_the_answer_is_what_the_two_values_settle() -> None:
    lm = ScriptedLM(script=_script)
    rag = _engine(lm, answer=AnswerStage(same=True))
    result = rag.run(Q)
    assert result.answer == "They are different packages. So the answer is no."  # what the model wrote
    assert result.short_answer == "yes"
    record = result.each_name
    assert record is not None and record["rule"] == "same" and record["attribute"] == "author"
    assert record["names"] == ["parso", "jedi"] and record["answer"] == "yes"
    assert [a["verdict"] for a in record["asked"]] == ["David Halter", "David Halter"]
    assert record["passage_ids"] == ["p", "j"]
    # each value was asked with the passages the answer was written from, in their order; no retrieval for them
    asked = [s.prompt_text for s in lm.sessions if "Who is the author of jedi?" in s.prompt_text]
    assert asked and asked[0].index("A Python parser") < asked[0].index("An autocompletion")
    assert len(result.retrievals) == 1
    data = json.loads(json.dumps(result.to_dict()))
    assert data["short_answer"] == "yes" and data["each_name"]["asked"][0]["question"] == "Who is the author of parso?"
    assert rag.describe()["ask_same"] is True
    plain = _engine(ScriptedLM(script=_script)).run(Q)
    assert result.generated_tokens > plain.generated_tokens and plain.each_name is None and plain.short_answer == "no"
    assert "ask_same" not in _engine(ScriptedLM(script=_script)).describe()


def test_a_missing_value_lets_the_readers_answer_stand_and_other_questions_ask_nothing() -> None:
    def unknown(prompt: str):
        if "Who is the author of jedi?" in prompt:
            return words("The passages do not say. So the answer is unknown.")
        return _script(prompt)

    result = _engine(ScriptedLM(script=unknown), answer=AnswerStage(same=True)).run(Q)
    assert result.each_name is not None and result.each_name["answer"] is None and result.short_answer == "no"
    lm = ScriptedLM(script=lambda prompt: words("So the answer is David Halter."))
    result = _engine(lm, answer=AnswerStage(same=True)).run("Who is the author of parso?")
    assert result.each_name is None and len(lm.sessions) == 1


def test_the_flat_name_the_presets_and_ask_print_the_values() -> None:
    from active_rag.cli.commands import _print_checks_and_cost

    assert engine_kwargs({"ask_same": True})["answer"] == AnswerStage(same=True)
    assert PRESETS["sr-rag-choose"].answer.same and PRESETS["look-again-choose"].answer.same
    result = _engine(ScriptedLM(script=_script), answer=AnswerStage(same=True)).run(Q)
    out = io.StringIO()
    _print_checks_and_cost(result, out)
    assert ("Each value asked: 'Who is the author of parso?': David Halter; 'Who is the author of jedi?': David Halter"
            " -> yes" in out.getvalue().splitlines())


def test_a_resume_answers_again_only_the_same_questions(tmp_path) -> None:
    import warnings

    from active_rag.evaluation.scoring import _read_rows
    from active_rag.evaluation.settled import convert_row

    def row(qid: str, question: str, prediction: str) -> dict:
        return {"id": qid, "question": question, "gold": ["yes"], "prediction": prediction, "answer": "no",
                "metrics": {"em": 0.0, "f1": 0.0}, "engine_key": "old"}

    path = tmp_path / "sr-rag-choose.jsonl"
    rows = [row("q1", Q, "So the answer is no."), row("q2", "Who is the author of parso?", "So the answer is David Halter.")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = _read_rows(path, "new", {"old": "same"})
    assert sorted(done) == ["q2"] and done["q2"]["settled_from"] == "old"
    assert "1 will be answered again" in " ".join(str(w.message) for w in caught)
    assert convert_row(rows[0], "new", "same") is None and convert_row(rows[1], "new", "same") is not None


def test_eval_ask_same_runs_a_control_with_the_rule() -> None:
    from active_rag.evaluation.config import EvalConfig, build_methods
    from active_rag.evaluation.method_engines import build_engine

    specs = build_methods(EvalConfig(dataset="pydocs", methods=["sr-rag", "sr-rag-choose"], ask_same=True))
    assert [(s.name, s.ask_same) for s in specs] == [("sr-rag@same", True), ("sr-rag-choose", False)]
    config = EvalConfig(dataset="pydocs", methods=["sr-rag"], ask_same=True)
    rag = build_engine(specs[0], ScriptedLM(script=_script), Corpus(), config)
    assert rag.ask_same and rag.describe()["ask_same"] is True
    result = rag.run(Q)
    assert result.each_name is not None and result.short_answer == "yes"
