"""The default retriever: a BM25 index over a local passage corpus, built on ``bm25s``.

:class:`BM25Index` implements the :class:`~active_rag.types.Retriever` protocol. Build one from
:class:`~active_rag.types.Passage` objects, a JSONL corpus (one ``{"id", "title", "text"}`` object per
line), a folder of text files (:mod:`active_rag.retrieval.folder`), or a directory written by :meth:`BM25Index.save`
(its files are checked against the checksums saved with it, :mod:`active_rag.retrieval.index_files`);
:meth:`BM25Index.demo` loads the bundled HotpotQA demo corpus.

Each passage is indexed as ``"<title> <text>"``. Text is lowercased, split into words, stripped of
stopwords and stemmed with PyStemmer's English (Snowball) stemmer. Retrieval is deterministic: equal
scores are ordered by position in the corpus. :attr:`BM25Index.name_index` says which passages are about
which name (their title, or the name their text opens with), for linked retrieval (:mod:`active_rag.answer.links`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from active_rag.retrieval.chunking import (
    DEFAULT_CHUNK_TOKENS, check_chunking, chunk_passages, default_overlap, identity_line,
)
from active_rag.errors import CorpusError, IndexPathError
from active_rag.retrieval.folder import TEXT_SUFFIXES, Skipped, read_folder, skipped_summary
from active_rag.retrieval.index_files import (
    CONFIG_NAME as _CONFIG_NAME,
    FORMAT_VERSION as _FORMAT_VERSION,
    NAMES_NAME as _NAMES_NAME,
    PASSAGES_NAME as _PASSAGES_NAME,
    REBUILD as _REBUILD,
    check_index_target as _check_index_target,
    file_checksums,
    is_index_file as _is_index_file,  # noqa: F401 - importable here as before
    one_line,
    read_manifest,
    verify_files,
)
from active_rag.progress import progress_shown
from active_rag.retrieval.name_index import NameIndex
from active_rag.types import Passage

__all__ = [
    "BM25Index",
    "DATA_DIR",
    "DEMO_CORPUS_FILE",
    "DEMO_QUESTIONS_FILE",
    "demo_corpus_path",
    "demo_questions_path",
    "read_jsonl_passages",
]

# bm25s sets its own logger to DEBUG, which makes any logging.basicConfig() print its build messages.
if logging.getLogger("bm25s").level == logging.DEBUG:
    logging.getLogger("bm25s").setLevel(logging.WARNING)

#: The package's bundled data (demo corpus, demo questions, attribution).
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DEMO_CORPUS_FILE = "demo_corpus.jsonl"
DEMO_QUESTIONS_FILE = "demo_questions.jsonl"

Stopwords = str | Sequence[str] | None


def demo_corpus_path() -> Path:
    """Path of the bundled demo corpus (300 HotpotQA dev paragraphs, JSONL)."""
    return DATA_DIR / DEMO_CORPUS_FILE


def demo_questions_path() -> Path:
    """Path of the bundled demo questions (the 30 HotpotQA dev questions whose paragraphs are in the corpus)."""
    return DATA_DIR / DEMO_QUESTIONS_FILE


def _make_stemmer(stemmer: str | None) -> Any:
    """A PyStemmer stemmer for ``stemmer`` (a Snowball language name), or ``None`` for no stemming."""
    if stemmer is None:
        return None
    try:
        import Stemmer  # PyStemmer
    except ImportError as exc:  # pragma: no cover - PyStemmer is a core dependency
        raise ImportError(
            f"Stemming with {stemmer!r} needs PyStemmer: run `pip install PyStemmer`, or pass stemmer=None."
        ) from exc
    try:
        return Stemmer.Stemmer(stemmer)
    except KeyError as exc:
        raise ValueError(
            f"Unknown stemmer language {stemmer!r}: pass one of {sorted(Stemmer.algorithms())} or None."
        ) from exc


def _index_text(passage: Passage) -> str:
    """The text that is indexed for a passage: its title followed by its text."""
    return f"{passage.title} {passage.text}" if passage.title else passage.text


class BM25Index:
    """A BM25 (Lucene variant) index over passages; ``retrieve(query, k)`` returns the best ``k``, best first.

    Use the constructors :meth:`from_passages`, :meth:`from_jsonl`, :meth:`from_directory`,
    :meth:`from_path`, :meth:`load` or :meth:`demo` rather than ``__init__``.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        model: bm25s.BM25,
        *,
        stemmer: str | None,
        stopwords: Stopwords,
    ) -> None:
        self._passages: list[Passage] = list(passages)
        self._model = model
        self._stemmer_name = stemmer
        self._stopwords: str | list[str] | None = (
            stopwords if stopwords is None or isinstance(stopwords, str) else list(stopwords)
        )
        self._stemmer = _make_stemmer(stemmer)
        self._name_index: NameIndex | None = None
        self._name_lock = threading.Lock()
        #: What a folder corpus skipped (:class:`~active_rag.retrieval.folder.Skipped`: path and reason), kept in
        #: the saved index; empty for other corpora.
        self.skipped: list[Skipped] = []

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_passages(
        cls,
        passages: Iterable[Passage],
        *,
        stemmer: str | None = "english",
        stopwords: Stopwords = "en",
        k1: float = 1.5,
        b: float = 0.75,
        progress: bool | None = False,
    ) -> BM25Index:
        """Index ``passages``.

        ``stemmer`` is a PyStemmer (Snowball) language or ``None``; ``stopwords`` is a bm25s stopword
        language code (``"en"``), an explicit list, or ``None``. ``k1`` and ``b`` are the BM25 parameters.
        Passage ids must be unique and the corpus must not be empty. ``progress``: ``None`` draws bm25s's
        tokenizing and indexing bars when standard error is a terminal (:mod:`active_rag.progress`); ``False``
        (the default) never.
        """
        items = list(passages)
        if not items:
            raise CorpusError("The corpus is empty: give at least one passage with a non-empty text.")
        seen: set[str] = set()
        for p in items:
            if not isinstance(p, Passage):
                raise CorpusError(
                    f"Expected Passage objects, got {type(p).__name__}: wrap each item as "
                    "active_rag.types.Passage(id=..., text=..., title=...)."
                )
            if p.id in seen:
                raise CorpusError(f"Duplicate passage id {p.id!r}: give every passage a unique id.")
            if not isinstance(p.text, str) or not p.text.strip():
                raise CorpusError(f"Passage {p.id!r} has an empty text: give every passage some text, or drop it.")
            seen.add(p.id)
        items = [Passage(id=p.id, text=p.text, title=p.title, metadata=dict(p.metadata)) for p in items]
        stemmer_obj = _make_stemmer(stemmer)
        shown = progress_shown(progress)
        tokens = bm25s.tokenize(
            [_index_text(p) for p in items],
            stopwords=_stopwords_arg(stopwords),
            stemmer=stemmer_obj,
            return_ids=False,
            show_progress=shown,
        )
        model = bm25s.BM25(k1=k1, b=b)
        model.index(tokens, show_progress=shown)
        return cls(items, model, stemmer=stemmer, stopwords=stopwords)

    @classmethod
    def from_jsonl(
        cls, path: str | os.PathLike[str], *, stemmer: str | None = "english", stopwords: Stopwords = "en"
    ) -> BM25Index:
        """Index a JSONL corpus: one ``{"id", "title", "text"}`` object per line.

        Extra keys go into ``Passage.metadata``; blank lines are skipped. A malformed line raises
        :class:`~active_rag.errors.CorpusError` naming the file and the 1-based line number.
        """
        return cls.from_passages(read_jsonl_passages(path), stemmer=stemmer, stopwords=stopwords)

    @classmethod
    def from_directory(
        cls, path: str | os.PathLike[str], *, stemmer: str | None = "english", stopwords: Stopwords = "en",
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS, chunk_overlap: int | None = None, progress: bool | None = None,
    ) -> BM25Index:
        """Index the text files under ``path`` (recursively: ``.txt``, ``.md``, ``.rst``, ..., and suffix-less text
        files, in UTF-8, UTF-16 or UTF-32; :func:`~active_rag.retrieval.folder.read_folder`), cut into passages of at
        most ``chunk_tokens`` tokens, consecutive ones sharing up to ``chunk_overlap``
        (:mod:`active_rag.retrieval.chunking`; ``chunk_tokens=0``: a file is one passage).

        A file's passage id is its path relative to ``path`` (with ``/`` separators), its title the file name
        without its suffix, and ``metadata["path"]`` the absolute path; the chunks of a longer file are
        ``"<id>#<k>"`` titled ``"<title> (<k>/<n>)"``, with ``metadata["source"]``, ``["chunk"]`` and ``["chunks"]``,
        and every chunk after the first starts with a line naming its file and its header's Title/Name
        (:func:`~active_rag.retrieval.chunking.identity_line`, also in ``metadata["prefix"]``). Files that are
        skipped (binary, unreadable, other suffixes, hidden) are listed in :attr:`skipped` and named in one warning.
        ``chunk_overlap=None``: a quarter of ``chunk_tokens`` (64 of the default 256). ``progress=None`` (the
        default) draws progress bars for reading the files and indexing them when standard error is a terminal
        (:mod:`active_rag.progress`: never under a pipe, a log or the tests); ``False`` never.
        """
        chunk_overlap = default_overlap(chunk_tokens) if chunk_overlap is None else chunk_overlap
        check_chunking(chunk_tokens, chunk_overlap, names=("chunk_tokens", "chunk_overlap"))
        found = read_folder(path, progress=progress)
        if not found.passages:
            raise CorpusError(
                f"Corpus directory {str(path)!r} holds no non-empty .txt or .md files (nor other text files: "
                f"{', '.join(TEXT_SUFFIXES[2:])}, suffix-less; {len(found.skipped)} skipped): add some, or pass a "
                "JSONL corpus file instead."
            )
        if found.skipped:
            warnings.warn(skipped_summary(path, found.skipped), stacklevel=2)
        passages = chunk_passages(found.passages, chunk_tokens=chunk_tokens, overlap=chunk_overlap,
                                  identity=lambda p: identity_line(p.id, p.text))
        index = cls.from_passages(passages, stemmer=stemmer, stopwords=stopwords, progress=progress)
        index.skipped = list(found.skipped)
        return index

    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str], *, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        chunk_overlap: int | None = None, progress: bool | None = None,
    ) -> BM25Index:
        """Open a corpus by path: a saved index directory, a JSONL file, or a directory of text files (cut into
        passages by ``chunk_tokens`` / ``chunk_overlap``, see :meth:`from_directory`; ``progress`` as there)."""
        p = Path(path)
        if not p.exists():
            raise CorpusError(
                f"Corpus path {str(p)!r} does not exist: pass a JSONL file, a directory of text files, "
                "or a directory written by BM25Index.save()."
            )
        if p.is_dir():
            if (p / _CONFIG_NAME).is_file():
                return cls.load(p)
            return cls.from_directory(p, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, progress=progress)
        return cls.from_jsonl(p)

    @classmethod
    def demo(cls) -> BM25Index:
        """The bundled demo index: 300 HotpotQA dev paragraphs (CC BY-SA 4.0). Built once per process."""
        return _demo_index()

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the index to directory ``path`` so :meth:`load` restores it exactly.

        ``path`` must be a new or empty directory, or, with ``overwrite=True``, a directory that holds a saved
        index and nothing else (its files are replaced). Anything else raises
        :class:`~active_rag.errors.IndexPathError`: a file, a folder with other files (nothing is ever written
        beside them), an existing index without ``overwrite``, or a path that cannot be written. The files
        are written to a temporary folder first and moved in place, the index's config file last.
        """
        out = Path(path)
        _check_index_target(out, overwrite)
        try:
            out.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".active-rag-index-", dir=out))
        except OSError as exc:
            raise IndexPathError(
                f"Cannot write the index to {str(out)!r} ({exc.strerror or exc}): pick a folder you can write to."
            ) from exc
        try:
            self._write(tmp)
            names = sorted(f.name for f in tmp.iterdir())
            for name in [n for n in names if n != _CONFIG_NAME] + [_CONFIG_NAME]:
                os.replace(tmp / name, out / name)
        except OSError as exc:
            raise IndexPathError(
                f"Cannot write the index to {str(out)!r} ({exc.strerror or exc}): check the free space and permissions."
            ) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write(self, out: Path) -> None:
        """Write the index files into the existing, empty folder ``out``."""
        self._model.save(str(out), corpus=None, show_progress=False)
        (out / _NAMES_NAME).write_text(json.dumps(self.name_index.to_json(), ensure_ascii=False), encoding="utf-8")
        with open(out / _PASSAGES_NAME, "w", encoding="utf-8") as fh:
            for p in self._passages:
                row = {"id": p.id, "title": p.title, "text": p.text, **_clean_metadata(p)}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        config = {
            "format": "active-rag-bm25",
            "format_version": _FORMAT_VERSION,
            "stemmer": self._stemmer_name,
            "stopwords": self._stopwords,
            "num_passages": len(self._passages),
            "bm25s_version": bm25s.__version__,
            "skipped": [s.to_dict() for s in self.skipped],
            "files": file_checksums(out),  # checked by load(): a changed file is refused, not read
        }
        (out / _CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BM25Index:
        """Load an index written by :meth:`save`.

        Every file is first checked against the size and sha256 the manifest records
        (:func:`~active_rag.retrieval.index_files.verify_files`); a file that is missing, unreadable, truncated or
        changed raises :class:`~active_rag.errors.CorpusError` in one line naming it and the fix (rebuild the
        index); a ``names.json`` that does not match is built again from the passages instead. An index saved before
        checksums were written is loaded without that check."""
        src = Path(path)
        config = read_manifest(src)
        stale = verify_files(src, config)  # names.json when it does not match: built again from the passages
        passages = read_jsonl_passages(src / _PASSAGES_NAME)
        try:
            model = bm25s.BM25.load(str(src), load_corpus=False, show_progress=False)
        except Exception as exc:  # noqa: BLE001 - numpy/pickle/JSON errors of a damaged file: one line, not a traceback
            raise CorpusError(
                f"Cannot read the bm25s index files in {str(src)!r} ({type(exc).__name__}: {one_line(exc)}): "
                f"{_REBUILD}."
            ) from exc
        scores = getattr(model, "scores", None)
        num_docs = scores.get("num_docs") if isinstance(scores, dict) else None
        if len(passages) != config.get("num_passages") or num_docs != len(passages):
            raise CorpusError(
                f"The saved index in {str(src)!r} is inconsistent: {_PASSAGES_NAME} holds {len(passages)} passages, "
                f"the BM25 index {num_docs}: {_REBUILD}."
            )
        index = cls(passages, model, stemmer=config.get("stemmer"), stopwords=config.get("stopwords"))
        if _NAMES_NAME not in stale:  # else (or None from an unreadable file) built again on first use
            index._name_index = _read_name_index(src / _NAMES_NAME, index._passages)
        index.skipped = _read_skipped(config.get("skipped"))
        return index

    # ------------------------------------------------------------------ retrieval

    def __len__(self) -> int:
        return len(self._passages)

    def __repr__(self) -> str:
        return f"BM25Index({len(self)} passages, stemmer={self._stemmer_name!r})"

    @property
    def name_index(self) -> NameIndex:
        """Which passages are about which name (:class:`~active_rag.retrieval.name_index.NameIndex`), for linked retrieval
        (:mod:`active_rag.answer.links`): built on first use (2 to 4 s for 20,000 passages), saved with the index."""
        with self._name_lock:
            if self._name_index is None:
                self._name_index = NameIndex.from_passages(self._passages)
            return self._name_index

    @property
    def passages(self) -> list[Passage]:
        """The indexed passages, in corpus order (without scores)."""
        return list(self._passages)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every passage for ``query``, in corpus order (``float32``)."""
        _check_query(query)
        tokens = bm25s.tokenize(
            query,
            stopwords=_stopwords_arg(self._stopwords),
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )[0]
        if not tokens:  # only stopwords or punctuation: nothing can match
            return np.zeros(len(self._passages), dtype=np.float32)
        return np.asarray(self._model.get_scores(tokens), dtype=np.float32)

    def retrieve(self, query: str, k: int) -> list[Passage]:
        """The ``k`` best passages for ``query``, best first, each with its BM25 ``score``.

        Only passages that share a word with the query (score > 0) are returned, so the result may hold
        fewer than ``k`` passages, and none for a query with no indexed word. Ties are broken by corpus
        order, so the result is deterministic.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be an int, got {type(k).__name__}: pass e.g. k=3.")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}: pass the number of passages to return, e.g. k=3.")
        scores = self.scores(query)
        order = _top_k(scores, int(k))
        out: list[Passage] = []
        for i in order:
            if not scores[i] > 0:  # no query word in the passage: not evidence, do not fill the top-k with it
                break
            p = self._passages[i]
            out.append(Passage(id=p.id, text=p.text, title=p.title, score=float(scores[i]), metadata=dict(p.metadata)))
        return out


# ---------------------------------------------------------------------- helpers


_LINE_FORMAT = 'Each line must be one JSON object like {"id": "...", "title": "...", "text": "..."}.'


def read_jsonl_passages(path: str | os.PathLike[str]) -> list[Passage]:
    """Read a JSONL corpus into passages (see :meth:`BM25Index.from_jsonl` for the format)."""
    file = Path(path)
    if not file.exists():
        raise CorpusError(f"Corpus file {str(file)!r} does not exist: check the path.")
    if not file.is_file():
        raise CorpusError(
            f"Corpus path {str(file)!r} is not a file: pass a JSONL file, or use BM25Index.from_directory()."
        )
    passages: list[Passage] = []
    first_line: dict[str, int] = {}
    try:
        fh = open(file, "rb")  # bytes, so that a line that is not UTF-8 is reported with its number
    except OSError as exc:
        raise CorpusError(f"Cannot read corpus file {str(file)!r} ({exc.strerror}): check its permissions.") from exc
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if b"\x00" in raw:
                raise CorpusError(
                    f"{file}, line {lineno}: holds NUL bytes, so {str(file)!r} is a binary file, not a JSONL corpus. "
                    f"{_LINE_FORMAT}"
                )
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(
                    f"{file}, line {lineno}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1}). "
                    "Convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`)."
                ) from exc
            if line.strip():
                passage = _parse_line(line, f"{file}, line {lineno}")
                if passage.id in first_line:
                    raise CorpusError(
                        f"{file}, line {lineno}: duplicate id {passage.id!r} (first seen on line "
                        f"{first_line[passage.id]}). Give every passage a unique id."
                    )
                first_line[passage.id] = lineno
                passages.append(passage)
    if not passages:
        raise CorpusError(f"Corpus file {str(file)!r} holds no passages: add one JSON object per line.")
    return passages


def _parse_line(line: str, where: str) -> Passage:
    """One JSONL corpus line as a passage; ``where`` ("file, line N") prefixes every error message."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}). {_LINE_FORMAT}") from exc
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}. {_LINE_FORMAT}")
    missing = [key for key in ("id", "text") if key not in obj]
    if missing:
        raise CorpusError(f"{where}: missing key(s) {', '.join(map(repr, missing))}. {_LINE_FORMAT}")
    pid, title, text = obj.pop("id"), obj.pop("title", ""), obj.pop("text")
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise CorpusError(f'{where}: "id" must be a string or an integer, got {type(pid).__name__}.')
    if not isinstance(text, str) or not text.strip():
        raise CorpusError(f'{where}: "text" must be a non-empty string.')
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise CorpusError(f'{where}: "title" must be a string, got {type(title).__name__}.')
    return Passage(id=str(pid), title=title, text=text, metadata=obj)


def _read_name_index(path: Path, passages: Sequence[Passage]) -> NameIndex | None:
    """The name index saved beside an index, or ``None`` when there is none (an index saved before names were
    indexed) or it was written by other rules: it is built again then."""
    try:
        return NameIndex.from_json(json.loads(path.read_text(encoding="utf-8")), passages)
    except (OSError, ValueError):
        return None


def _read_skipped(rows: Any) -> list[Skipped]:
    """The ``skipped`` list of a manifest (absent in an index saved before it was written)."""
    if not isinstance(rows, list):
        return []
    return [Skipped(str(r.get("path", "")), str(r.get("reason", ""))) for r in rows if isinstance(r, dict)]


def _clean_metadata(p: Passage) -> dict[str, Any]:
    """Metadata to save, without keys that would shadow id/title/text."""
    return {k: v for k, v in p.metadata.items() if k not in ("id", "title", "text")}


def _stopwords_arg(stopwords: Stopwords) -> str | list[str] | None:
    return stopwords if stopwords is None or isinstance(stopwords, str) else list(stopwords)


def _check_query(query: str) -> None:
    if not isinstance(query, str):
        raise TypeError(f"The query must be a string, got {type(query).__name__}.")
    if not query.strip():
        raise ValueError("The query is empty: pass a non-empty query string, e.g. 'Who wrote Hamlet?'.")


def _top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, highest first, ties broken by lower index."""
    n = len(scores)
    if k >= n:
        candidates = np.arange(n)
    else:
        kth = np.partition(scores, n - k)[n - k]  # the k-th largest score
        candidates = np.flatnonzero(scores >= kth)
    order = np.lexsort((candidates, -scores[candidates]))  # primary: score desc; secondary: index asc
    return [int(i) for i in candidates[order][:k]]


@lru_cache(maxsize=1)
def _demo_index() -> BM25Index:
    return BM25Index.from_jsonl(demo_corpus_path())
