"""Unit tests of active_rag.components.queries: every query formulator on hand-made contexts."""

from __future__ import annotations

import math

import pytest
import torch

from active_rag.errors import UnknownNameError
from active_rag.components.queries import (
    GENERATED_QUESTION_PROMPT,
    QUERIES,
    QUERY_ALIASES,
    AttentionQuery,
    FollowUpQuery,
    FullContextQuery,
    GeneratedQuestionsQuery,
    InputQuery,
    LastSentenceQuery,
    LastTokensQuery,
    MaskedSentenceQuery,
    QueryContext,
    SearchTagQuery,
    make_query,
)
from active_rag.types import TokenStep, TriggerDecision

QUESTION = "Who is the father of Kasper Schmeichel?"


def seg(pieces: list[str], probs: list[float] | None = None, start: int = 30) -> list[TokenStep]:
    probs = probs or [0.9] * len(pieces)
    return [
        TokenStep(id=100 + i, text=t, logprob=math.log(p), entropy=1.0, position=start + i)
        for i, (t, p) in enumerate(zip(pieces, probs, strict=True))
    ]


def ctx(output: list[TokenStep], segment: list[TokenStep], *, index: int | None = None, action: str = "truncate", hint: str | None = None, **kw) -> QueryContext:
    decision = TriggerDecision(fire=True, trigger="test", index=index, query_hint=hint)
    return QueryContext(question=QUESTION, output=output, segment=segment, decision=decision, action=action, **kw)


class StubLM:
    """Stands in for ActiveLM.complete: returns a fixed reply and records the prompts."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[tuple[str, int]] = []

    def complete(self, prompt: str, *, max_new_tokens: int = 32, **kwargs: object) -> str:
        self.calls.append((prompt, max_new_tokens))
        return self.reply


# -- input / last tokens / last sentence / full context ------------------------------------------------
def test_input_query() -> None:
    assert InputQuery().formulate(ctx(seg([" a"]), seg([" b"]), index=0)) == [QUESTION]


OUTPUT = seg([" Kasper", " is", " a", " Danish"], start=30)
SEGMENT = seg([" goal", "keeper", " who", " plays", " for"], start=34)


def test_last_tokens_before_the_retrieval_point() -> None:
    q = LastTokensQuery(n=4)
    assert q.formulate(ctx(OUTPUT, SEGMENT, index=2, action="truncate")) == ["a Danish goalkeeper"]
    assert q.formulate(ctx(OUTPUT, SEGMENT, index=2, action="continue")) == ["keeper who plays for"]
    assert q.formulate(ctx(OUTPUT, SEGMENT, index=2, action="regenerate")) == ["keeper who plays for"]
    assert q.formulate(ctx(OUTPUT, SEGMENT, index=None, action="truncate")) == ["keeper who plays for"]
    assert LastTokensQuery().n == 16
    assert LastTokensQuery().formulate(ctx(OUTPUT, SEGMENT, index=2)) == ["Kasper is a Danish goalkeeper"]
    assert LastTokensQuery(n=2).formulate(ctx([], SEGMENT, index=0)) == [""]


def test_last_sentence_query() -> None:
    output = seg(["Kasper", " is", " Danish", ".", " He", " plays"])
    segment = seg([" in", " goal", " for", " Leicester", "."], start=36)
    q = LastSentenceQuery()
    assert q.formulate(ctx(output, segment, action="continue")) == ["He plays in goal for Leicester."]
    # truncated before " Leicester": the last sentence is incomplete, so the previous complete one is used
    assert q.formulate(ctx(output, segment, index=3, action="truncate")) == ["Kasper is Danish."]
    assert q.formulate(ctx([], seg(["He", " plays", " in"]), index=2, action="truncate")) == ["He plays"]
    assert q.formulate(ctx([], seg(["Kasper", " is", "."]), index=3, action="truncate")) == ["Kasper is."]
    assert q.formulate(ctx([], seg(["Kasper"]), index=0, action="truncate")) == []


def test_full_context_query() -> None:
    output = seg(["Kasper", " is", " Danish", "."])
    segment = seg([" He", " is", " the", " son"], start=34)
    assert FullContextQuery().formulate(ctx(output, segment, index=2)) == [f"{QUESTION} Kasper is Danish. He is"]
    assert FullContextQuery().formulate(ctx(output, segment, index=2, action="continue")) == [
        f"{QUESTION} Kasper is Danish. He is the son"
    ]
    assert FullContextQuery().formulate(ctx([], [], index=None)) == [QUESTION]


def test_search_tag_and_follow_up_queries_use_the_hint() -> None:
    for cls in (SearchTagQuery, FollowUpQuery):
        assert cls().formulate(ctx([], seg(["x"]), index=0, hint="Danish goalkeeper")) == ["Danish goalkeeper"]
        assert cls().formulate(ctx([], seg(["x"]), index=0, hint=None)) == []


# -- masked sentence (FLARE implicit query) ------------------------------------------------------------
MASK_OUTPUT = seg(["Kasper", " is", " a", " goalkeeper", "."], start=20)
MASK_PIECES = [" Peter", " Sch", "meichel", " was", " born", " in", " 19", "63", "."]
MASK_PROBS = [0.9, 0.9, 0.2, 0.9, 0.9, 0.9, 0.9, 0.3, 0.9]


def test_masked_sentence_removes_words_with_a_low_probability_token() -> None:
    c = ctx(MASK_OUTPUT, seg(MASK_PIECES, MASK_PROBS, start=25), action="regenerate")
    (query,) = MaskedSentenceQuery().formulate(c)
    assert query.split() == ["Peter", "was", "born", "in", "."]  # only the look-ahead sentence, not the output
    assert c.details["masked_words"] == ["Schmeichel", "1963"]
    assert MaskedSentenceQuery().beta == 0.4


def test_masked_sentence_beta_and_truncation() -> None:
    c = ctx(MASK_OUTPUT, seg(MASK_PIECES, MASK_PROBS, start=25), action="regenerate")
    assert MaskedSentenceQuery(beta=0.25).formulate(c)[0].split() == ["Peter", "was", "born", "in", "1963", "."]
    assert c.details["masked_words"] == ["Schmeichel"]
    # truncate: the sentence runs up to and including the triggering token " 19"
    t = ctx(MASK_OUTPUT, seg(MASK_PIECES, MASK_PROBS, start=25), index=6, action="truncate")
    assert MaskedSentenceQuery().formulate(t) == ["Peter was born in 19"]
    assert t.details["masked_words"] == ["Schmeichel"]


def test_masked_sentence_uses_the_last_sentence_of_a_multi_sentence_segment() -> None:
    pieces = [" He", " is", " Danish", ".", " His", " father", " is", " Peter", "."]
    probs = [0.9, 0.9, 0.1, 0.9, 0.9, 0.1, 0.9, 0.9, 0.9]
    c = ctx([], seg(pieces, probs), action="regenerate")
    assert MaskedSentenceQuery().formulate(c)[0].split() == ["His", "is", "Peter", "."]
    assert c.details["masked_words"] == ["father"]


# -- generated questions (FLARE explicit queries) ------------------------------------------------------
GQ_PIECES = [" Peter", " Sch", "meichel", " was", " born", " in", " Glad", "saxe", "."]
GQ_PROBS = [0.3, 0.9, 0.2, 0.9, 0.9, 0.1, 0.9, 0.35, 0.9]


def test_generated_questions_spans() -> None:
    # " in" is low too, but a stop word: it neither forms a span nor joins two spans
    assert GeneratedQuestionsQuery().spans(seg(GQ_PIECES, GQ_PROBS)) == ["Peter Schmeichel", "Gladsaxe"]
    assert GeneratedQuestionsQuery(beta=0.25).spans(seg(GQ_PIECES, GQ_PROBS)) == ["Schmeichel"]
    assert GeneratedQuestionsQuery().spans(seg(GQ_PIECES)) == []


def test_generated_questions_ask_the_model_once_per_span() -> None:
    lm = StubLM("\n  Where was Peter Schmeichel born?  \nIgnored second line")
    output = seg(["Kasper", " is", " Danish", "."], start=20)
    c = ctx(output, seg(GQ_PIECES, GQ_PROBS), action="regenerate", lm=lm)
    assert GeneratedQuestionsQuery().formulate(c) == ["Where was Peter Schmeichel born?"] * 2
    context = f"{QUESTION}\nKasper is Danish. Peter Schmeichel was born in Gladsaxe."
    assert lm.calls == [
        (GENERATED_QUESTION_PROMPT.format(context=context, span="Peter Schmeichel"), 32),
        (GENERATED_QUESTION_PROMPT.format(context=context, span="Gladsaxe"), 32),
    ]
    assert c.details["spans"] == ["Peter Schmeichel", "Gladsaxe"]
    assert c.details["questions"] == ["Where was Peter Schmeichel born?"] * 2
    assert GeneratedQuestionsQuery.needs_model


def test_generated_questions_limits_and_empty_reply() -> None:
    lm = StubLM("Who?")
    one = GeneratedQuestionsQuery(max_questions=1, max_new_tokens=7)
    assert one.formulate(ctx([], seg(GQ_PIECES, GQ_PROBS), action="regenerate", lm=lm)) == ["Who?"]
    assert len(lm.calls) == 1 and lm.calls[0][1] == 7
    silent = StubLM(" \n \n")
    assert GeneratedQuestionsQuery().formulate(ctx([], seg(GQ_PIECES, GQ_PROBS), action="regenerate", lm=silent)) == [
        "Peter Schmeichel",
        "Gladsaxe",
    ]


def test_generated_questions_without_spans_falls_back_to_masked_sentence() -> None:
    lm = StubLM("Should not be asked?")
    c = ctx([], seg(GQ_PIECES), action="regenerate", lm=lm)
    assert GeneratedQuestionsQuery().formulate(c)[0].split() == ["Peter", "Schmeichel", "was", "born", "in", "Gladsaxe", "."]
    assert lm.calls == [] and c.details["spans"] == [] and c.details["masked_words"] == []
    # with spans but no model: the masked sentence too
    no_lm = ctx([], seg(GQ_PIECES, GQ_PROBS), action="regenerate", lm=None)
    assert GeneratedQuestionsQuery().formulate(no_lm)[0].split() == ["was", "born", "."]
    assert no_lm.details["masked_words"] == ["Peter", "Schmeichel", "in", "Gladsaxe"]


# -- attention (DRAGIN QFS) ----------------------------------------------------------------------------
class Layout:
    """A real tiny_lm-tokenized prompt: template head, question, template tail, output, trigger token."""

    def __init__(self, lm) -> None:
        self.head = lm.encode("<|im_start|>user\nQuestion:")
        self.q = lm.encode(" " + QUESTION)
        self.tail = lm.encode("<|im_end|>\n<|im_start|>assistant\n")
        self.out = lm.encode("Kasper is the son of Peter")
        self.trigger_id = lm.encode(" goalkeeper")[0]
        self.q0 = len(self.head)
        self.q1 = self.q0 + len(self.q)
        self.out0 = self.q1 + len(self.tail)
        self.trigger_pos = self.out0 + len(self.out)
        self.ids = self.head + self.q + self.tail + self.out + [self.trigger_id]
        self.pieces = [lm.token_text(self.ids[:p], self.ids[p]) for p in range(len(self.ids))]

    def find(self, piece: str, lo: int, hi: int) -> int:
        matches = [p for p in range(lo, hi) if self.pieces[p] == piece]
        assert len(matches) == 1, (piece, matches)
        return matches[0]


@pytest.fixture(scope="module")
def layout(tiny_lm) -> Layout:
    lay = Layout(tiny_lm)
    # the words below must be split over several tokens for the test to mean something
    assert "".join(lay.pieces[lay.q0 : lay.q1]) == " " + QUESTION
    assert lay.pieces[lay.q0 : lay.q1].count("at") == 1 and " father" not in lay.pieces
    return lay


def attention_ctx(lm, lay: Layout, row: torch.Tensor | None, **kw) -> QueryContext:
    steps = [
        TokenStep(id=i, text=lay.pieces[p], logprob=-0.1, entropy=1.0, position=p)
        for p, i in zip(range(lay.out0, lay.trigger_pos), lay.out, strict=True)
    ]
    trigger = TokenStep(id=lay.trigger_id, text=" goalkeeper", logprob=-2.0, entropy=4.0, position=lay.trigger_pos, attention=row)
    return ctx(
        [],
        steps + [trigger],
        index=len(steps),
        action="truncate",
        lm=lm,
        session_ids=lay.ids,
        question_span=(lay.q0, lay.q1),
        output_start=lay.out0,
        **kw,
    )


def hand_made_row(lay: Layout) -> tuple[torch.Tensor, dict[str, int]]:
    pos = {
        "at": lay.find("at", lay.q0, lay.q1),  # inside "father" (" f" "at" "h" "er")
        "the": lay.find(" the", lay.q0, lay.q1),  # a stop word
        "per": lay.find("per", lay.q0, lay.q1),  # inside "Kasper" ("Kas" "per")
        "son": lay.find(" son", lay.out0, lay.trigger_pos),
        "Peter": lay.find(" Peter", lay.out0, lay.trigger_pos),
        "as": lay.find("as", lay.q1, lay.out0),  # "assistant", in the template
    }
    row = torch.full((lay.trigger_pos,), 0.001)
    for name, weight in {"as": 0.5, "at": 0.2, "the": 0.15, "per": 0.12, "Peter": 0.1, "son": 0.09}.items():
        row[pos[name]] = weight
    return row, pos


def test_attention_query_picks_top_n_words_in_original_order(tiny_lm, layout) -> None:
    row, pos = hand_made_row(layout)
    c = attention_ctx(tiny_lm, layout, row)
    assert AttentionQuery(top_n=5).formulate(c) == ["father Kasper son Peter"]
    candidates = list(range(layout.q0, layout.q1)) + list(range(layout.out0, layout.trigger_pos))
    assert c.details["context_positions"] == candidates
    assert c.details["selected_positions"] == sorted(pos[k] for k in ("at", "the", "per", "son", "Peter"))
    assert c.details["selected_words"] == ["the", "father", "Kasper", "son", "Peter"]
    assert c.details["weights"] == pytest.approx([float(row[p]) for p in candidates])
    assert c.details["trigger_token"] == " goalkeeper"
    assert c.details["context_tokens"] == [layout.pieces[p] for p in candidates]


def test_attention_query_top_n_and_stop_words(tiny_lm, layout) -> None:
    row, _ = hand_made_row(layout)
    assert AttentionQuery(top_n=2).formulate(attention_ctx(tiny_lm, layout, row)) == ["father"]  # "the" dropped
    assert AttentionQuery(top_n=5, drop_stopwords=False).formulate(attention_ctx(tiny_lm, layout, row)) == [
        "the father Kasper son Peter"
    ]
    assert AttentionQuery().top_n == 35 and AttentionQuery.needs_attention


def test_attention_query_scope_all_ranks_every_prompt_position(tiny_lm, layout) -> None:
    row, pos = hand_made_row(layout)
    c = attention_ctx(tiny_lm, layout, row)
    assert AttentionQuery(top_n=5, scope="all").formulate(c) == ["father Kasper assistant Peter"]
    assert c.details["context_positions"] == list(range(layout.trigger_pos))
    # without a known layout, every earlier position is a candidate too
    bare = attention_ctx(tiny_lm, layout, row)
    bare.question_span = None
    assert AttentionQuery(top_n=5).formulate(bare) == ["father Kasper assistant Peter"]


def test_attention_query_without_attention_raises_a_clear_error(tiny_lm, layout) -> None:
    with pytest.raises(ValueError, match="attention row"):
        AttentionQuery().formulate(attention_ctx(tiny_lm, layout, None))
    row, _ = hand_made_row(layout)
    no_index = attention_ctx(tiny_lm, layout, row)
    no_index.decision.index = None
    with pytest.raises(ValueError, match="trigger that names a token"):
        AttentionQuery().formulate(no_index)


# -- make_query ----------------------------------------------------------------------------------------
def test_make_query_by_name_alias_and_unknown() -> None:
    assert set(QUERIES) == {
        "input", "last-tokens", "last-sentence", "masked-sentence", "generated-questions",
        "attention", "full-context", "search-tag", "follow-up", "question-entity", "attention-generated", "next-hop", "entity",
    }  # fmt: skip
    for name, cls in QUERIES.items():
        assert type(make_query(name)) is cls and cls.name == name
    expected = {
        "qfs": AttentionQuery,
        "dragin": AttentionQuery,
        "flare": MaskedSentenceQuery,
        "masked": MaskedSentenceQuery,
        "questions": GeneratedQuestionsQuery,
        "fl-rag": LastTokensQuery,
        "fs-rag": LastSentenceQuery,
    }
    assert set(QUERY_ALIASES) == set(expected)
    for alias, cls in expected.items():
        assert type(make_query(alias)) is cls
    q = make_query("qfs", top_n=5)
    assert isinstance(q, AttentionQuery) and q.top_n == 5
    assert make_query(q) is q
    with pytest.raises(UnknownNameError) as err:
        make_query("telepathy")
    assert "'telepathy'" in str(err.value)
    assert err.value.valid == sorted([*QUERIES, *QUERY_ALIASES])
    for name in [*QUERIES, *QUERY_ALIASES]:
        assert name in str(err.value)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MaskedSentenceQuery(beta=float("nan")), "masked-sentence beta must be a finite number"),
        (lambda: MaskedSentenceQuery(beta=1.5), "masked-sentence beta must be between 0 and 1"),
        (lambda: AttentionQuery(top_n=0), "attention top_n must be at least 1"),
        (lambda: LastTokensQuery(n=-3), "last-tokens n must be at least 1"),
        (lambda: GeneratedQuestionsQuery(max_questions=0), "max_questions must be at least 1"),
    ],
)
def test_query_formulator_numbers_are_checked(make, message) -> None:
    from active_rag.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=message):
        make()


def test_question_entity_query_adds_the_generated_bridge_entity() -> None:
    from active_rag.components.queries import QueryContext, QuestionEntityQuery, generated_entities

    question = "Who is the father of Kasper Schmeichel?"
    text = "Kasper Schmeichel is a Danish goalkeeper. His father is Peter Schmeichel, who won in 1992."
    assert generated_entities(text, question) == ["Peter Schmeichel", "1992"]
    # the latest sentence that names something new; the question's own names are not repeated
    assert generated_entities("Kasper Schmeichel plays. He is good.", question) == []
    steps = [TokenStep(id=i, text=w, logprob=0.0, entropy=0.0, position=i) for i, w in enumerate(text.split(" "))]
    spaced = [TokenStep(id=s.id, text=(" " if i else "") + s.text, logprob=0.0, entropy=0.0, position=i) for i, s in enumerate(steps)]
    ctx = QueryContext(question=question, output=spaced, segment=[], decision=TriggerDecision(fire=True, trigger="t"))
    assert QuestionEntityQuery().formulate(ctx) == [question + " Peter Schmeichel 1992"]
    assert ctx.details["entities"] == ["Peter Schmeichel", "1992"]


def test_generated_attention_query_ranks_generated_tokens_only() -> None:
    from active_rag.components.queries import GeneratedAttentionQuery, QueryContext

    ctx = QueryContext(question="q", output=[], segment=[], decision=TriggerDecision(fire=True, trigger="t"),
                       question_span=(2, 6), output_start=10)
    assert GeneratedAttentionQuery().candidates(ctx, 14) == [10, 11, 12, 13]
    assert GeneratedAttentionQuery().candidates(ctx, 10) == [2, 3, 4, 5]  # nothing generated yet: the question
    assert AttentionQuery().candidates(ctx, 14) == [2, 3, 4, 5, 10, 11, 12, 13]


def test_next_hop_query_asks_the_entity_then_the_question() -> None:
    from active_rag.components.queries import NextHopQuery, QueryContext

    question = "Who is the father of Kasper Schmeichel?"

    def ctx_for(text: str) -> QueryContext:
        steps = [TokenStep(id=i, text=(" " if i else "") + w, logprob=0.0, entropy=0.0, position=i) for i, w in enumerate(text.split(" "))]
        return QueryContext(question=question, output=steps, segment=[], decision=TriggerDecision(fire=True, trigger="t"))

    ctx = ctx_for("Kasper Schmeichel is a Danish goalkeeper. His father is Peter Schmeichel.")
    assert NextHopQuery().formulate(ctx) == ["Peter Schmeichel", question]
    assert ctx.details["entities"] == ["Peter Schmeichel"]
    assert NextHopQuery().formulate(ctx_for("Kasper Schmeichel plays. He is good.")) == [question]  # nothing new named

