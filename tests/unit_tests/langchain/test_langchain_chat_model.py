"""ChatActiveHF: the standard LangChain unit suite, logprobs, streaming, stop sequences, chat templates."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_tests.unit_tests import ChatModelUnitTests

from active_rag import TokenStep
from langchain_active_rag import ChatActiveHF
from langchain_active_rag.chat_models import _StopFilter, to_chat_turns


class TestChatActiveHFUnit(ChatModelUnitTests):
    """The standard suite, with the tiny random Llama passed as ``lm`` (never serialized)."""

    _lm: Any = None

    @pytest.fixture(autouse=True)
    def _tiny(self, tiny_lm: Any) -> None:
        type(self)._lm = tiny_lm

    @property
    def chat_model_class(self) -> type[ChatActiveHF]:
        return ChatActiveHF

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"lm": self._lm}

    @property
    def supports_model_override(self) -> bool:
        return False


def test_constructible_from_a_name_without_loading():
    chat = ChatActiveHF(model_name="smollm2", max_tokens=5)
    assert chat.lm is None and chat.model_name == "smollm2"
    assert ChatActiveHF(model="smollm2").model_name == "smollm2"
    assert chat._llm_type == "active-hf"
    assert chat._identifying_params["model_name"] == "smollm2"
    assert "lm" not in chat.model_dump()


def test_name_comes_from_the_given_model(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm)
    assert chat.model_name == "tiny-llama" and chat.active_lm is tiny_lm
    ls = chat._get_ls_params(stop=["x"])
    assert ls["ls_model_name"] == "tiny-llama" and ls["ls_provider"] == "active_rag" and ls["ls_stop"] == ["x"]


def test_invoke_with_openai_shaped_logprobs(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=10)
    plain = chat.invoke("Who is Peter Schmeichel?")
    assert isinstance(plain, AIMessage) and plain.content
    assert "logprobs" not in plain.response_metadata
    assert plain.response_metadata["finish_reason"] == "length"
    assert plain.usage_metadata["output_tokens"] == 10
    msg = chat.bind(logprobs=True).invoke("Who is Peter Schmeichel?")
    assert msg.content == plain.content
    content = msg.response_metadata["logprobs"]["content"]
    assert len(content) == 10
    assert "".join(e["token"] for e in content) == msg.content
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["logprob"] <= 0 and e["top_logprobs"] == [] and bytes(e["bytes"]).decode("utf-8", "replace")
    # same tokens and log-probabilities as the engine's own greedy pass
    steps = list(tiny_lm.session(chat.prompt_ids([HumanMessage("Who is Peter Schmeichel?")])).generate(10))
    assert [e["logprob"] for e in content] == pytest.approx([s.logprob for s in steps])
    bound_by_field = ChatActiveHF(lm=tiny_lm, max_tokens=10, logprobs=True).invoke("Who is Peter Schmeichel?")
    assert bound_by_field.response_metadata["logprobs"] == msg.response_metadata["logprobs"]


def test_stream_yields_one_chunk_per_token_with_logprobs(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=8, logprobs=True)
    chunks = list(chat.stream("hello"))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert len([c for c in chunks if c.content]) == 8
    assert chunks[-1].chunk_position == "last"
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.content == chat.invoke("hello").content
    assert len(full.response_metadata["logprobs"]["content"]) == 8
    assert full.usage_metadata["output_tokens"] == 8
    assert full.response_metadata["model_name"] == "tiny-llama"


async def test_astream_and_ainvoke(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=6)
    text = "".join([c.content async for c in chat.astream("hi")])
    assert text == (await chat.ainvoke("hi")).content


def test_stop_sequences_cut_the_output(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=12, logprobs=True)
    full = chat.invoke("hi").content
    stop = full[5:8]
    assert stop and stop not in full[:5]
    cut = chat.invoke("hi", stop=[stop])
    assert cut.content == full[: full.index(stop)]
    assert cut.response_metadata["finish_reason"] == "stop"
    streamed = "".join(c.content for c in chat.stream("hi", stop=[stop]))
    assert streamed == cut.content
    assert ChatActiveHF(lm=tiny_lm, max_tokens=12, stop=[stop]).invoke("hi").content == cut.content


def test_stop_filter_holds_back_partial_matches():
    def step(text: str) -> TokenStep:
        return TokenStep(id=0, text=text, logprob=-0.1, entropy=0.0, position=0)

    f = _StopFilter(["END"])
    assert [t for t, _ in f.push(step("ab"))] == ["ab"]
    assert f.push(step(" E")) == []  # " E" may start "END"
    assert [t for t, _ in f.push(step("x"))] == [" E", "x"]
    assert f.push(step("EN")) == []
    assert [t for t, _ in f.push(step("Dzz"))] == []  # "END" found: nothing after it
    assert f.stopped and f.text.startswith("ab ExEND")
    g = _StopFilter(["\n\n"])
    assert g.push(step("a\n")) == []  # "\n" may start the stop sequence: the whole token waits
    assert [t for t, _ in g.push(step("\nb"))] == ["a"]  # released cut at the stop sequence
    assert g.stopped


def test_messages_map_to_a_chat_template(tiny_lm):
    messages = [SystemMessage("s1"), SystemMessage("s2"), HumanMessage("h", name="user1"), AIMessage("a"), HumanMessage("q")]
    assert to_chat_turns(messages) == [
        {"role": "system", "content": "s1\n\ns2"},
        {"role": "user", "content": "h"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q"},
    ]
    assert to_chat_turns([ToolMessage("42", tool_call_id="t")])[0]["role"] == "tool"
    chat = ChatActiveHF(lm=tiny_lm)
    text = tiny_lm.decode(chat.prompt_ids(messages), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\ns1\n\ns2<|im_end|>") and text.endswith("<|im_start|>assistant\n")
    # a one-message conversation is exactly the engine's own prompt for that user message
    assert chat.prompt_ids([HumanMessage("Who?")]) == tiny_lm.prompt_ids("Who?")


def test_unknown_call_keyword_is_rejected(tiny_lm):
    with pytest.raises(TypeError, match="unexpected keyword"):
        ChatActiveHF(lm=tiny_lm, max_tokens=2).invoke("hi", top_p=0.5)


def test_sampling_with_a_seed_is_reproducible(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=8, temperature=1.0, seed=3)
    assert chat.invoke("hi").content == chat.invoke("hi").content
