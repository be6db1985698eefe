"""ActiveHFLLM: completion / chat with per-token logprobs, streaming deltas, async, chat template."""

from __future__ import annotations

import asyncio
import math

import pytest
from llama_index.core.base.llms.types import ChatMessage, CompletionResponse, MessageRole

from active_rag import ActiveLM
from llamaindex_active_rag import ActiveHFLLM

PROMPT = "Who is Kasper Schmeichel?"


def engine_steps(lm: ActiveLM, prompt: str | list[int], n: int, chat: bool = True) -> list:
    return list(lm.stream(prompt, max_new_tokens=n, capture_attention=False, chat=chat))


def test_metadata(tiny_lm: ActiveLM) -> None:
    meta = ActiveHFLLM(tiny_lm, max_new_tokens=7).metadata
    assert (meta.model_name, meta.context_window, meta.num_output, meta.is_chat_model) == ("tiny-llama", tiny_lm.max_context, 7, True)


def test_complete_fills_logprobs(tiny_lm: ActiveLM) -> None:
    response = ActiveHFLLM(tiny_lm, max_new_tokens=12).complete(PROMPT)
    steps = engine_steps(tiny_lm, PROMPT, 12)  # the prompt goes through the chat template, as a user message
    assert response.text == "".join(s.text for s in steps)
    assert response.logprobs is not None and len(response.logprobs) == 12
    for [lp], step in zip(response.logprobs, steps):
        assert lp.token == step.text and lp.logprob == pytest.approx(step.logprob) and lp.logprob <= 0.0
        assert lp.bytes == list(step.text.encode("utf-8"))
    assert response.additional_kwargs["token_ids"] == [s.id for s in steps]
    assert all(e >= 0 and math.isfinite(e) for e in response.additional_kwargs["entropies"])


def test_stream_complete_yields_deltas(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=10)
    chunks = list(llm.stream_complete(PROMPT))
    full = llm.complete(PROMPT)
    assert len(chunks) == 10 and all(isinstance(c, CompletionResponse) for c in chunks)
    assert "".join(c.delta or "" for c in chunks) == chunks[-1].text == full.text
    assert [c.logprobs[0][0].logprob for c in chunks] == pytest.approx([lp[0].logprob for lp in full.logprobs])
    assert all(chunks[i].text == "".join(c.delta for c in chunks[: i + 1]) for i in range(10))


def test_per_call_options_and_raw_prompts(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=10)
    assert len(llm.complete(PROMPT, max_new_tokens=3).logprobs) == 3
    assert len(llm.complete(PROMPT, max_tokens=4).logprobs) == 4
    raw = llm.complete(PROMPT, formatted=True, max_new_tokens=5)  # already formatted: no chat template
    assert raw.text == "".join(s.text for s in engine_steps(tiny_lm, PROMPT, 5, chat=False))
    plain = ActiveHFLLM(tiny_lm, max_new_tokens=5, use_chat_template=False).complete(PROMPT)
    assert plain.text == raw.text


def test_chat_uses_the_chat_template(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=8)
    response = llm.chat([ChatMessage(role=MessageRole.USER, content=PROMPT)])
    assert response.message.role == MessageRole.ASSISTANT
    assert response.message.content == llm.complete(PROMPT).text  # same template, same prompt
    assert response.logprobs is not None and len(response.logprobs) == 8

    messages = [ChatMessage(role=MessageRole.SYSTEM, content="Be brief."), ChatMessage(role=MessageRole.USER, content=PROMPT)]
    text = tiny_lm.tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    expected = engine_steps(tiny_lm, tiny_lm.encode(text), 8)
    assert llm.chat(messages).message.content == "".join(s.text for s in expected)
    # the LLM's system_prompt is used as the system message
    assert ActiveHFLLM(tiny_lm, max_new_tokens=8, system_prompt="Be brief.").complete(PROMPT).text == "".join(s.text for s in expected)

    chunks = list(llm.stream_chat(messages))
    assert "".join(c.delta for c in chunks) == chunks[-1].message.content == "".join(s.text for s in expected)
    assert all(len(c.logprobs) == 1 for c in chunks)


def test_async(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=6)
    messages = [ChatMessage(role=MessageRole.USER, content=PROMPT)]

    async def go() -> tuple:
        completion = await llm.acomplete(PROMPT)
        deltas = [c.delta async for c in await llm.astream_complete(PROMPT)]
        chat = await llm.achat(messages)
        chat_deltas = [c.delta async for c in await llm.astream_chat(messages)]
        return completion, deltas, chat, chat_deltas

    completion, deltas, chat, chat_deltas = asyncio.run(go())
    sync = llm.complete(PROMPT)
    assert completion.text == sync.text == "".join(deltas) == chat.message.content == "".join(chat_deltas)
    assert len(completion.logprobs) == 6


def test_rejects_other_models() -> None:
    with pytest.raises(TypeError, match="ActiveLM"):
        ActiveHFLLM(object())  # type: ignore[arg-type]


def test_built_from_a_model_name(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaindex_active_rag import llm as llm_module

    loads: list[str] = []

    def fake_load(name: str) -> ActiveLM:
        loads.append(name)
        return tiny_lm

    llm_module._load.cache_clear()
    monkeypatch.setattr(ActiveLM, "load", classmethod(lambda cls, name=None, **kw: fake_load(name)))
    try:
        llm = ActiveHFLLM.from_name("my-model", max_new_tokens=5)
        assert loads == []  # loaded on first use
        assert llm.model_name == "my-model" and llm.lm is tiny_lm and llm.metadata.model_name == "tiny-llama"
        other = ActiveHFLLM(model_name="my-model", max_new_tokens=5)
        assert other.complete(PROMPT).text == llm.complete(PROMPT).text
        assert loads == ["my-model"]  # one load per process and name
    finally:
        llm_module._load.cache_clear()
    assert ActiveHFLLM(tiny_lm).model_name == "tiny-llama"


def test_stop_sequences_cut_the_output(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=16)
    full = llm.complete(PROMPT).text
    tokens = [s.text for s in engine_steps(tiny_lm, PROMPT, 16)]
    # a stop sequence spanning the end of token 5 and the start of token 6
    cut = len("".join(tokens[:5]))
    stop = full[cut - 1 : cut + 1] if len(tokens[5]) else full[cut - 1 : cut]
    expected = full[: full.find(stop)]
    for stops in ({"stop": [stop]}, {"stop": stop}):  # per call, a list or one string
        response = llm.complete(PROMPT, **stops)
        assert response.text == expected and stop not in response.text
        assert len(response.logprobs) == len(response.additional_kwargs["token_ids"]) <= 6
    chunks = list(llm.stream_complete(PROMPT, stop=[stop]))
    assert "".join(c.delta for c in chunks) == chunks[-1].text == expected  # never streamed, then taken back
    assert ActiveHFLLM(tiny_lm, max_new_tokens=16, stop=[stop]).complete(PROMPT).text == expected  # the field
    assert llm.complete(PROMPT, stop=["\x00never"]).text == full


def test_unknown_keyword_arguments_are_rejected(tiny_lm: ActiveLM) -> None:
    llm = ActiveHFLLM(tiny_lm, max_new_tokens=3)
    for call in (
        lambda: llm.complete(PROMPT, top_p=0.9),
        lambda: llm.stream_complete(PROMPT, top_p=0.9),  # before anything streams
        lambda: llm.chat([ChatMessage(role=MessageRole.USER, content=PROMPT)], top_p=0.9),
        lambda: llm.stream_chat([ChatMessage(role=MessageRole.USER, content=PROMPT)], top_p=0.9),
        lambda: asyncio.run(llm.acomplete(PROMPT, top_p=0.9)),
    ):
        with pytest.raises(TypeError, match=r"ActiveHFLLM got unexpected keyword argument\(s\) \['top_p'\]"):
            call()
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['max_new_token'\]"):
        ActiveHFLLM(tiny_lm, max_new_token=3)
