"""Loaders for the evaluation question sets: HotpotQA, 2WikiMultihopQA, StrategyQA and RetrievalQA.

Expected layout under the data directory (see ``shared/data/README.md`` of the project)::

    hotpotqa/questions_dev.jsonl           hotpotqa/corpus.jsonl
    hotpotqa/questions_dev_b.jsonl         (split ``dev-b``: more dev questions, mostly comparisons)
    2wikimultihopqa/questions_dev.jsonl    2wikimultihopqa/corpus.jsonl
    strategyqa/strategyqa_dev_229.json     strategyqa/corpus_facts.jsonl
    retrievalqa/questions_dev.jsonl        retrievalqa/corpus.jsonl

Question formats (upstream in brackets):

* HotpotQA (IRCoT ``dev_subsampled.jsonl`` format): ``question_id``, ``question_text``, ``answers_objects``
  (answer = ``answers_objects[0]["spans"][0]``), ``contexts`` ``[{id, title, paragraph_text, is_supporting}]``.
  The context ``id`` is the paragraph's position within the question ("0".."9"), not a corpus id, so gold
  passage ids are found by title in ``corpus.jsonl`` (titles are unique there; on a duplicate title the passage
  with the same whitespace-normalised text wins).
* 2WikiMultihopQA: ``_id``, ``question``, ``answer``, ``supporting_facts`` ``[[title, sentence_index]]``;
  gold titles are the supporting-fact titles (first-seen order), gold passage ids their corpus ids by title.
* StrategyQA (official ``dev.json``, a JSON list): ``qid``, ``question``, ``answer`` (bool -> "yes"/"no"),
  ``facts``. The fact corpus keys its sentences by other question ids, so each gold fact is found by its
  whitespace-normalised text (one id per fact, preferring the corpus question that holds most of the facts).
* RetrievalQA (``retrievalqa_gpt4.jsonl``): ``question_id``, ``data_source``, ``question``, ``ground_truth``
  (list of acceptable answers), ``param_knowledge_answerable`` (0 = needs retrieval), ``contexts``
  ``[{rank, title, text}]`` best first; they become ``Passage(id=f"{question_id}#{rank}")``. There are no gold
  passage labels.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from active_rag.errors import CorpusError, InvalidOptionError, UnknownNameError
from active_rag.types import Passage

__all__ = [
    "DATASETS",
    "DATA_ENV_VAR",
    "DEFAULT_SPLIT",
    "SPLITS",
    "Example",
    "ExampleKind",
    "check_split",
    "corpus_path",
    "default_data_dir",
    "load_dataset",
    "questions_path",
]

#: Names accepted by :func:`load_dataset`.
DATASETS: tuple[str, ...] = ("hotpotqa", "2wikimultihopqa", "strategyqa", "retrievalqa", "pydocs")

#: Environment variable naming the data directory (checked first by :func:`default_data_dir`).
DATA_ENV_VAR = "ACTIVE_RAG_DATA"

ExampleKind = Literal["qa", "bool", "retrievalqa"]

_QUESTIONS_FILES = {
    "hotpotqa": "hotpotqa/questions_dev.jsonl",
    "2wikimultihopqa": "2wikimultihopqa/questions_dev.jsonl",
    "strategyqa": "strategyqa/strategyqa_dev_229.json",
    "retrievalqa": "retrievalqa/questions_dev.jsonl",
    "pydocs": "pydocs/questions_dev.jsonl",
}
#: The question files of each dataset's splits; ``dev`` (:data:`DEFAULT_SPLIT`) is every dataset's. HotpotQA's
#: ``dev-b`` holds 125 more dev questions, mostly comparisons (yes/no and "A or B"), over the same corpus.
SPLITS: dict[str, dict[str, str]] = {name: {"dev": path} for name, path in _QUESTIONS_FILES.items()}
SPLITS["hotpotqa"]["dev-b"] = "hotpotqa/questions_dev_b.jsonl"
DEFAULT_SPLIT = "dev"
_CORPUS_FILES = {
    "hotpotqa": "hotpotqa/corpus.jsonl",
    "2wikimultihopqa": "2wikimultihopqa/corpus.jsonl",
    "strategyqa": "strategyqa/corpus_facts.jsonl",
    "retrievalqa": "retrievalqa/corpus.jsonl",
    "pydocs": "pydocs/docs",  # a folder of Markdown files, read as `--corpus DIR` reads one
}
_LAYOUT = "\n".join(f"  {_QUESTIONS_FILES[n]}  +  {_CORPUS_FILES[n]}" for n in DATASETS)


@dataclass
class Example:
    """One evaluation question with its gold answers and gold evidence.

    ``kind`` says how to score it: ``"qa"`` (EM/F1 against ``answers``), ``"bool"`` (StrategyQA yes/no
    accuracy; ``answers`` is ``["yes"]`` or ``["no"]``) or ``"retrievalqa"`` (RetrievalQA ``match``).
    ``gold_passage_ids`` are corpus ids (empty when unknown or not resolved); ``contexts`` are RetrievalQA's
    own pre-retrieved passages, best first (empty for the other sets); ``needs_retrieval`` is RetrievalQA's
    label (None elsewhere); ``raw`` is the record as read from the file.
    """

    id: str
    question: str
    answers: list[str]
    kind: ExampleKind
    gold_passage_ids: list[str] = field(default_factory=list)
    gold_titles: list[str] = field(default_factory=list)
    contexts: list[Passage] = field(default_factory=list)
    needs_retrieval: bool | None = None
    data_source: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def gold_bool(self) -> bool | None:
        """The StrategyQA answer as a bool (None for other kinds)."""
        if self.kind != "bool":
            return None
        return self.answers[0] == "yes"


# ------------------------------------------------------------------------------------------------ paths


def _check_name(name: str) -> str:
    if name not in DATASETS:
        raise UnknownNameError("dataset", name, DATASETS)
    return name


def check_split(name: str, split: str) -> str:
    """``split`` when dataset ``name`` has it (:data:`SPLITS`); :class:`InvalidOptionError` naming the valid ones."""
    valid = SPLITS[_check_name(name)]
    if split not in valid:
        raise InvalidOptionError(f"{name} has no split {split!r}: use one of {', '.join(valid)} (e.g. --split dev).")
    return split


def default_data_dir() -> Path | None:
    """The evaluation data directory: the first existing of ``$ACTIVE_RAG_DATA``, ``../shared/data`` relative to
    the current working directory, and ``shared/data`` next to the repository checkout; None when none exists."""
    candidates: list[Path] = []
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        candidates.append(Path(env).expanduser())
    candidates.append(Path.cwd().parent / "shared" / "data")
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared" / "data")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return None


def _resolve_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    found = default_data_dir()
    if found is None:
        raise CorpusError(
            "No evaluation data directory found: pass data_dir=..., or set "
            f"${DATA_ENV_VAR} to a directory laid out as\n{_LAYOUT}"
        )
    return found


def questions_path(name: str, data_dir: str | os.PathLike[str] | None = None, split: str = DEFAULT_SPLIT) -> Path:
    """Path of a dataset split's question file under ``data_dir`` (default :func:`default_data_dir`); not checked."""
    return _resolve_dir(data_dir) / SPLITS[name][check_split(name, split)]


def corpus_path(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of a dataset's passage corpus under ``data_dir`` (default :func:`default_data_dir`); not checked.

    hotpotqa/corpus.jsonl, 2wikimultihopqa/corpus.jsonl, strategyqa/corpus_facts.jsonl, retrievalqa/corpus.jsonl.
    """
    return _resolve_dir(data_dir) / _CORPUS_FILES[_check_name(name)]


def _require_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise CorpusError(
            f"{what} {str(path)!r} does not exist: point data_dir (or ${DATA_ENV_VAR}) at a directory laid out as\n"
            f"{_LAYOUT}"
        )


# ------------------------------------------------------------------------------------------------ reading


def _not_utf8(where: str, exc: UnicodeDecodeError) -> CorpusError:
    return CorpusError(f"{where}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1}): "
                       "save the file as UTF-8.")


def _iter_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (``"file, line N"``, object) for each non-blank line; CorpusError on a line that is not a JSON object
    or not UTF-8."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}, line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(where, exc) from exc
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(
                    f"{where}: not valid JSON ({exc.msg} at column {exc.colno}): each line must be one JSON object."
                ) from exc
            if not isinstance(obj, dict):
                raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
            yield where, obj


def _first_bad_utf8(path: Path, exc: UnicodeDecodeError) -> CorpusError:
    """The error naming the first line of ``path`` that is not UTF-8 (for a loader that decodes the whole file)."""
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as line_exc:
            return _not_utf8(f"{path}, line {lineno}", line_exc)
    return CorpusError(f"{path}: not valid UTF-8 ({exc.reason}): save the file as UTF-8.")


def _record_places(path: Path, examples: list[Example]) -> list[str]:
    """Where each of ``examples`` (loaded in file order from ``path``) is in the file: ``"file, line N"`` (JSONL)
    or ``"file, item N"`` (a JSON list), matched on the records themselves."""
    if path.suffix == ".jsonl":
        records: Iterator[tuple[str, Any]] = _iter_jsonl(path)
    else:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        records = ((f"{path}, item {i}", obj) for i, obj in enumerate(data if isinstance(data, list) else []))
    places: list[str] = []
    for where, obj in records:
        if len(places) == len(examples):
            break
        if obj == examples[len(places)].raw:
            places.append(where)
    return places + [str(path)] * (len(examples) - len(places))


def _check_questions(examples: list[Example], path: Path) -> list[Example]:
    """``examples``, once every question has text and an id of its own; CorpusError naming the file and the line(s)."""
    first: dict[str, int] = {}
    for n, example in enumerate(examples):
        if not example.question.strip():
            where = _record_places(path, examples[: n + 1])[n]
            raise CorpusError(f"{where}: the question text is blank: write the question, or remove the record.")
        if example.id in first:
            places = _record_places(path, examples[: n + 1])
            a, b = places[first[example.id]], places[n]
            b = b.rsplit(", ", 1)[-1] if a.rsplit(", ", 1)[0] == b.rsplit(", ", 1)[0] else b
            raise CorpusError(f"{a} and {b}: question id {example.id!r} is used twice (rows and scores are kept by "
                              "id): give each question its own id, or remove the duplicate.")
        first[example.id] = n
    return examples


def _get(obj: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise CorpusError(f"{where}: missing key {key!r}.")
    value = obj[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        names = " or ".join(t.__name__ for t in _as_tuple(types))
        raise CorpusError(f"{where}: {key!r} must be {names}, got {type(value).__name__}.")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _ws(text: str) -> str:
    return " ".join(text.split())


@dataclass
class _CorpusIndex:
    by_title: dict[str, list[tuple[str, str]]]  # title -> [(id, normalised text)]
    by_text: dict[str, list[tuple[str, str]]]  # normalised text -> [(id, qid)]


def _read_corpus_index(path: Path) -> _CorpusIndex:
    by_title: dict[str, list[tuple[str, str]]] = {}
    by_text: dict[str, list[tuple[str, str]]] = {}
    for where, obj in _iter_jsonl(path):
        pid = obj.get("id")
        if not isinstance(pid, (str, int)) or isinstance(pid, bool):
            raise CorpusError(f"{where}: \"id\" must be a string or an integer.")
        title = obj.get("title") or ""
        text = obj.get("text")
        if not isinstance(text, str) or not isinstance(title, str):
            raise CorpusError(f"{where}: \"text\" and \"title\" must be strings.")
        norm = _ws(text)
        by_title.setdefault(title, []).append((str(pid), norm))
        by_text.setdefault(norm, []).append((str(pid), str(obj.get("qid", ""))))
    return _CorpusIndex(by_title, by_text)


def _id_by_title(index: _CorpusIndex, title: str, text: str | None = None) -> str | None:
    candidates = index.by_title.get(title, [])
    if not candidates:
        return None
    if text is not None and len(candidates) > 1:
        norm = _ws(text)
        for pid, ptext in candidates:
            if ptext == norm:
                return pid
    return candidates[0][0]


def _warn_unresolved(name: str, corpus: Path, missing: int) -> None:
    if missing:
        warnings.warn(
            f"{name}: {missing} gold passage(s) not found in {corpus}; their ids are left out of gold_passage_ids "
            "(gold_titles still lists them).",
            stacklevel=3,
        )


# ------------------------------------------------------------------------------------------------ loaders


def _load_hotpotqa(path: Path, limit: int | None, index: _CorpusIndex | None) -> tuple[list[Example], int]:
    examples: list[Example] = []
    missing = 0
    for where, obj in _iter_jsonl(path):
        if limit is not None and len(examples) >= limit:
            break
        qid = str(_get(obj, "question_id", (str, int), where))
        question = _get(obj, "question_text", str, where)
        answers_objects = _get(obj, "answers_objects", list, where)
        answers: list[str] = []
        for ao in answers_objects:
            spans = ao.get("spans") if isinstance(ao, dict) else None
            if not isinstance(spans, list) or not all(isinstance(s, str) for s in spans):
                raise CorpusError(f"{where}: each of 'answers_objects' needs a list of strings 'spans'.")
            answers.extend(s for s in spans if s not in answers)
        if not answers:
            raise CorpusError(f"{where}: 'answers_objects' holds no answer span.")
        contexts = _get(obj, "contexts", list, where)
        gold_titles: list[str] = []
        gold_ids: list[str] = []
        for ctx in contexts:
            if not isinstance(ctx, dict) or not isinstance(ctx.get("title"), str):
                raise CorpusError(f"{where}: each of 'contexts' must be an object with a string 'title'.")
            if not ctx.get("is_supporting"):
                continue
            gold_titles.append(ctx["title"])
            if index is not None:
                pid = _id_by_title(index, ctx["title"], ctx.get("paragraph_text"))
                if pid is None:
                    missing += 1
                else:
                    gold_ids.append(pid)
        examples.append(Example(id=qid, question=question, answers=answers, kind="qa",
                                gold_passage_ids=gold_ids, gold_titles=gold_titles, raw=obj))
    return examples, missing


def _load_2wiki(path: Path, limit: int | None, index: _CorpusIndex | None) -> tuple[list[Example], int]:
    examples: list[Example] = []
    missing = 0
    for where, obj in _iter_jsonl(path):
        if limit is not None and len(examples) >= limit:
            break
        qid = str(_get(obj, "_id", (str, int), where))
        question = _get(obj, "question", str, where)
        answer = _get(obj, "answer", str, where)
        facts = _get(obj, "supporting_facts", list, where)
        gold_titles: list[str] = []
        for fact in facts:
            if not isinstance(fact, list) or not fact or not isinstance(fact[0], str):
                raise CorpusError(f"{where}: each of 'supporting_facts' must be [title, sentence_index].")
            if fact[0] not in gold_titles:
                gold_titles.append(fact[0])
        gold_ids: list[str] = []
        if index is not None:
            context_text = {
                c[0]: " ".join(c[1]) for c in obj.get("context", [])
                if isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], list)
            }
            for title in gold_titles:
                pid = _id_by_title(index, title, context_text.get(title))
                if pid is None:
                    missing += 1
                else:
                    gold_ids.append(pid)
        examples.append(Example(id=qid, question=question, answers=[answer], kind="qa",
                                gold_passage_ids=gold_ids, gold_titles=gold_titles, raw=obj))
    return examples, missing


def _fact_ids(facts: list[str], index: _CorpusIndex) -> tuple[list[str], int]:
    """One corpus id per gold fact (matched on whitespace-normalised text), preferring the corpus question
    that holds the most of this question's facts; the count of facts not found."""
    candidates = [index.by_text.get(_ws(f), []) for f in facts]
    votes: dict[str, int] = {}
    for cands in candidates:
        for qid in {q for _, q in cands}:
            votes[qid] = votes.get(qid, 0) + 1
    ids: list[str] = []
    missing = 0
    for cands in candidates:
        if not cands:
            missing += 1
            continue
        best = max(cands, key=lambda c: votes.get(c[1], 0))  # first of the most-voted on ties
        if best[0] not in ids:
            ids.append(best[0])
    return ids, missing


def _load_strategyqa(path: Path, limit: int | None, index: _CorpusIndex | None) -> tuple[list[Example], int]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise CorpusError(
            f"{path}, line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}): "
            "the file must be one JSON list of question objects."
        ) from exc
    if not isinstance(data, list):
        raise CorpusError(f"{path}: expected a JSON list of question objects, got {type(data).__name__}.")
    examples: list[Example] = []
    missing = 0
    for i, obj in enumerate(data):
        if limit is not None and len(examples) >= limit:
            break
        where = f"{path}, item {i}"
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
        qid = str(_get(obj, "qid", (str, int), where))
        question = _get(obj, "question", str, where)
        answer = _get(obj, "answer", bool, where)
        facts = obj.get("facts", [])
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            raise CorpusError(f"{where}: 'facts' must be a list of strings.")
        gold_ids: list[str] = []
        if index is not None:
            gold_ids, miss = _fact_ids(facts, index)
            missing += miss
        examples.append(Example(id=qid, question=question, answers=["yes" if answer else "no"], kind="bool",
                                gold_passage_ids=gold_ids, raw=obj))
    return examples, missing


def _load_retrievalqa(path: Path, limit: int | None, index: _CorpusIndex | None) -> tuple[list[Example], int]:
    del index  # RetrievalQA has no gold passage labels
    examples: list[Example] = []
    for where, obj in _iter_jsonl(path):
        if limit is not None and len(examples) >= limit:
            break
        qid = str(_get(obj, "question_id", (str, int), where))
        question = _get(obj, "question", str, where)
        golds = _get(obj, "ground_truth", list, where)
        if not golds or not all(isinstance(g, str) for g in golds):
            raise CorpusError(f"{where}: 'ground_truth' must be a non-empty list of strings.")
        answerable = obj.get("param_knowledge_answerable")
        if answerable is not None and (not isinstance(answerable, int) or isinstance(answerable, bool)):
            raise CorpusError(f"{where}: 'param_knowledge_answerable' must be 0 or 1.")
        raw_contexts = obj.get("contexts", [])
        if not isinstance(raw_contexts, list):
            raise CorpusError(f"{where}: 'contexts' must be a list.")
        ranked: list[tuple[int, int, dict[str, Any]]] = []
        for pos, ctx in enumerate(raw_contexts):
            if not isinstance(ctx, dict) or not isinstance(ctx.get("text", ""), str):
                raise CorpusError(f"{where}: each of 'contexts' must be an object with a string 'text'.")
            rank = ctx.get("rank", pos + 1)
            if not isinstance(rank, int) or isinstance(rank, bool):
                raise CorpusError(f"{where}: context 'rank' must be an integer.")
            ranked.append((rank, pos, ctx))
        ranked.sort(key=lambda t: (t[0], t[1]))
        contexts = [
            Passage(id=f"{qid}#{rank}", title=ctx.get("title") or "", text=ctx.get("text") or "",
                    metadata={"rank": rank})
            for rank, _, ctx in ranked
        ]
        source = obj.get("data_source")
        examples.append(Example(
            id=qid, question=question, answers=list(golds), kind="retrievalqa", contexts=contexts,
            needs_retrieval=None if answerable is None else answerable == 0,
            data_source=source if isinstance(source, str) else None, raw=obj,
        ))
    return examples, 0


def _load_pydocs(path: Path, limit: int | None, corpus: Path | None) -> tuple[list[Example], int]:
    """pydocs (:mod:`active_rag.evaluation.pydocs`): kind ``qa``, F1 against the gold and its accepted forms; gold
    chunk ids from the folder ``corpus`` as ``--corpus DIR`` cuts it, when given; the count of supporting files the
    folder lacks."""
    from active_rag.evaluation.pydocs import file_of, folder_passages, gold_chunks

    by_file: dict[str, list[Passage]] = {}
    if corpus is not None:
        for p in folder_passages(corpus):
            by_file.setdefault(file_of(p), []).append(p)
    examples: list[Example] = []
    missing = 0
    for where, obj in _iter_jsonl(path):
        if limit is not None and len(examples) >= limit:
            break
        qid = str(_get(obj, "question_id", (str, int), where))
        question = _get(obj, "question_text", str, where)
        answers = _get(obj, "answers", list, where)
        if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise CorpusError(f"{where}: 'answers' must be a non-empty list of non-empty strings.")
        files = _get(obj, "supporting_files", list, where)
        if not all(isinstance(f, str) for f in files):
            raise CorpusError(f"{where}: 'supporting_files' must be a list of file names.")
        qtype = obj["type"] if isinstance(obj.get("type"), str) else ""
        gold: list[str] = []
        if corpus is not None:
            missing += sum(1 for f in files if f not in by_file)
            gold = gold_chunks(qtype, files, by_file)
        examples.append(Example(id=qid, question=question, answers=list(answers), kind="qa",
                                gold_passage_ids=gold, gold_titles=[Path(f).stem for f in files], raw=obj))
    return examples, missing


_LOADERS = {
    "hotpotqa": _load_hotpotqa,
    "2wikimultihopqa": _load_2wiki,
    "strategyqa": _load_strategyqa,
    "retrievalqa": _load_retrievalqa,
}


def load_dataset(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    *,
    resolve_gold_ids: bool = True,
    split: str = DEFAULT_SPLIT,
) -> list[Example]:
    """Load a question set as :class:`Example` objects, in file order.

    ``name`` is one of :data:`DATASETS`; ``data_dir`` defaults to :func:`default_data_dir`; ``limit`` keeps the
    first N questions; ``split`` names the question file (:data:`SPLITS`: ``dev``, or HotpotQA's ``dev-b``). With ``resolve_gold_ids`` (default) the dataset's corpus (:func:`corpus_path`) is read
    to turn gold titles/facts into corpus passage ids (not needed, and not read, for RetrievalQA); pass False
    to skip that and leave ``gold_passage_ids`` empty.

    Raises :class:`~active_rag.errors.UnknownNameError` for an unknown name and
    :class:`~active_rag.errors.CorpusError` for a missing file (naming the path and the expected layout) or a
    malformed record, a blank question, a question id used twice (naming both places) or a line that is not UTF-8
    (naming the file and line, or the item index for StrategyQA's JSON list). Gold passages
    that the corpus lacks are left out of ``gold_passage_ids`` with a warning.
    """
    _check_name(name)
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative integer, got {limit!r}.")
    root = _resolve_dir(data_dir)
    qpath = root / SPLITS[name][check_split(name, split)]
    _require_file(qpath, f"The {name} question file" + ("" if split == DEFAULT_SPLIT else f" of split {split}"))
    index: _CorpusIndex | None = None
    cpath = root / _CORPUS_FILES[name]
    if name == "pydocs":
        if resolve_gold_ids and not cpath.is_dir():
            _require_file(cpath, "The pydocs documentation folder")
        examples, missing = _load_pydocs(qpath, limit, cpath if resolve_gold_ids else None)
        _warn_unresolved(name, cpath, missing)
        return _check_questions(examples, qpath)
    if resolve_gold_ids and name != "retrievalqa":
        _require_file(cpath, f"The {name} corpus (needed to resolve gold passage ids; resolve_gold_ids=False skips it)")
        index = _read_corpus_index(cpath)
    try:
        examples, missing = _LOADERS[name](qpath, limit, index)
    except UnicodeDecodeError as exc:  # a loader that decodes the whole file (StrategyQA's JSON list)
        raise _first_bad_utf8(qpath, exc) from exc
    _warn_unresolved(name, cpath, missing)
    return _check_questions(examples, qpath)
