"""Prompt modes (active_rag.components.prompt_layout): the chat turns each mode renders, the shared prefix first, and the
question's token span."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, Passage, RunSettings
from active_rag.errors import UnknownNameError
from active_rag.components.prompt_layout import PROMPT_MODES, build_layout, chat_messages, completion_text
from active_rag.components.prompts import DRAGIN_PROMPT, SELF_ASK_PROMPT, PromptTemplate

FEWSHOT = PromptTemplate(
    name="fewshot",
    direct="Q1?\nA1.\n\nQuestion: {question}\nAnswer:",
    with_docs="Q1?\nA1.\n\nContext:\n{documents}\nQuestion: {question}\nAnswer:",
    instruction="Answer step by step.",
    exemplars=(("Who wrote Hamlet?", "Shakespeare wrote it. So the answer is Shakespeare."),
               ("Is Paris in France?", "Paris is in France. So the answer is yes.")),
    context_header="Context:\n",
    context_footer="Answer in the same format as before.",
)
DOCS = [Passage(id="d1", title="Kasper", text="Kasper is a goalkeeper.")]


def test_chat_turns_mode_renders_exemplars_as_prior_turns() -> None:
    messages = chat_messages(FEWSHOT, "Who is Kasper?", DOCS, system="Be brief.")
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Answer step by step.\n\nQuestion: Who wrote Hamlet?"},
        {"role": "assistant", "content": "Shakespeare wrote it. So the answer is Shakespeare."},
        {"role": "user", "content": "Question: Is Paris in France?"},
        {"role": "assistant", "content": "Paris is in France. So the answer is yes."},
        {"role": "user", "content": "Context:\n[1] Kasper Kasper is a goalkeeper.\nAnswer in the same format as before.\n"
                                    "Question: Who is Kasper?"},
    ]
    # a template without structured exemplars is one user message in every mode
    assert chat_messages(SELF_ASK_PROMPT, "Q?", []) == [{"role": "user", "content": SELF_ASK_PROMPT.render("Q?")}]
    # the engine's DRAGIN prompt shows four HotpotQA exemplars (DRAGIN appendix F) as turns
    dragin = chat_messages(DRAGIN_PROMPT, "Q?", [])
    assert [m["role"] for m in dragin] == ["user", "assistant"] * 4 + ["user"] and dragin[-1]["content"] == "Question: Q?"


def test_completion_mode_is_plain_text_without_chat_markup(tiny_lm) -> None:
    text = completion_text(FEWSHOT, "Who is Kasper?", DOCS)
    assert text == (
        "Answer step by step.\n\nQuestion: Who wrote Hamlet?\nAnswer: Shakespeare wrote it. So the answer is Shakespeare.\n\n"
        "Question: Is Paris in France?\nAnswer: Paris is in France. So the answer is yes.\n\n"
        "Context:\n[1] Kasper Kasper is a goalkeeper.\nAnswer in the same format as before.\nQuestion: Who is Kasper?\nAnswer:"
    )
    layout = build_layout(tiny_lm, FEWSHOT, "completion", "Who is Kasper?", DOCS)
    assert "<|im_start|>" not in tiny_lm.decode(layout.ids, skip_special_tokens=False)


@pytest.mark.parametrize("mode", PROMPT_MODES)
def test_each_mode_renders_its_chat_turns(tiny_lm, mode: str) -> None:
    layout = build_layout(tiny_lm, FEWSHOT, mode, "Who is Kasper?", DOCS)
    text = tiny_lm.decode(layout.ids, skip_special_tokens=False)
    q0, q1 = layout.question_span
    assert tiny_lm.decode(layout.ids[q0:q1]).strip() == "Who is Kasper?"
    assert layout.output_start == len(layout.ids)
    turns = text.count("<|im_start|>user")
    if mode == "single":
        assert turns == 1 and text.endswith("<|im_start|>assistant\n") and "Q1?" in text
    elif mode == "chat-turns":
        assert turns == 3 and text.count("<|im_start|>assistant\n") == 3  # two exemplar answers + the generation prompt
        assert "<|im_start|>assistant\nShakespeare wrote it." in text
    else:
        assert turns == 0 and text.endswith("Answer:")


@pytest.mark.parametrize("mode", PROMPT_MODES)
def test_questions_share_the_prompt_prefix_before_documents_and_question(tiny_lm, mode: str) -> None:
    a = build_layout(tiny_lm, FEWSHOT, mode, "Who is Kasper?", DOCS)
    b = build_layout(tiny_lm, FEWSHOT, mode, "Where is Odense?", [Passage(id="x", title="Odense", text="A city.")])
    shared = 0
    while a.ids[shared] == b.ids[shared]:
        shared += 1
    head = tiny_lm.decode(a.ids[:shared], skip_special_tokens=False)
    # everything shared (instruction and exemplars) comes before the documents
    assert "So the answer is yes." in head or (mode == "single" and "Q1?" in head)
    assert "Kasper is a goalkeeper" not in head


def test_engine_records_its_prompt_mode(tiny_lm, fake_retriever) -> None:
    rag = ActiveRAG(tiny_lm, fake_retriever, trigger="never", prompt=FEWSHOT, settings=RunSettings(prompt_mode="chat-turns"),
                    max_new_tokens=4)
    assert rag.describe()["prompt_mode"] == "chat-turns"
    assert rag.run("Who is Kasper?").tokens
    with pytest.raises(UnknownNameError, match="prompt mode"):
        ActiveRAG(tiny_lm, fake_retriever, trigger="never", settings=RunSettings(prompt_mode="chatty"))


def test_auto_prompt_mode_is_the_models_own() -> None:
    from active_rag.errors import UnknownNameError
    from active_rag.components.prompt_layout import check_prompt_mode, default_prompt_mode, resolve_prompt_mode

    assert default_prompt_mode("qwen2.5-coder-0.5b") == "chat-turns"
    assert default_prompt_mode("qwen2.5-coder-1.5b") == "chat-turns"
    assert default_prompt_mode("smollm2") == "single"
    assert default_prompt_mode("/some/local/folder") == "single"
    assert resolve_prompt_mode("auto", "qwen2.5-coder-0.5b") == "chat-turns"
    assert resolve_prompt_mode(None, "smollm2") == "single"
    assert resolve_prompt_mode("completion", "qwen2.5-coder-0.5b") == "completion"
    with pytest.raises(UnknownNameError, match="prompt mode"):
        check_prompt_mode("chat")


def test_the_engine_records_the_resolved_prompt_mode(tiny_lm) -> None:
    from active_rag import ActiveRAG, BM25Index, Passage

    index = BM25Index.from_passages([Passage(id="a", title="A", text="Alpha beta.")])
    assert ActiveRAG.from_preset("sr-rag", tiny_lm, index).prompt_mode == "single"  # a model outside the registry
    assert ActiveRAG.from_preset("sr-rag", tiny_lm, index, prompt_mode="chat-turns").prompt_mode == "chat-turns"
