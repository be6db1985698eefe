"""Token log-probabilities from the replies of OpenAI-compatible servers, and the entropy approximated from them.

Two reply formats are read, whichever a server uses on either route (OpenAI API reference):

- the legacy completions format: ``choices[0].logprobs = {"tokens": [...], "token_logprobs": [...],
  "top_logprobs": [{token: logprob, ...}, ...], "text_offset": [...]}`` (llama-cpp-python, vLLM, OpenAI);
- the chat format: ``choices[0].logprobs = {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
  "logprob"}, ...]}, ...]}`` (chat completions of every server; llama.cpp's own server on completions too).

Entropy (:func:`topk_entropy`) is an approximation: a server returns the ``k`` most likely tokens, not the whole
distribution. The top-k terms ``-p log p`` are summed and the probability mass outside them counts as one more
outcome, ``-r log r``. That is a lower bound of the true entropy (splitting the remainder over many tokens can
only raise it), exact when the top-k hold all the mass.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EndpointError, NoLogprobsError

__all__ = ["Piece", "parse_choice", "reply_choice", "topk_entropy", "utf8_decoder"]


@dataclass
class Piece:
    """One generated token: its text, log-probability and the server's top alternatives (token text -> logprob)."""

    text: str
    logprob: float
    top: dict[str, float] = field(default_factory=dict)
    token: str = ""

    @property
    def entropy(self) -> float:
        return topk_entropy(self.top, self.token or self.text, self.logprob)


def topk_entropy(top: Mapping[str, float], token: str, logprob: float) -> float:
    """The entropy (nats) of a next-token distribution known only by its top-k log-probabilities (plus the chosen
    token's): the top-k terms plus one term for the remaining mass (a lower bound; see the module docs)."""
    lps = dict(top)
    if token not in lps and math.isfinite(logprob):
        lps[token] = logprob
    probs = [math.exp(lp) for lp in lps.values() if math.isfinite(lp)]
    total = sum(probs)
    if total > 1.0:  # rounding in the server's numbers
        probs = [p / total for p in probs]
        total = 1.0
    value = -sum(p * math.log(p) for p in probs if p > 0)
    rest = 1.0 - total
    if rest > 1e-9:
        value -= rest * math.log(rest)
    return max(value, 0.0)


def _finite(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return number if not math.isnan(number) else -math.inf


# -- the shape of a reply ------------------------------------------------------------------------------
def _kind(value: Any) -> str:
    """A JSON value's kind and a glimpse of it, for an error message: ``a string ("x")``."""
    kind = ("null" if value is None else "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, (int, float))
            else "a string" if isinstance(value, str) else "a list" if isinstance(value, list)
            else "an object" if isinstance(value, Mapping) else f"a {type(value).__name__}")
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return f"{kind} ({text if len(text) <= 60 else text[:57] + '...'})"


class _Shape:
    """Checks one reply of the endpoint ``where`` against the OpenAI API's shapes; a mismatch is an
    :class:`~active_rag.errors.EndpointError` naming the field, what it should be and what came."""

    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, field: str, expected: str, got: str) -> EndpointError:
        return EndpointError(
            f"The endpoint {self.where} sent a reply that does not follow the OpenAI API: {field} should be {expected}, "
            f"got {got}; check that the server is OpenAI-compatible and that nothing between it and you rewrites its "
            "replies.")

    def expect(self, value: Any, field: str, kinds: tuple[type, ...], expected: str, *, null: bool = True) -> Any:
        """``value`` when it is one of ``kinds`` (or ``None`` when ``null``); booleans are not numbers."""
        if value is None and null:
            return None
        if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
            return value
        raise self.error(field, expected + (" or null" if null else ""), _kind(value))

    def items(self, value: Any, field: str, kinds: tuple[type, ...], expected: str, *, null_items: bool = False) -> list[Any]:
        """A list (``None``: empty) whose items are each one of ``kinds`` (``expected``: one item, in words)."""
        items = self.expect(value, field, (list,), f"a list ({expected} each)") or []
        for k, item in enumerate(items):
            self.expect(item, f"{field}[{k}]", kinds, expected, null=null_items)
        return items

    def number(self, value: Any, field: str) -> float:
        """A log-probability: a number, or null (read as minus infinity)."""
        return _finite(self.expect(value, field, (int, float), "a number"))


def reply_choice(reply: Any, where: str, *, streamed: bool) -> Mapping[str, Any] | None:
    """The first choice of a reply (``streamed=False``) or of one streamed event (``streamed=True``), checked:
    the reply is an object and its ``choices`` a list of objects. An event without choices (a usage report at the
    end of a stream) gives ``None``; a whole reply without one is an :class:`~active_rag.errors.EndpointError`."""
    shape = _Shape(where)
    what = "a streamed event" if streamed else "the reply"
    shape.expect(reply, what, (Mapping,), "a JSON object", null=False)
    if "choices" not in reply and streamed:
        return None
    if "choices" not in reply:
        keys = ", ".join(map(str, list(reply)[:8])) or "none"
        raise shape.error("the reply", "an object with a choices list", f"an object without one (keys: {keys})")
    choices = shape.expect(reply["choices"], "choices", (list,), "a list of choices", null=False)
    if not choices:
        if streamed:
            return None
        raise shape.error("choices", "a list of at least one choice", "an empty list")
    return shape.expect(choices[0], "choices[0]", (Mapping,), "an object (a choice)", null=False)


def _legacy(lp: Mapping[str, Any], text: str, shape: _Shape) -> list[Piece]:
    at = "choices[0].logprobs"
    tokens = shape.items(lp.get("tokens"), f"{at}.tokens", (str,), "a string")
    logprobs = shape.items(lp.get("token_logprobs"), f"{at}.token_logprobs", (int, float), "a number", null_items=True)
    tops = shape.items(lp.get("top_logprobs"), f"{at}.top_logprobs", (Mapping,), "an object (token: logprob)", null_items=True)
    offsets = shape.items(lp.get("text_offset"), f"{at}.text_offset", (int,), "an integer")
    if not tokens or lp.get("token_logprobs") is None:
        return []
    if len(logprobs) < len(tokens):
        raise shape.error(f"{at}.token_logprobs", f"one number per token ({len(tokens)})", f"{len(logprobs)} of them")
    texts = tokens
    if "".join(tokens) != text:
        if len(tokens) == 1:
            texts = [text]
        elif len(offsets) == len(tokens):
            base = offsets[0]
            cuts = [max(0, o - base) for o in offsets] + [len(text)]
            texts = [text[cuts[i] : cuts[i + 1]] for i in range(len(tokens))]
    pieces = []
    for i, token in enumerate(tokens):
        top = tops[i] if i < len(tops) and tops[i] is not None else {}
        alternatives = {str(k): shape.number(v, f"{at}.top_logprobs[{i}][{json.dumps(str(k))}]") for k, v in top.items()}
        pieces.append(Piece(texts[i], shape.number(logprobs[i], f"{at}.token_logprobs[{i}]"), alternatives, token))
    return pieces


def utf8_decoder() -> codecs.IncrementalDecoder:
    """The decoder of the token bytes of one reply: a streamed reply keeps one over all its events, so that a
    character whose bytes are split over two tokens (in two events) is decoded whole."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _chat(content: list[Any], text: str, decoder: codecs.IncrementalDecoder | None, final: bool, shape: _Shape) -> list[Piece]:
    at = "choices[0].logprobs.content"
    items = shape.items(content, at, (Mapping,), "an object (token, logprob, bytes, top_logprobs)")
    if not items:
        return []
    for k, c in enumerate(items):
        shape.expect(c.get("token"), f"{at}[{k}].token", (str,), "a string", null=False)
        shape.items(c.get("bytes"), f"{at}[{k}].bytes", (int,), "an integer")
        tops = shape.items(c.get("top_logprobs"), f"{at}[{k}].top_logprobs", (Mapping,), "an object (token, logprob)")
        for j, t in enumerate(tops):
            shape.expect(t.get("token"), f"{at}[{k}].top_logprobs[{j}].token", (str,), "a string", null=False)
    with_bytes = all(isinstance(c.get("bytes"), list) for c in items)
    if decoder is None:  # a whole reply: its own decoder, flushed at its last token
        decoder, final = utf8_decoder(), True
    pieces = []
    for k, c in enumerate(items):
        token = c["token"]
        if with_bytes:
            piece = decoder.decode(bytes(int(b) & 0xFF for b in c["bytes"]), final=final and k == len(items) - 1)
        else:
            piece = token
        top = {t["token"]: shape.number(t.get("logprob"), f"{at}[{k}].top_logprobs[{j}].logprob")
               for j, t in enumerate(c.get("top_logprobs") or [])}
        pieces.append(Piece(piece, shape.number(c.get("logprob"), f"{at}[{k}].logprob"), top, token))
    pending = with_bytes and bool(decoder.getstate()[0])  # the bytes of a character that the next event completes
    if "".join(p.text for p in pieces) != text and len(pieces) == 1 and text and not pending:
        pieces[0].text = text
    return pieces


def _text(choice: Mapping[str, Any], shape: _Shape) -> str:
    """The generated text of a choice: ``text`` (completions), else ``delta.content`` / ``message.content`` (chat)."""
    if "text" in choice:
        return shape.expect(choice["text"], "choices[0].text", (str,), "a string") or ""
    for key in ("delta", "message"):
        message = shape.expect(choice.get(key), f"choices[0].{key}", (Mapping,), "an object (role, content)")
        if message:
            return shape.expect(message.get("content"), f"choices[0].{key}.content", (str,), "a string") or ""
    return ""


def parse_choice(
    choice: Mapping[str, Any], where: str, decoder: codecs.IncrementalDecoder | None = None
) -> tuple[list[Piece], str | None]:
    """The generated tokens of one reply choice (a whole reply or one streamed event) and its finish reason.

    ``decoder``: for the events of one streamed reply, the same :func:`utf8_decoder` for all of them (a character
    split over two events' token bytes is decoded whole; it is flushed at the event with a finish reason); ``None``:
    the choice is a whole reply. Raises :class:`~active_rag.errors.NoLogprobsError` (one line naming ``where``, the
    server's URL) when the choice holds text but no token log-probabilities, and an
    :class:`~active_rag.errors.EndpointError` naming the field when the choice is not shaped as the OpenAI API's."""
    shape = _Shape(where)
    shape.expect(choice, "choices[0]", (Mapping,), "an object (a choice)", null=False)
    text = _text(choice, shape)
    finish = shape.expect(choice.get("finish_reason"), "choices[0].finish_reason", (str,), "a string")
    lp = shape.expect(choice.get("logprobs"), "choices[0].logprobs", (Mapping,), "an object")
    pieces: list[Piece] = []
    if lp is not None:
        if lp.get("content") is not None:
            pieces = _chat(lp["content"], text, decoder, bool(finish), shape)
        elif lp.get("tokens") is not None:
            pieces = _legacy(lp, text, shape)
    if text and not pieces:
        raise NoLogprobsError(
            f"The endpoint {where} returned text without token log-probabilities: every active-retrieval signal needs "
            "them. Use a server that returns `logprobs` / `top_logprobs` (llama.cpp's server, llama-cpp-python, vLLM, "
            "Ollama >= 0.12.11) and check that it does not strip them.")
    return pieces, finish or None
