"""Tool calling for :class:`~langchain_active_rag.ChatActiveHF` through the model's own chat template.

- Conversations become chat-template turns (:func:`to_chat_turns`): an ``AIMessage``'s tool calls
  become the turn's ``tool_calls`` and a ``ToolMessage`` a ``tool`` turn with its ``tool_call_id`` and
  ``name``, which templates with tool support (Qwen2.5, Llama 3.1+, Mistral, ...) render natively
  (``apply_chat_template(..., tools=...)``).
- A template without tool support (SmolLM2's plain ChatML) gets what such templates would render,
  written out the way Qwen2.5's does (the Hermes format): the tool signatures in a system turn, the
  assistant's calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` text and tool results
  as ``<tool_response>...</tool_response>`` in a user turn.
- :func:`parse_tool_calls` reads ``<tool_call>`` blocks (or a bare ``{"name", "arguments"}`` object)
  back into LangChain tool calls.
- A forced choice (``tool_choice="any"``/``"required"``/a tool name) is decoded under a JSON schema
  (:func:`call_schema`; :class:`active_rag.decoding.constrained.JsonSchemaConstraint`), after the
  ``<tool_call>`` opening, so the call always parses and names an offered tool.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, ToolMessage
from langchain_core.messages.tool import InvalidToolCall, ToolCall, invalid_tool_call, tool_call

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
#: Text that opens a tool call in the Hermes / Qwen2.5 format (a forced call starts after it).
CALL_OPEN = "<tool_call>\n"
_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a ``tools`` argument."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates (e.g. {"default": ..., "tool_use": ...})
        return "tool_use" in template or any("tools" in str(t) for t in template.values())
    return isinstance(template, str) and "tools" in template


def _text(message: BaseMessage) -> str:
    return message.text if isinstance(message.text, str) else str(message.content)


def _call_json(call: ToolCall) -> str:
    return json.dumps({"name": call["name"], "arguments": call["args"]}, ensure_ascii=False)


def to_chat_turns(messages: Sequence[BaseMessage], *, native_tools: bool = True) -> list[dict[str, Any]]:
    """Chat-template turns for ``messages``; consecutive plain turns of one role are merged.

    With ``native_tools`` tool calls and results are structured (``tool_calls``, ``tool`` turns with
    ``tool_call_id``); without, they are written as Hermes-format text (see the module docs)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        role = m.role if isinstance(m, ChatMessage) else _ROLES.get(m.type, "user")
        turn: dict[str, Any] = {"role": role, "content": _text(m)}
        if isinstance(m, AIMessage) and m.tool_calls:
            if native_tools:
                turn["tool_calls"] = [
                    {"id": c.get("id"), "type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
                    for c in m.tool_calls
                ]
            else:
                calls = "\n".join(f"<tool_call>\n{_call_json(c)}\n</tool_call>" for c in m.tool_calls)
                turn["content"] = (turn["content"] + "\n" if turn["content"] else "") + calls
        elif isinstance(m, ToolMessage):
            if native_tools:
                turn.update(tool_call_id=m.tool_call_id, name=m.name)
                if m.status == "error":
                    turn["content"] = f"Error: {turn['content']}" if not turn["content"].startswith("Error") else turn["content"]
            else:
                turn = {"role": "user", "content": f"<tool_response>\n{turn['content']}\n</tool_response>"}
        plain = set(turn) == {"role", "content"}
        if turns and plain and set(turns[-1]) == {"role", "content"} and turns[-1]["role"] == turn["role"]:
            turns[-1]["content"] += "\n\n" + turn["content"]
        else:
            turns.append(turn)
    return turns


def tools_system_text(schemas: Sequence[dict[str, Any]]) -> str:
    """The tool instructions a Hermes-format template (Qwen2.5's) puts in the system turn."""
    signatures = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def with_tools_system_turn(turns: list[dict[str, Any]], schemas: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turns`` with the tool instructions appended to (or placed as) the system turn."""
    text = tools_system_text(schemas)
    if turns and turns[0]["role"] == "system":
        return [{**turns[0], "content": turns[0]["content"] + "\n\n" + text}, *turns[1:]]
    return [{"role": "system", "content": text}, *turns]


def forced_names(tool_choice: Any, schemas: Sequence[dict[str, Any]]) -> list[str] | None:
    """The tool names a ``tool_choice`` forces a call to (``None``: the model decides)."""
    names = [s["function"]["name"] for s in schemas]
    if tool_choice is None or tool_choice in ("auto", "none", False):
        return None
    if tool_choice in ("any", "required", True):
        chosen = names
    elif isinstance(tool_choice, str):
        chosen = [tool_choice]
    elif isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        chosen = [tool_choice["function"].get("name")]
    elif isinstance(tool_choice, dict) and "name" in tool_choice:
        chosen = [tool_choice["name"]]
    else:
        raise ValueError(f"Unsupported tool_choice {tool_choice!r}: use 'auto', 'any', 'required', 'none' or a tool name.")
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        raise ValueError(f"tool_choice names {unknown or chosen} but the bound tools are {names}.")
    return chosen


def call_schema(schemas: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of one call ``{"name": ..., "arguments": {...}}`` to one of ``names``."""
    options = []
    for s in schemas:
        fn = s["function"]
        if fn["name"] not in names:
            continue
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[InvalidToolCall]]:
    """``(content without the calls, tool calls, invalid tool calls)`` from a model's output."""
    blocks = _CALL_RE.findall(text)
    content = _CALL_RE.sub("", text).strip() if blocks else text
    if not blocks:
        stripped = text.strip()
        if stripped.startswith("{") and '"name"' in stripped:
            try:
                obj = json.loads(stripped)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and "name" in obj and isinstance(obj.get("arguments", {}), dict):
                blocks, content = [stripped], ""
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for raw in blocks:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            invalid.append(invalid_tool_call(name=None, args=raw, id=call_id, error=f"not JSON: {exc}"))
            continue
        args = obj.get("arguments", obj.get("parameters", {})) if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not isinstance(args, dict):
            invalid.append(invalid_tool_call(name=None, args=raw, id=call_id, error='expected {"name": str, "arguments": object}'))
            continue
        calls.append(tool_call(name=obj["name"], args=args, id=call_id))
    return content, calls, invalid


__all__ = [
    "CALL_OPEN",
    "call_schema",
    "forced_names",
    "parse_tool_calls",
    "template_supports_tools",
    "to_chat_turns",
    "tools_system_text",
    "with_tools_system_turn",
]
