"""Answers whose text holds a period that is no full stop are never cut: an initial ("J. Nick Koston"), a decimal
or version ("Python 3.10", ">=3.9", "v2.1"), an abbreviation ("U.S. Steel", "Acme Inc."), an ellipsis
("...And Justice for All") and a quoted title with periods inside ("Mr. Smith Goes to Washington").

Checked on the plain rules (the answer-complete stop rule, the answer span / ``short_answer``), on the engine
(stop rule while decoding, the forced answer after "So the answer is", streaming), on ``active-rag ask`` and on
both adapters. The model is scripted piece by piece, so that the "." of "3.10" is a token of its own, as it is for
a real tokenizer: the stop rule sees "... Python 3." before "10" comes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from active_rag import ActiveRAG, ActiveRAGResult, AnswerStream, TokenEvent, TokenStep
from active_rag.answer_end import answer_body_end, completed_answer_end
from active_rag.stopping import COMPLETED_ANSWER_RE, has_completed_answer
from active_rag.answer_span import answer_span

QUESTION = "What does the answer say?"
PHRASE = [" So", " the", " answer", " is"]
REASONING = [" We", " checked", " the", " docs", "."]
AFTER = [" Next", " question", ":", " Who", "?"]  # what a model writes after its answer sentence


@dataclass(frozen=True)
class Form:
    """An answer form: its tokens, the short answer it reads as, and what follows its sentence's full stop."""

    name: str
    pieces: tuple[str, ...]
    short: str
    after: tuple[str, ...] = tuple(AFTER)

    @property
    def text(self) -> str:
        return "".join(self.pieces).strip()

    @property
    def sentence(self) -> str:
        return "So the answer is " + self.text + ("" if self.text.endswith(".") else ".")


FORMS = [
    Form("initial", (" J", ".", " Nick", " Koston"), "J. Nick Koston"),
    Form("decimal", (" Python", " 3", ".", "10"), "Python 3.10"),
    Form("version-range", (" >=", "3", ".", "9"), ">=3.9"),
    Form("version", (" v", "2", ".", "1"), "v2.1"),
    Form("us", (" U", ".", "S", ".", " Steel"), "U.S. Steel"),
    Form("inc", (" Acme", " Inc", "."), "Acme Inc.", ("\n", "Question", ":", " Who", "?")),
    Form("ellipsis", (" .", ".", ".", "And", " Justice", " for", " All"), "...And Justice for All"),
    Form("quoted-mr", (' "', "Mr", ".", " Smith", " Goes", " to", " Washington", '"'), "Mr. Smith Goes to Washington"),
    Form("quoted", (' "', "Stop", ".", " Look", ".", " Listen", '"'), "Stop. Look. Listen"),
]
IDS = [f.name for f in FORMS]


def answer_pieces(form: Form) -> list[str]:
    """The answer sentence's tokens: the phrase, the answer, and its full stop (unless the answer ends with one)."""
    return [*PHRASE, *form.pieces, *([] if form.text.endswith(".") else ["."])]


# -- the plain rules ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_the_stop_rule_waits_past_each_period_of_the_answer(form: Form) -> None:
    """While decoding, no prefix of the answer sentence is a finished answer, not even the whole sentence (the next
    token may continue it); the sentence with what follows it is, and it ends at its full stop."""
    pieces = ["We checked the docs.", *answer_pieces(form)]
    text = ""
    for piece in pieces:
        text += piece
        assert not has_completed_answer(text), text
        assert COMPLETED_ANSWER_RE.search(text) is None, text
    sentence_end = len(text)
    for piece in form.after:
        text += piece
        if has_completed_answer(text):
            break
    assert completed_answer_end(text) == sentence_end
    assert text[:sentence_end].endswith(form.sentence)


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_the_short_answer_keeps_the_answer_whole(form: Form) -> None:
    """``short_answer`` (the answer span) of the finished answer, with or without text after its sentence."""
    sentence = "We checked the docs. " + form.sentence
    for answer in (sentence, sentence + "".join(form.after), sentence + "\n"):
        assert ActiveRAGResult(question=QUESTION, answer=answer, method="m").short_answer == form.short, answer
        start, end = answer_span(answer) or (0, 0)
        assert answer[start:end] == form.short


@pytest.mark.parametrize(
    "body",
    [" J. Nick Koston.| Next", " Python 3.10.| It", " >=3.9.|\n", " v2.1.| The", " U.S. Steel.| It", " Acme Inc.|\nQ",
     " ...And Justice for All.| It", ' "Mr. Smith Goes to Washington".| It', ' "Stop. Look. Listen."| It',
     " Paris.|</s>", " os.path.join.| It", " Python 3.", " J.", " Acme Inc. The", ' "Stop. Look', " Python 3.x-dev"],
)
def test_the_answer_after_a_forced_phrase_ends_at_its_full_stop(body: str) -> None:
    """The rule the forced answer stops on: where the answer written after "So the answer is" ends ("|"), or
    ``None`` while the text after the last period does not tell yet."""
    end = body.find("|")
    assert answer_body_end(body.replace("|", ""), 1) == (end if end >= 0 else None)


def test_a_full_stop_after_a_word_still_ends_the_answer() -> None:
    """The rule still stops a plain answer, and a yes/no answer, once the next sentence begins."""
    assert completed_answer_end("So the answer is Paris. The") == len("So the answer is Paris.")
    assert completed_answer_end("So the answer is No. The end") == len("So the answer is No.")
    assert not has_completed_answer("So the answer is No. 5 of the list")
    assert not has_completed_answer("So the answer is Mr. Smith")
    assert not has_completed_answer("So the answer is 1.5")


# -- a model scripted piece by piece -----------------------------------------------------------------------------

ASSISTANT = " <assistant>"
EOS = None


class PieceSession:
    """Writes the script's pieces in order, from where the answer's text stands (forced words included)."""

    def __init__(self, lm: PieceLM, ids: list[int]) -> None:
        self.lm, self.ids = lm, list(ids)
        self.finished = False
        self.answer_start = max(i for i, t in enumerate(ids) if lm.pieces[t] == ASSISTANT) + 1
        self.max_attention = torch.zeros(len(ids))

    def generate(self, n: int, *, stop: Any = None, logits_processor: Any = None, **_: object) -> Iterator[TokenStep]:
        steps: list[TokenStep] = []
        for _ in range(n):
            piece = self.lm.next_piece(self.lm.decode(self.ids[self.answer_start:]))
            if piece is None:
                self.finished = True
                return
            token_id = self.lm.piece_id(piece)
            step = TokenStep(id=token_id, text=piece, logprob=-0.01, entropy=0.1, position=len(self.ids))
            self.ids.append(token_id)
            self.lm.generated += 1
            steps.append(step)
            yield step
            if stop is not None and stop(steps):
                return

    def crop(self, length: int) -> None:
        del self.ids[length:]
        self.finished = False

    def extend(self, ids: Sequence[int]) -> None:
        self.ids.extend(ids)

    def commit(self) -> None:
        pass


@dataclass
class PieceLM:
    """A model that writes ``script`` (pieces; ``EOS`` ends a generation there)."""

    script: list[str | None]
    name: str = "pieces"
    max_context: int = 100_000
    supports_attention: bool = False
    system_prompt: str | None = None
    eos_token_ids: frozenset[int] = frozenset()
    pieces: list[str] = field(default_factory=list)
    generated: int = 0

    def piece_id(self, piece: str) -> int:
        if piece not in self.pieces:
            self.pieces.append(piece)
        return self.pieces.index(piece)

    def next_piece(self, written: str) -> str | None:
        offset = 0
        for piece in self.script:
            if piece is None:
                if offset == len(written):
                    return None
                continue
            if offset == len(written):
                return piece
            offset += len(piece)
        assert offset >= len(written), f"the engine wrote past the script: {written!r}"
        return None

    def encode(self, text: str) -> list[int]:
        return [self.piece_id(" " + w) for w in text.split()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.pieces[i] for i in ids)

    def token_text(self, context: Sequence[int], token_id: int) -> str:
        return self.pieces[token_id]

    def prompt_ids(self, user: str) -> list[int]:
        return self.encode(user)

    def chat_parts(self, user: str) -> tuple[str, str]:
        return "<user> ", ASSISTANT

    def session(self, ids: Sequence[int], *, capture_attention: bool = False) -> PieceSession:
        return PieceSession(self, list(ids))

    def require_attention(self) -> None:
        pass


class Passages:
    def retrieve(self, query: str, k: int) -> list[Any]:
        from active_rag import Passage

        return [Passage(id=f"p{i}", title=f"Doc {i}", text="evidence text") for i in range(k)]


def written(form: Form) -> list[str | None]:
    """The model writes its reasoning and the answer sentence, then goes on."""
    return [*REASONING, *answer_pieces(form), *form.after]


def forced(form: Form) -> list[str | None]:
    """The model writes its reasoning and stops; after the forced "So the answer is" it writes the answer, goes on."""
    return [*REASONING, EOS, "".join(PHRASE), *form.pieces, *([] if form.text.endswith(".") else ["."]), *form.after]


def expected_answer(form: Form) -> str:
    return "We checked the docs. " + form.sentence


def replay(events: Sequence[Any]) -> str:
    """The answer as the streamed tokens build it (a token at an earlier position replaces the output from there)."""
    tokens: list[str] = []
    for event in events:
        if isinstance(event, TokenEvent):
            del tokens[event.position:]
            tokens.append(event.text)
    return "".join(tokens).strip()


# -- the engine --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["wo-rag", "sr-rag", "fs-rag"])
@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_the_engine_stops_after_the_whole_answer(form: Form, preset: str) -> None:
    """Decoding stops on the finished answer sentence, one token past its full stop, and cuts that token off: the
    answer is whole, nothing after it is kept or streamed, and the extra token counts in the cost."""
    lm = PieceLM(written(form))
    rag = ActiveRAG.from_preset(preset, lm, Passages(), max_new_tokens=64, top_k=1)
    events = list(rag.stream(QUESTION))
    result = events[-1]
    assert isinstance(result, ActiveRAGResult)
    assert result.answer == expected_answer(form)
    assert result.short_answer == form.short
    assert replay(events) == result.answer
    assert not any(isinstance(e, TokenEvent) and e.text == form.after[0] for e in events)
    if preset != "fs-rag":  # fs-rag's sentence segments also cut the first token of each next sentence
        assert result.generated_tokens == lm.generated == len(result.tokens) + 1


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_the_forced_answer_is_written_whole(form: Form) -> None:
    """DRAGIN App. B: "So the answer is" is appended when the model did not write it; the model's answer after it
    runs to its full stop, not to the first period."""
    lm = PieceLM(forced(form))
    rag = ActiveRAG.from_preset("wo-rag", lm, Passages(), max_new_tokens=64, answer_phrase="So the answer is")
    events = list(rag.stream(QUESTION))
    result = events[-1]
    assert isinstance(result, ActiveRAGResult)
    assert result.answer == expected_answer(form)
    assert result.short_answer == form.short
    assert replay(events) == result.answer
    stream = rag.answer_stream()
    sent = "".join(stream.push(e) for e in events if isinstance(e, TokenEvent)) + stream.finish(result.answer)
    assert sent == result.answer


# -- the command line and the adapters ---------------------------------------------------------------------------


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``active-rag ask`` with the scripted model in place of the one ``--model`` names."""
    import active_rag.cli.commands as commands

    def use(script: list[str | None]) -> None:
        monkeypatch.setattr(commands, "load_model", lambda *args, **kwargs: PieceLM(script))

    return use


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_ask_prints_the_whole_answer(form: Form, scripted_cli: Any, corpus: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from active_rag.cli.commands import main

    base = ["ask", QUESTION, "--model", "scripted", "--corpus", str(corpus), "--method", "wo-rag",
            "--max-new-tokens", "64"]
    scripted_cli(written(form))
    assert main(base) == 0
    out = capsys.readouterr().out
    assert f"Answer:   {expected_answer(form)}\n" in out
    assert f"Short answer: {form.short}\n" in out
    scripted_cli(forced(form))  # --answer-options forces "So the answer is" (no options in this question)
    assert main([*base, "--answer-options", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["answer"], data["short_answer"]) == (expected_answer(form), form.short)
    scripted_cli(written(form))
    assert main([*base, "--stream"]) == 0
    streamed = capsys.readouterr().out.split("Retrievals:", 1)[0]
    assert streamed.strip() == expected_answer(form)


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_langchain_invoke_returns_the_whole_answer(form: Form, monkeypatch: pytest.MonkeyPatch) -> None:
    import langchain_active_rag.chain as chain
    from langchain_active_rag import ActiveRAG as LangChainActiveRAG

    monkeypatch.setattr(chain, "resolve_lm", lambda model, *args, **kwargs: model)
    rag = LangChainActiveRAG(PieceLM(written(form)), preset="wo-rag", max_new_tokens=64)
    out = rag.invoke(QUESTION)
    assert (out["answer"], out["short_answer"]) == (expected_answer(form), form.short)
    rag = LangChainActiveRAG(PieceLM(forced(form)), preset="wo-rag", max_new_tokens=64,
                             answer_phrase="So the answer is")
    chunks = list(rag.stream(QUESTION))
    assert "".join(c.get("answer", "") for c in chunks) == expected_answer(form)
    assert [c["short_answer"] for c in chunks if "short_answer" in c] == [form.short]


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_llamaindex_query_returns_the_whole_answer(form: Form, tiny_lm: Any) -> None:
    """The query engine reports a real model (its ``ActiveHFLLM``); the engine then answers with the scripted one."""
    from llamaindex_active_rag import ActiveRAGQueryEngine

    for script, phrase in ((written(form), None), (forced(form), "So the answer is")):
        rag = ActiveRAG.from_preset("wo-rag", tiny_lm, Passages(), max_new_tokens=64, answer_phrase=phrase)
        engine = ActiveRAGQueryEngine.from_engine(rag)
        rag.model = PieceLM(script)
        response = engine.query(QUESTION)
        assert response.response == expected_answer(form)
        assert response.metadata["short_answer"] == form.short
