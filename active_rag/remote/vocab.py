"""Token ids for a model behind an endpoint: the engine works on token ids, the server on text.

The engine keeps a prompt and an answer as a list of ids (:class:`~active_rag.components.prompt_layout.Layout`), crops and
extends it; a :class:`~active_rag.remote.lm.RemoteLM` sends ``decode(ids)`` to the server as text. Two vocabularies
give those ids, both with an exact round trip (``decode(encode(text)) == text``):

- :class:`PieceVocab` (no local tokenizer): text is cut into words, runs of punctuation and runs of white space
  (the GPT-2 pre-tokenizer's classes), each piece interned as an id. Prompt lengths are then counted in these
  pieces, close to but not exactly the server's tokens.
- :class:`TokenizerVocab`: a Hugging Face tokenizer of the same model (e.g. a registry model's): prompt ids,
  lengths and the chat template are the model's own, as with the local engine.

The tokens the server generates come back as text and are interned (ids from :data:`TokenizerVocab.OFFSET` on, past
any real vocabulary), so the text of each generated token is kept exactly as the server produced it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["PieceVocab", "TokenizerVocab"]

_PIECE = re.compile(r" ?\w+| ?[^\w\s]+|\s+(?!\S)|\s+")


class PieceVocab:
    """Ids for text pieces (see the module docs); thread-safe."""

    tokenizer: Any = None
    first_id = 0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []

    def intern(self, text: str) -> int:
        """The id of the piece ``text`` (a new one the first time)."""
        with self._lock:
            found = self._ids.get(text)
            if found is None:
                found = self._ids[text] = self.first_id + len(self._texts)
                self._texts.append(text)
            return found

    def piece(self, token_id: int) -> str | None:
        """The text of an interned id, ``None`` for another id."""
        k = token_id - self.first_id
        if 0 <= k < len(self._texts):
            return self._texts[k]
        return None

    def encode(self, text: str) -> list[int]:
        return [self.intern(p) for p in _PIECE.findall(text)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(self.piece(int(i)) or "" for i in ids)

    def vocab_size(self) -> int:
        return len(self._texts)


class TokenizerVocab(PieceVocab):
    """A Hugging Face tokenizer's ids for prompt text, interned pieces for the generated tokens."""

    OFFSET = 1 << 24
    first_id = OFFSET

    def __init__(self, tokenizer: Any) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self._tok_lock = threading.Lock()

    def encode(self, text: str) -> list[int]:
        with self._tok_lock:
            return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            text = self.piece(int(i))
            if text is None:
                run.append(int(i))
                continue
            if run:
                out.append(self._decode_run(run, skip_special_tokens))
                run = []
            out.append(text)
        if run:
            out.append(self._decode_run(run, skip_special_tokens))
        return "".join(out)

    def _decode_run(self, ids: list[int], skip_special_tokens: bool) -> str:
        with self._tok_lock:
            return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))
