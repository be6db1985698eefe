"""Prompt layout: the token ids of a prompt in one of three prompt modes, with the question's span.

- ``"single"``: the template's text (``direct`` / ``with_docs``) as one user message in the model's chat
  template (the default of models outside the registry).
- ``"chat-turns"``: the exemplars as prior chat turns (user ``Question: q`` / assistant answer pairs), then
  one user message with the documents and the question. Small chat models follow the exemplars' format far
  better when it is shown as their own earlier answers than when it is quoted inside one message.
- ``"completion"``: plain text without chat template, as DRAGIN's released code prompts (``src/generate.py``:
  exemplars, ``Context:`` and the documents, ``Answer in the same format as before.``, then
  ``Question: q\\nAnswer:``).
- ``"auto"`` (the default of every entry point): the model's own mode, :func:`default_prompt_mode`
  (chat-turns for the Qwen registry models, chosen on the HotpotQA dev slice; see the README).

In every mode what all questions share (system message, instruction, exemplars or exemplar turns) comes
first, then the documents, then the question, so prompts of different questions share the longest possible
token prefix (the model's prefix KV cache reuses it). A template without exemplars or instruction is laid
out from its ``direct`` / ``with_docs`` text in every mode (chat-turns then equals single).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UnknownNameError
from .prompts import PromptTemplate
from ..types import Passage

__all__ = ["PROMPT_MODES", "Layout", "build_layout", "chat_messages", "check_prompt_mode", "completion_text",
           "default_prompt_mode", "resolve_prompt_mode"]

#: The prompt modes; ``"auto"`` (the default of every entry point) picks the model's own
#: (:func:`default_prompt_mode`).
PROMPT_MODES = ("single", "chat-turns", "completion")
AUTO = "auto"

_Q = "\ue011ACTIVE_RAG_QUESTION\ue011"


@dataclass
class Layout:
    """Prompt token ids (plus the answer so far), where the question sits and where the answer starts."""

    ids: list[int]
    question_span: tuple[int, int]
    output_start: int


def check_prompt_mode(mode: str) -> str:
    if mode != AUTO and mode not in PROMPT_MODES:
        raise UnknownNameError("prompt mode", mode, (AUTO, *PROMPT_MODES))
    return mode


def default_prompt_mode(model_name: str) -> str:
    """The prompt mode chosen for a registry model on the dev slices (``ModelSpec.prompt_mode``; see the
    README's evaluation section), ``"single"`` for any other model."""
    from ..models.model_specs import MODELS

    spec = MODELS.get(model_name)
    return spec.prompt_mode if spec is not None else "single"


def resolve_prompt_mode(mode: str | None, model_name: str) -> str:
    """``mode`` itself, or the model's default for ``"auto"`` / ``None``."""
    if mode is None or check_prompt_mode(mode) == AUTO:
        return default_prompt_mode(model_name)
    return mode


def _exemplar_text(template: PromptTemplate) -> str:
    return "".join(
        f"{template.question_format.format(question=q)}\n{template.answer_prefix} {a}\n\n" for q, a in template.exemplars
    )


def _question_text(template: PromptTemplate, question: str) -> str:
    head = template.question_instruction + "\n" if template.question_instruction else ""
    return head + template.question_format.format(question=question)


def completion_text(template: PromptTemplate, question: str, passages: Sequence[Passage], system: str | None = None) -> str:
    """The plain-completion prompt: system, instruction, exemplars, documents, question, answer prefix."""
    head = system + "\n\n" if system else ""
    if not template.structured:
        return head + template.render(question, passages) + "\n" + template.answer_prefix
    instruction = template.instruction + "\n\n" if template.instruction else ""
    return (head + instruction + _exemplar_text(template) + template.context(passages)
            + _question_text(template, question) + "\n" + template.answer_prefix)


def chat_messages(template: PromptTemplate, question: str, passages: Sequence[Passage], system: str | None = None) -> list[dict[str, str]]:
    """The chat-turns messages: [system], the exemplars as user/assistant turns (the first user turn opens with
    the instruction and the question instruction, shared by every question), then documents + question."""
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    if not template.structured:
        messages.append({"role": "user", "content": template.render(question, passages)})
        return messages
    opening = "\n".join(t for t in (template.instruction, template.question_instruction) if t)
    for k, (q, a) in enumerate(template.exemplars):
        user = template.question_format.format(question=q)
        if k == 0 and opening:
            user = opening + "\n\n" + user
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": a})
    final = template.context(passages) + template.question_format.format(question=question)
    if not template.exemplars and opening:
        final = opening + "\n\n" + final
    messages.append({"role": "user", "content": final})
    return messages


def _lock(lm: Any) -> Any:
    return getattr(lm, "_tok_lock", None) or contextlib.nullcontext()


def _chat_text(lm: Any, messages: list[dict[str, str]]) -> str:
    """The chat template applied to ``messages``, ending where the assistant's answer starts."""
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is not None and getattr(lm, "has_chat_template", False):
        with _lock(lm):
            return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    # no chat template: the model's own user wrapping (ActiveLM.chat_parts) around each user turn
    out = ""
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    for m in messages:
        if m["role"] == "user":
            before, after = lm.chat_parts(m["content"])
            if system and out:  # the system text opens the prompt once
                before = before.replace(system + "\n\n", "", 1)
            out += before + m["content"] + after
        elif m["role"] == "assistant":
            out += " " + m["content"] + "\n\n"
    return out


def build_layout(
    lm: Any, template: PromptTemplate, mode: str, question: str, passages: Sequence[Passage], output_ids: Sequence[int] = ()
) -> Layout:
    """Token ids of the prompt for ``question`` with ``passages`` in prompt ``mode``, then ``output_ids``.

    The prompt is tokenised in three pieces (before the question, the question, after it) so that the
    question's token span is exact (DRAGIN's QFS ranks the question's and the output's tokens)."""
    system = getattr(lm, "system_prompt", None)
    if mode == "completion":
        text = completion_text(template, _Q, passages, system)
    elif mode == "chat-turns":
        text = _chat_text(lm, chat_messages(template, _Q, passages, system))
    elif mode == "single":
        user = template.render(_Q, passages)
        before, after = lm.chat_parts("\x00")
        text = before + user + after
    else:
        check_prompt_mode(mode)
        raise AssertionError  # pragma: no cover
    before, _, after = text.partition(_Q)
    after = after.replace(_Q, question)
    stripped = before.rstrip(" ")
    q_text = before[len(stripped):] + question  # a space before the question goes with it (one token)
    head = lm.encode(stripped)
    q = lm.encode(q_text)
    tail = lm.encode(after)
    prompt = head + q + tail
    return Layout(ids=prompt + list(output_ids), question_span=(len(head), len(head) + len(q)), output_start=len(prompt))
