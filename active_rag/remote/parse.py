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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import NoLogprobsError

__all__ = ["Piece", "parse_choice", "topk_entropy", "utf8_decoder"]


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


def _legacy(lp: Mapping[str, Any], text: str) -> list[Piece]:
    tokens = [str(t) for t in lp.get("tokens") or []]
    logprobs = list(lp.get("token_logprobs") or [])
    tops = list(lp.get("top_logprobs") or [])
    if not tokens or len(logprobs) < len(tokens):
        return []
    texts = tokens
    if "".join(tokens) != text:
        offsets = lp.get("text_offset")
        if len(tokens) == 1:
            texts = [text]
        elif isinstance(offsets, Sequence) and len(offsets) == len(tokens):
            base = int(offsets[0])
            cuts = [max(0, int(o) - base) for o in offsets] + [len(text)]
            texts = [text[cuts[i] : cuts[i + 1]] for i in range(len(tokens))]
    pieces = []
    for i, token in enumerate(tokens):
        top = tops[i] if i < len(tops) and isinstance(tops[i], Mapping) else {}
        pieces.append(Piece(texts[i], _finite(logprobs[i]), {str(k): _finite(v) for k, v in top.items()}, token))
    return pieces


def utf8_decoder() -> codecs.IncrementalDecoder:
    """The decoder of the token bytes of one reply: a streamed reply keeps one over all its events, so that a
    character whose bytes are split over two tokens (in two events) is decoded whole."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _chat(content: Sequence[Any], text: str, decoder: codecs.IncrementalDecoder | None, final: bool) -> list[Piece]:
    items = [c for c in content if isinstance(c, Mapping) and "token" in c]
    if not items:
        return []
    with_bytes = all(isinstance(c.get("bytes"), list) for c in items)
    if decoder is None:  # a whole reply: its own decoder, flushed at its last token
        decoder, final = utf8_decoder(), True
    pieces = []
    for k, c in enumerate(items):
        token = str(c["token"])
        if with_bytes:
            piece = decoder.decode(bytes(int(b) & 0xFF for b in c["bytes"]), final=final and k == len(items) - 1)
        else:
            piece = token
        top = {str(t.get("token")): _finite(t.get("logprob")) for t in c.get("top_logprobs") or [] if isinstance(t, Mapping)}
        pieces.append(Piece(piece, _finite(c.get("logprob")), top, token))
    pending = with_bytes and bool(decoder.getstate()[0])  # the bytes of a character that the next event completes
    if "".join(p.text for p in pieces) != text and len(pieces) == 1 and text and not pending:
        pieces[0].text = text
    return pieces


def parse_choice(
    choice: Mapping[str, Any], where: str, decoder: codecs.IncrementalDecoder | None = None
) -> tuple[list[Piece], str | None]:
    """The generated tokens of one reply choice (a whole reply or one streamed event) and its finish reason.

    ``decoder``: for the events of one streamed reply, the same :func:`utf8_decoder` for all of them (a character
    split over two events' token bytes is decoded whole; it is flushed at the event with a finish reason); ``None``:
    the choice is a whole reply. Raises :class:`~active_rag.errors.NoLogprobsError` (one line naming ``where``, the
    server's URL) when the choice holds text but no token log-probabilities."""
    if "text" in choice:
        text = str(choice.get("text") or "")
    else:
        message = choice.get("delta") or choice.get("message") or {}
        text = str(message.get("content") or "") if isinstance(message, Mapping) else ""
    finish = choice.get("finish_reason")
    lp = choice.get("logprobs")
    pieces: list[Piece] = []
    if isinstance(lp, Mapping):
        if isinstance(lp.get("content"), Sequence):
            pieces = _chat(lp["content"], text, decoder, final=bool(finish))
        elif lp.get("tokens") is not None:
            pieces = _legacy(lp, text)
    if text and not pieces:
        raise NoLogprobsError(
            f"The endpoint {where} returned text without token log-probabilities: every active-retrieval signal needs "
            "them. Use a server that returns `logprobs` / `top_logprobs` (llama.cpp's server, llama-cpp-python, vLLM, "
            "Ollama >= 0.12.11) and check that it does not strip them.")
    return pieces, str(finish) if finish else None
