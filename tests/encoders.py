"""A text encoder for tests: deterministic vectors without a model (what a MiniLM encoder's ``encode`` returns)."""

from __future__ import annotations

import hashlib
import math


class HashEncoder:
    """Deterministic bag-of-words vectors (64-d, L2-normalised) over words of 5+ letters; records what it encoded."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            v = [0.0] * 64
            for word in (w.strip(".,?!\"'()") for w in text.lower().split()):
                if len(word) < 5:
                    continue
                v[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out
