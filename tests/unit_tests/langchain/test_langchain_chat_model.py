"""ChatActiveHF: the standard LangChain unit suite, logprobs, streaming, stop sequences, chat templates, tools,
structured output."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_tests.unit_tests import ChatModelUnitTests
from pydantic import BaseModel

from active_rag import TokenStep
from langchain_active_rag import ChatActiveHF
from active_rag.stopping import StopFilter
from langchain_active_rag.chat_models import to_chat_turns


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

    f = StopFilter(["END"])
    assert [t for t, _ in f.push(step("ab"))] == ["ab"]
    assert f.push(step(" E")) == []  # " E" may start "END"
    assert [t for t, _ in f.push(step("x"))] == [" E", "x"]
    assert f.push(step("EN")) == []
    assert [t for t, _ in f.push(step("Dzz"))] == []  # "END" found: nothing after it
    assert f.stopped and f.text.startswith("ab ExEND")
    g = StopFilter(["\n\n"])
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


# -- top_logprobs, tools, structured output ---------------------------------------------------------------
def test_top_logprobs_list_the_most_likely_tokens(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=6)
    msg = chat.bind(logprobs=True, top_logprobs=3).invoke("hello")
    content = msg.response_metadata["logprobs"]["content"]
    assert len(content) == 6
    for e in content:
        top = e["top_logprobs"]
        assert len(top) == 3 and [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["token"] == e["token"] and top[0]["logprob"] == pytest.approx(e["logprob"])  # greedy: the argmax
        assert all(set(t) == {"token", "logprob", "bytes"} for t in top)
    assert msg.content == chat.invoke("hello").content  # observing the distribution changes nothing
    streamed = [c for c in chat.stream("hello", logprobs=True, top_logprobs=2) if c.content]
    assert [len(c.response_metadata["logprobs"]["content"][0]["top_logprobs"]) for c in streamed] == [2] * 6


def _magic_function(input: int) -> int:
    """Apply a magic function to an input."""
    return input + 2


def _get_weather(location: str) -> str:
    """Get the weather at a location."""
    return "sunny"


def _paint(flag: bool, color: Literal["red", "blue"]) -> str:
    """Paint (booleans and enums: random weights finish them; an integer could grow digits to the limit)."""
    return color


def test_forced_tool_call_is_decoded_under_the_tool_schema(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=80)  # the tiny tokenizer spells JSON nearly letter by letter
    bound = chat.bind_tools([_paint], tool_choice="any")
    msg = bound.invoke("Paint it.")
    assert msg.content == "" and msg.response_metadata["finish_reason"] == "tool_calls"
    ((call,),) = [msg.tool_calls]
    assert call["name"] == "_paint" and set(call["args"]) == {"flag", "color"} and call["args"]["color"] in ("red", "blue")
    assert call["id"].startswith("call_") and call["type"] == "tool_call"
    chunks = list(bound.stream("Paint it."))
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [(call["name"], call["args"])]
    named = chat.bind_tools([_magic_function, _get_weather], tool_choice="_get_weather").invoke("Hello!")
    if named.tool_calls:
        assert [c["name"] for c in named.tool_calls] == ["_get_weather"]
    else:  # a free string argument may not end within max_tokens: the call is cut, but names the forced tool
        assert named.invalid_tool_calls[0]["args"].startswith('{"name": "_get_weather", "arguments": {"location": "')
    with pytest.raises(ValueError, match="bound tools"):
        chat.bind_tools([_magic_function], tool_choice="nope")


def test_tools_reach_a_template_without_tool_support_in_the_hermes_format(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm)
    from langchain_core.utils.function_calling import convert_to_openai_tool

    tools = [convert_to_openai_tool(_magic_function)]
    history = [
        HumanMessage("What is magic_function(3)?"),
        AIMessage("", tool_calls=[{"name": "_magic_function", "args": {"input": 3}, "id": "abc123", "type": "tool_call"}]),
        ToolMessage("5", tool_call_id="abc123", name="_magic_function"),
    ]
    text = tiny_lm.decode(chat.prompt_ids(history, tools=tools), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\n# Tools") and '"name": "_magic_function"' in text
    assert '<tool_call>\n{"name": "_magic_function", "arguments": {"input": 3}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in text


def test_tools_and_tool_ids_go_through_a_native_tool_template(tiny_model, tiny_tokenizer):
    import copy

    from active_rag import ActiveLM

    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = (
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.id }} {{ c.function.name }}{% endfor %}{% endif %}"
        "{% if m.tool_call_id %}RESULT FOR {{ m.tool_call_id }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    lm = ActiveLM(tiny_model, tok, name="tiny-tools")
    from langchain_active_rag.tools import template_supports_tools

    assert template_supports_tools(tok)
    history = [
        HumanMessage("q"),
        AIMessage("", tool_calls=[{"name": "_magic_function", "args": {"input": 3}, "id": "abc123", "type": "tool_call"}]),
        ToolMessage("5", tool_call_id="abc123"),
    ]
    from langchain_core.utils.function_calling import convert_to_openai_tool

    text = lm.decode(ChatActiveHF(lm=lm).prompt_ids(history, tools=[convert_to_openai_tool(_magic_function)]), skip_special_tokens=False)
    assert text.startswith("<tools>_magic_function;</tools>")
    assert "CALL abc123 _magic_function" in text and "<|im_start|>tool\n5RESULT FOR abc123" in text


def test_parse_tool_calls():
    from langchain_active_rag.tools import parse_tool_calls

    content, calls, invalid = parse_tool_calls('Sure.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>')
    assert content == "Sure." and [(c["name"], c["args"]) for c in calls] == [("f", {"x": 1})] and not invalid
    content, calls, invalid = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>oops')
    assert content == "" and len(calls) == 1 and len(invalid) == 1 and invalid[0]["args"] == "oops"
    assert parse_tool_calls('{"name": "g", "arguments": {}}')[1][0]["name"] == "g"  # a bare call object
    assert parse_tool_calls("No tools needed.") == ("No tools needed.", [], [])


class _Pick(BaseModel):
    """A choice (booleans and enums: short enough for random weights to finish)."""

    ok: bool
    color: Literal["red", "blue"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_structured_output_always_parses(tiny_lm, method):
    chat = ChatActiveHF(lm=tiny_lm, max_tokens=80)
    structured = chat.with_structured_output(_Pick, method=method)
    result = structured.invoke("Pick a color.")
    assert isinstance(result, _Pick)
    assert [c for c in structured.stream("Pick a color.")][-1] == result
    if method == "function_calling":  # the rest is the same parsing path (and the tool prompt is long here)
        return
    as_dict = chat.with_structured_output(_Pick.model_json_schema(), method=method).invoke("Pick a color.")
    assert as_dict == result.model_dump()
    raw = chat.with_structured_output(_Pick, method=method, include_raw=True).invoke("Pick a color.")
    assert raw["parsed"] == result and raw["parsing_error"] is None and isinstance(raw["raw"], AIMessage)


def test_structured_output_rejects_bad_arguments(tiny_lm):
    chat = ChatActiveHF(lm=tiny_lm)
    with pytest.raises(ValueError, match="unsupported"):
        chat.with_structured_output(_Pick, temperature=2)
    with pytest.raises(ValueError, match="needs a schema"):
        chat.with_structured_output(None)
    with pytest.raises(ValueError, match="response_format"):
        chat.invoke("hi", response_format={"type": "xml"})
