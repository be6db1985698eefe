"""Unit tests of the dataset loaders and the evaluation prompts, on small in-test fixtures in the real formats."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from active_rag.errors import CorpusError, UnknownNameError
from active_rag.evaluation.answers import extract_answer
from active_rag.evaluation.datasets import (
    DATASETS,
    Example,
    corpus_path,
    default_data_dir,
    load_dataset,
    questions_path,
)
from active_rag.evaluation.prompts import (
    EXEMPLARS,
    RETRIEVALQA_NO_RETRIEVAL_TEMPLATE,
    build_eval_prompt,
    fewshot_block,
)
from active_rag.types import Passage

# ------------------------------------------------------------------------------------------------ fixtures


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _hotpot_question(qid: str, question: str, answer: str, contexts: list[tuple[str, str, bool]]) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_text": question,
        "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": [answer]}],
        "contexts": [
            {"id": str(i), "title": t, "paragraph_text": text, "is_supporting": sup}
            for i, (t, text, sup) in enumerate(contexts)
        ],
    }


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    # HotpotQA (IRCoT format): context ids are positions; paragraph text has double spaces, the corpus single.
    _write_jsonl(root / "hotpotqa/questions_dev.jsonl", [
        _hotpot_question("5a8c7595554299585d9e36b6", "What government position was held by the woman who portrayed "
                         "Corliss Archer in the film Kiss and Tell?", "Chief of Protocol", [
                             ("Meet Corliss Archer", "Meet Corliss Archer, a program.  It ran.", False),
                             ("Shirley Temple", "Shirley Temple Black was an actress.  She served as Chief of "
                              "Protocol.", True),
                             ("Kiss and Tell (1945 film)", "Kiss and Tell is a 1945 film.", True),
                         ]),
        _hotpot_question("5a85ea095542994775f606a8", "Were Scott Derrickson and Ed Wood of the same nationality?",
                         "yes", [
                             ("Ed Wood", "Edward Davis Wood Jr. was an American filmmaker.", True),
                             ("Scott Derrickson", "Scott Derrickson is an American director.", True),
                         ]),
    ])
    _write_jsonl(root / "hotpotqa/corpus.jsonl", [
        {"id": "hotpot-00000", "title": "Meet Corliss Archer", "text": "Meet Corliss Archer, a program. It ran.",
         "from": ["ircot_distractor500"]},
        {"id": "hotpot-00001", "title": "Shirley Temple",
         "text": "Shirley Temple Black was an actress. She served as Chief of Protocol.", "from": ["x"]},
        {"id": "hotpot-00002", "title": "Kiss and Tell (1945 film)", "text": "Kiss and Tell is a 1945 film.",
         "from": ["x"]},
        {"id": "hotpot-00003", "title": "Ed Wood", "text": "Ed Wood is a 1994 film.", "from": ["x"]},
        {"id": "hotpot-00004", "title": "Ed Wood", "text": "Edward Davis Wood Jr. was an American filmmaker.",
         "from": ["x"]},  # duplicate title: the one with the same text wins
        {"id": "hotpot-00005", "title": "Scott Derrickson", "text": "Scott Derrickson is an American director.",
         "from": ["x"]},
    ])
    # 2WikiMultihopQA
    _write_jsonl(root / "2wikimultihopqa/questions_dev.jsonl", [
        {"_id": "100c512a0bde11eba7f7acde48001122", "dev_row_index": 7316, "type": "compositional",
         "question": "Where was the place of burial of Charles Mathew's father?", "answer": "Cork",
         "supporting_facts": [["Charles Mathew", 2], ["James Charles Mathew", 1], ["Charles Mathew", 0]],
         "evidences": [["Charles James Mathew", "father", "Sir James Charles Mathew"]],
         "context": [["Charles Mathew", ["Charles James Mathew was a barrister.", "He was elected."]],
                     ["James Charles Mathew", ["Sir James Charles Mathew was a judge.", "Born in Cork."]],
                     ["Emperor Daigo", ["Daigo's reign spanned 897 to 930."]]],
         "entity_ids": "Q1", "evidences_id": [], "answer_id": "Q2"},
        {"_id": "2wiki-q2", "type": "comparison", "question": "Who was born first?", "answer": "Martin Hodge",
         "supporting_facts": [["Martin Hodge", 0], ["Nowhere Title", 0]], "evidences": [],
         "context": [["Martin Hodge", ["Martin Hodge was born in 1959."]]]},
    ])
    _write_jsonl(root / "2wikimultihopqa/corpus.jsonl", [
        {"id": "2wiki-00000", "title": "Emperor Daigo", "text": "Daigo's reign spanned 897 to 930.", "from": ["s"]},
        {"id": "2wiki-00007", "title": "Charles Mathew",
         "text": "Charles James Mathew was a barrister. He was elected.", "from": ["s"]},
        {"id": "2wiki-00008", "title": "James Charles Mathew",
         "text": "Sir James Charles Mathew was a judge. Born in Cork.", "from": ["s"]},
        {"id": "2wiki-00009", "title": "Martin Hodge", "text": "Martin Hodge was born in 1959.", "from": ["s"]},
    ])
    # StrategyQA: a JSON list; the fact corpus uses other question ids, and one fact differs by a trailing space.
    (root / "strategyqa").mkdir(parents=True)
    (root / "strategyqa/strategyqa_dev_229.json").write_text(json.dumps([
        {"qid": "e0044a7b4d146d611e73", "term": "Albany, Georgia", "description": "City in Georgia",
         "question": "Will the Albany in Georgia reach a hundred thousand occupants before the one in New York?",
         "answer": False, "facts": ["Albany, GA has around 75,000 people", "Albany, NY has almost 100,000 people "],
         "decomposition": ["What is the population of Albany, Georgia?"], "evidence": [[[["Albany, Georgia-1"]]]]},
        {"qid": "q2", "term": "Pear", "description": "fruit", "question": "Would a pear sink in water?",
         "answer": True, "facts": ["Pears are dense.", "A fact missing from the corpus."], "decomposition": [],
         "evidence": []},
    ], indent=2), encoding="utf-8")
    _write_jsonl(root / "strategyqa/corpus_facts.jsonl", [
        {"id": "aaa#f0", "title": "", "text": "Albany, GA has around 75,000 people", "qid": "aaa", "term": "x"},
        {"id": "bbb#f0", "title": "", "text": "Albany, GA has around 75,000 people", "qid": "bbb", "term": "x"},
        {"id": "bbb#f1", "title": "", "text": "Albany, NY has almost 100,000 people", "qid": "bbb", "term": "x"},
        {"id": "ccc#f0", "title": "", "text": "Pears are dense.", "qid": "ccc", "term": "Pear"},
    ])
    # RetrievalQA: contexts given out of rank order on purpose.
    _write_jsonl(root / "retrievalqa/questions_dev.jsonl", [
        {"question_id": "freshqa_379", "data_source": "freshqa", "question": "Who is the richest man on earth?",
         "ground_truth": ["Bernard Arnault", "Bernard Jean Étienne Arnault"], "param_knowledge_answerable": 0,
         "param_knowledge_answerable_is_inferred": True,
         "contexts": [{"rank": 2, "title": "The 10 Richest People", "text": "Elon Musk is the richest."},
                      {"rank": 1, "title": "Top 10 richest people in the world", "text": ""}],
         "num_contexts": 2, "prompt_token_num": 8},
        {"question_id": "triviaqa_1", "data_source": "triviaqa",
         "question": '"Which Czechoslovakian composer wrote the opera ""Jenufa""?"',
         "ground_truth": ["Leos Jancek", "leos jancek"], "param_knowledge_answerable": 1,
         "contexts": [{"rank": 1, "title": "Leoš Janáček", "text": "Czech composer."}]},
    ])
    _write_jsonl(root / "retrievalqa/corpus.jsonl", [
        {"id": "rqa-00000", "title": "t", "text": "x", "occurrences": [{"question_id": "freshqa_379", "rank": 2}]},
    ])
    return root


# ------------------------------------------------------------------------------------------------ loaders


def test_load_hotpotqa(data_dir: Path) -> None:
    examples = load_dataset("hotpotqa", data_dir)
    assert [e.id for e in examples] == ["5a8c7595554299585d9e36b6", "5a85ea095542994775f606a8"]
    first = examples[0]
    assert isinstance(first, Example)
    assert first.kind == "qa"
    assert first.answers == ["Chief of Protocol"]
    assert first.gold_titles == ["Shirley Temple", "Kiss and Tell (1945 film)"]
    assert first.gold_passage_ids == ["hotpot-00001", "hotpot-00002"]  # corpus ids, not the context positions
    assert first.contexts == [] and first.needs_retrieval is None and first.data_source is None
    assert first.raw["contexts"][1]["id"] == "1"
    second = examples[1]
    assert second.answers == ["yes"]
    assert second.gold_passage_ids == ["hotpot-00004", "hotpot-00005"]  # duplicate title resolved by text


def test_load_2wikimultihopqa(data_dir: Path) -> None:
    with pytest.warns(UserWarning, match="1 gold passage"):
        examples = load_dataset("2wikimultihopqa", data_dir)
    first, second = examples
    assert first.id == "100c512a0bde11eba7f7acde48001122"
    assert first.answers == ["Cork"] and first.kind == "qa"
    assert first.gold_titles == ["Charles Mathew", "James Charles Mathew"]  # first-seen order, no repeats
    assert first.gold_passage_ids == ["2wiki-00007", "2wiki-00008"]
    assert second.gold_titles == ["Martin Hodge", "Nowhere Title"]
    assert second.gold_passage_ids == ["2wiki-00009"]  # the title missing from the corpus is left out


def test_load_strategyqa(data_dir: Path) -> None:
    with pytest.warns(UserWarning, match="1 gold passage"):
        examples = load_dataset("strategyqa", data_dir)
    first, second = examples
    assert first.kind == "bool" and first.answers == ["no"] and first.gold_bool is False
    assert second.answers == ["yes"] and second.gold_bool is True
    # "bbb" holds both facts, so its copy of the duplicated first fact is preferred over "aaa#f0"
    assert first.gold_passage_ids == ["bbb#f0", "bbb#f1"]
    assert second.gold_passage_ids == ["ccc#f0"]
    assert first.gold_titles == []


def test_load_retrievalqa(data_dir: Path) -> None:
    examples = load_dataset("retrievalqa", data_dir)
    first, second = examples
    assert first.kind == "retrievalqa" and first.data_source == "freshqa"
    assert first.answers == ["Bernard Arnault", "Bernard Jean Étienne Arnault"]
    assert first.needs_retrieval is True
    assert [p.id for p in first.contexts] == ["freshqa_379#1", "freshqa_379#2"]  # sorted by rank, best first
    assert first.contexts[1] == Passage(id="freshqa_379#2", title="The 10 Richest People",
                                        text="Elon Musk is the richest.")
    assert first.contexts[0].metadata == {"rank": 1}
    assert first.gold_passage_ids == []
    assert second.needs_retrieval is False  # param_knowledge_answerable == 1
    assert second.question == '"Which Czechoslovakian composer wrote the opera ""Jenufa""?"'  # kept verbatim


def test_limit(data_dir: Path) -> None:
    assert [e.id for e in load_dataset("hotpotqa", data_dir, limit=1)] == ["5a8c7595554299585d9e36b6"]
    assert load_dataset("strategyqa", data_dir, limit=0) == []
    with pytest.raises(ValueError):
        load_dataset("hotpotqa", data_dir, limit=-1)


def test_malformed_jsonl_line_names_file_and_line(data_dir: Path) -> None:
    path = data_dir / "hotpotqa/questions_dev.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text(lines[0] + "\n" + '{"question_id": "x", "question_text": \n', encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape(f"{path}, line 2")):
        load_dataset("hotpotqa", data_dir)


def test_missing_key_names_file_line_and_key(data_dir: Path) -> None:
    path = data_dir / "retrievalqa/questions_dev.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n" + json.dumps({"question_id": "q3", "question": "Q?"}) + "\n")  # blank line 3, record on 4
    with pytest.raises(CorpusError, match=re.escape(f"{path}, line 4: missing key 'ground_truth'")):
        load_dataset("retrievalqa", data_dir)


def test_malformed_corpus_line(data_dir: Path) -> None:
    path = data_dir / "2wikimultihopqa/corpus.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write("not json\n")
    with pytest.raises(CorpusError, match=re.escape(f"{path}, line 5")):
        load_dataset("2wikimultihopqa", data_dir)


def test_malformed_strategyqa_json_names_line(data_dir: Path) -> None:
    path = data_dir / "strategyqa/strategyqa_dev_229.json"
    path.write_text('[\n  {"qid": "a",\n   "question": oops}\n]\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape(f"{path}, line 3")):
        load_dataset("strategyqa", data_dir, resolve_gold_ids=False)
    path.write_text(json.dumps([{"qid": "a", "question": "Q?", "answer": "yes"}]), encoding="utf-8")
    with pytest.raises(CorpusError, match="item 0: 'answer' must be bool"):
        load_dataset("strategyqa", data_dir, resolve_gold_ids=False)


def test_unknown_dataset_name(data_dir: Path) -> None:
    with pytest.raises(UnknownNameError, match="Unknown dataset 'nq'") as info:
        load_dataset("nq", data_dir)
    assert isinstance(info.value, ValueError)
    assert set(info.value.valid) == set(DATASETS)
    with pytest.raises(UnknownNameError):
        corpus_path("hotpot", data_dir)


def test_missing_files_name_path_and_layout(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(CorpusError) as info:
        load_dataset("hotpotqa", tmp_path / "empty")
    message = str(info.value)
    assert str(tmp_path / "empty" / "hotpotqa" / "questions_dev.jsonl") in message
    assert "strategyqa/strategyqa_dev_229.json" in message  # the expected layout
    (data_dir / "hotpotqa/corpus.jsonl").unlink()
    with pytest.raises(CorpusError, match="corpus.jsonl"):
        load_dataset("hotpotqa", data_dir)
    examples = load_dataset("hotpotqa", data_dir, resolve_gold_ids=False)
    assert examples[0].gold_passage_ids == [] and examples[0].gold_titles


def test_paths(data_dir: Path) -> None:
    assert corpus_path("hotpotqa", data_dir) == data_dir / "hotpotqa/corpus.jsonl"
    assert corpus_path("2wikimultihopqa", data_dir) == data_dir / "2wikimultihopqa/corpus.jsonl"
    assert corpus_path("strategyqa", data_dir) == data_dir / "strategyqa/corpus_facts.jsonl"
    assert corpus_path("retrievalqa", data_dir) == data_dir / "retrievalqa/corpus.jsonl"
    assert questions_path("strategyqa", data_dir) == data_dir / "strategyqa/strategyqa_dev_229.json"
    assert corpus_path("pydocs", data_dir) == data_dir / "pydocs/docs"
    assert DATASETS == ("hotpotqa", "2wikimultihopqa", "strategyqa", "retrievalqa", "pydocs")


def test_default_data_dir_env_then_cwd(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTIVE_RAG_DATA", str(data_dir))
    assert default_data_dir() == data_dir.resolve()
    assert [e.id for e in load_dataset("retrievalqa")] == ["freshqa_379", "triviaqa_1"]  # data_dir=None
    monkeypatch.delenv("ACTIVE_RAG_DATA")
    shared = tmp_path / "ws" / "shared" / "data"
    shared.mkdir(parents=True)
    (tmp_path / "ws" / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "ws" / "repo")
    assert default_data_dir() == shared.resolve()  # ../shared/data relative to the working directory
    monkeypatch.setenv("ACTIVE_RAG_DATA", str(tmp_path / "does-not-exist"))
    assert default_data_dir() == shared.resolve()  # a missing $ACTIVE_RAG_DATA is skipped


# ------------------------------------------------------------------------------------------------ prompts


@pytest.mark.parametrize(("dataset", "count"), [("2wikimultihopqa", 6), ("hotpotqa", 8), ("strategyqa", 6)])
def test_exemplars_end_with_an_answer_sentence(dataset: str, count: int) -> None:
    exemplars = EXEMPLARS[dataset]
    assert len(exemplars) == count
    for question, answer in exemplars:
        assert question.strip() == question and answer.strip() == answer
        assert re.search(r"So the answer is [^.]+(\.[^ .]+)*\.$", answer), answer
        assert extract_answer(answer)
    block = fewshot_block(dataset)
    assert block.count("Question: ") == count and block.count("\nAnswer: ") == count
    assert block.startswith("Question: ") and block.endswith(".\n\n")
    assert "$" not in block and "answer is ves" not in block  # OCR slips fixed


def test_exemplar_answers_as_in_the_paper() -> None:
    assert EXEMPLARS["2wikimultihopqa"][0] == (
        "When did the director of film Hypocrite (Film) die?",
        "The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 June 2013. "
        "So the answer is 19 June 2013.",
    )
    assert extract_answer(EXEMPLARS["hotpotqa"][1][1]) == "The Phantom Hour"
    assert [extract_answer(a) for _, a in EXEMPLARS["strategyqa"]] == ["yes", "yes", "no", "yes", "no", "no"]


def test_direct_prompts() -> None:
    hotpot = build_eval_prompt("hotpotqa", "Were Scott Derrickson and Ed Wood of the same nationality?")
    assert hotpot.startswith(fewshot_block("hotpotqa"))
    assert hotpot.endswith(
        "So the answer is Germany.\n\n"
        "Answer the following question by reasoning step-by-step, following the example above.\n"
        "Question: Were Scott Derrickson and Ed Wood of the same nationality?\nAnswer:"
    )
    assert "Context:" not in hotpot
    wiki = build_eval_prompt("2wikimultihopqa", "Who is the mother of the director of film Polish-Russian War (Film)?")
    assert wiki == fewshot_block("2wikimultihopqa") + (
        "Question: Who is the mother of the director of film Polish-Russian War (Film)?\nAnswer:"
    )  # appendix F Prompt 1 has no instruction line
    strategy = build_eval_prompt("strategyqa", "Are more people today related to Genghis Khan than Julius Caesar?", [])
    assert strategy.endswith(
        "So the answer is no.\n\nFollowing the examples above, answer the question by reasoning step-by-step.\n\n"
        "Question: Are more people today related to Genghis Khan than Julius Caesar?\nAnswer:"
    )


def test_prompts_with_documents() -> None:
    passages = [
        Passage(id="1", title="Scott Derrickson",
                text="Scott Derrickson (born July 16, 1966) is an\nAmerican director."),
        Passage(id="2", title="", text="Ed Wood was an American filmmaker."),
    ]
    prompt = build_eval_prompt("hotpotqa", "Were Scott Derrickson and Ed Wood of the same nationality?", passages)
    assert prompt == fewshot_block("hotpotqa") + (
        "Context:\n"
        "[1] Scott Derrickson Scott Derrickson (born July 16, 1966) is an American director.\n"
        "[2] Ed Wood was an American filmmaker.\n"
        "Answer in the same format as before.\n"
        "Answer the following question by reasoning step-by-step, following the example above.\n"
        "Question: Were Scott Derrickson and Ed Wood of the same nationality?\nAnswer:"
    )
    wiki = build_eval_prompt("2wikimultihopqa", "Q?", passages[:1])
    assert wiki.endswith("Answer in the same format as before.\nQuestion: Q?\nAnswer:")


def test_retrievalqa_prompts() -> None:
    assert build_eval_prompt("retrievalqa", "Who is the richest man on earth?") == (
        "Please use your own knowledge to answer the questions. Only include the answer in your response and try "
        'to be concise. If you do not know the answer, just say "I don\'t know".\n\n'
        "Question: Who is the richest man on earth?\nAnswer:"
    )
    assert build_eval_prompt("retrievalqa", "Q?", []) == RETRIEVALQA_NO_RETRIEVAL_TEMPLATE.format(question="Q?")
    passages = [Passage(id=f"q#{i}", title=f" Title {i} ", text=f"Text {i}. ") for i in range(1, 8)]
    prompt = build_eval_prompt("retrievalqa", "Q?", passages)
    assert prompt == (
        "Please answer the question based on the provided context. Only include the answer in your response and "
        'try to be concise. If you do not know the answer, just say "I don\'t know".\n\n'
        "Paragraph:\n"
        "[1] Title 1\nText 1.\n[2] Title 2\nText 2.\n[3] Title 3\nText 3.\n[4] Title 4\nText 4.\n[5] Title 5\nText 5."
        "\n\nQuestion: Q?\nAnswer:"
    )


def test_router_prompts() -> None:
    from active_rag.components.routing import TaAreRouter, VanillaRouter

    vanilla = VanillaRouter(None).prompt("Q?")  # type: ignore[arg-type]
    assert vanilla.endswith('Only answer "[Yes]" or "[No]".\n\nQuestion: Q?\nAnswer:')
    taare = TaAreRouter(None, today="2024-02-01").prompt("Q?")  # type: ignore[arg-type]
    assert taare.startswith("Today is 2024-02-01. Given a question")
    assert "What is Walter de la Pole's occupation?\nAnswer: [Yes].\n\n\n\nQuestion: Q?\nAnswer:" in taare


def test_prompt_unknown_dataset() -> None:
    with pytest.raises(UnknownNameError):
        build_eval_prompt("nq", "Q?")
    with pytest.raises(UnknownNameError):
        fewshot_block("retrievalqa")  # RetrievalQA's answer prompts are zero-shot
