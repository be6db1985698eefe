"""How chunk size, overlap and the identity line change what BM25 finds: `python results/chunking/measure.py` from the
repository root (no model; about a minute). Writes `results/chunking/pydocs.md` and `results/chunking/hotpotqa.md`.

For every chunk size (128, 256, 384 tokens), overlap (0, 32, 64) and identity line (each chunk after a document's
first starts with a line naming the document, `active_rag.retrieval.chunking.identity_line`: `no` line, `name`: the
file name and the header's `Title`/`Name` as a folder corpus has it, `name+summary`: with the header's `Summary`
too), the documents are cut as a folder corpus is cut (`chunk_passages`), indexed with BM25
(`BM25Index.from_passages`, the library's defaults) and each dev question (its text alone) retrieves 6 passages.

- **pydocs** (`pydocs/docs/` + `questions_dev.jsonl`): a question's gold chunks are the chunks of its
  `supporting_files` whose text cut from the file holds the answer `answers[0]` (case-insensitive; the identity line
  does not count); questions with no such chunk (yes/no and "A or B" answers) are left out. `hit@k`: share of the
  questions with a gold chunk in the first k; `files@k`: share of the supporting files (of those questions) with a
  gold chunk in the first k.
- **hotpotqa** (`hotpotqa/corpus.jsonl` + `questions_dev.jsonl`, each paragraph a document titled as in the corpus):
  the gold documents are the two `contexts` with `is_supporting`; `recall@k`: share of gold documents with a chunk in
  the first k; `both@k`: share of questions with both.

`--data-dir DIR` (default: `$ACTIVE_RAG_DATA` or `../shared/data`, as `active-rag eval`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from active_rag.retrieval import chunking
from active_rag.retrieval.bm25 import BM25Index, read_jsonl_passages
from active_rag.retrieval.chunking import IDENTITY_FIELDS, chunk_passages, count_tokens, identity_line
from active_rag.retrieval.folder import read_folder
from active_rag.types import Passage

OUT = Path(__file__).resolve().parent

# The three identity lines of a chunk size and overlap cut the documents alike: cut each document once.
chunking.chunk_text = functools.lru_cache(maxsize=None)(chunking.chunk_text)  # type: ignore[assignment]
SIZES = (128, 256, 384)
OVERLAPS = (0, 32, 64)
KS = (3, 6)
#: The identity lines compared: the header fields each names (None: no line).
PREFIXES: dict[str, tuple[str, ...] | None] = {"no": None, "name": IDENTITY_FIELDS,
                                               "name+summary": (*IDENTITY_FIELDS, "Summary")}


def _body(p: Passage) -> str:
    """The part of a passage cut from its document (without the identity line)."""
    prefix = p.metadata.get("prefix")
    return p.text[len(prefix) + 1:] if isinstance(prefix, str) and p.text.startswith(prefix) else p.text


def _source(p: Passage) -> str:
    return str(p.metadata.get("source") or p.id)


def _configs() -> list[tuple[int, int, str]]:
    return [(size, overlap, prefix) for size in SIZES for overlap in OVERLAPS for prefix in PREFIXES]


def _cut(docs: Sequence[Passage], size: int, overlap: int, prefix: str,
         name: Callable[[Passage], str]) -> list[Passage]:
    fields = PREFIXES[prefix]
    identity = None if fields is None else (lambda p: identity_line(name(p), p.text, fields))
    return chunk_passages(docs, chunk_tokens=size, overlap=overlap, identity=identity)


def _table(header: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _defaults() -> str:
    return (f"The library's defaults (`--chunk-tokens`, `--chunk-overlap`, the identity line of a folder corpus): "
            f"{chunking.DEFAULT_CHUNK_TOKENS} tokens, overlap {chunking.DEFAULT_CHUNK_OVERLAP}, `name` "
            f"(the file name and the header's {' / '.join(chunking.IDENTITY_FIELDS)}). Rebuild: "
            "`python results/chunking/measure.py`.")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def measure_pydocs(data: Path) -> str:
    docs = read_folder(data / "pydocs" / "docs").passages
    questions = [json.loads(line) for line in (data / "pydocs" / "questions_dev.jsonl").open(encoding="utf-8")]
    rows: list[list[str]] = []
    for size, overlap, prefix in _configs():
        passages = _cut(docs, size, overlap, prefix, name=lambda p: p.id)
        index = BM25Index.from_passages(passages)
        by_file: dict[str, list[Passage]] = {}
        for p in passages:
            by_file.setdefault(_source(p), []).append(p)
        hits = {k: 0 for k in KS}
        files_found = {k: 0 for k in KS}
        asked = files = 0
        for q in questions:
            answer = q["answers"][0].lower()
            gold = {f: {p.id for p in by_file.get(f, []) if answer in _body(p).lower()} for f in q["supporting_files"]}
            gold = {f: ids for f, ids in gold.items() if ids}
            if not gold:
                continue
            asked += 1
            files += len(gold)
            ranked = [p.id for p in index.retrieve(q["question_text"], max(KS))]
            for k in KS:
                top = set(ranked[:k])
                hits[k] += any(ids & top for ids in gold.values())
                files_found[k] += sum(1 for ids in gold.values() if ids & top)
        tokens = sum(count_tokens(p.text) for p in passages) / len(passages)
        rows.append([str(size), str(overlap), prefix, str(len(passages)), f"{tokens:.0f}",
                     *[_pct(hits[k] / asked) for k in KS], *[_pct(files_found[k] / files) for k in KS]])
    header = ["chunk tokens", "overlap", "identity line", "passages", "mean tokens", "hit@3", "hit@6", "files@3",
              "files@6"]
    return (f"# pydocs: gold chunks found by BM25 ({asked} of {len(questions)} dev questions have a chunk holding "
            f"the answer; {files} supporting files)\n\n{_table(header, rows)}\n\n{_defaults()}\n")


def measure_hotpotqa(data: Path) -> str:
    docs = read_jsonl_passages(data / "hotpotqa" / "corpus.jsonl")
    questions = [json.loads(line) for line in (data / "hotpotqa" / "questions_dev.jsonl").open(encoding="utf-8")]
    gold_titles = [{c["title"] for c in q["contexts"] if c["is_supporting"]} for q in questions]
    rows: list[list[str]] = []
    for size, overlap, prefix in _configs():
        passages = _cut(docs, size, overlap, prefix, name=lambda p: p.title or p.id)
        index = BM25Index.from_passages(passages)
        title_of = {p.id: p.title for p in docs}
        recall = {k: 0.0 for k in KS}
        both = {k: 0 for k in KS}
        for q, gold in zip(questions, gold_titles):
            ranked = [title_of[_source(p)] for p in index.retrieve(q["question_text"], max(KS))]
            for k in KS:
                found = gold & set(ranked[:k])
                recall[k] += len(found) / len(gold)
                both[k] += found == gold
        tokens = sum(count_tokens(p.text) for p in passages) / len(passages)
        n = len(questions)
        rows.append([str(size), str(overlap), prefix, str(len(passages)), f"{tokens:.0f}",
                     *[_pct(recall[k] / n) for k in KS], *[_pct(both[k] / n) for k in KS]])
    header = ["chunk tokens", "overlap", "identity line", "passages", "mean tokens", "recall@3", "recall@6", "both@3",
              "both@6"]
    return (f"# HotpotQA: gold paragraphs found by BM25 ({len(questions)} dev questions, {len(docs)} paragraphs)\n\n"
            f"{_table(header, rows)}\n\n{_defaults()}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = os.environ.get("ACTIVE_RAG_DATA") or str(Path.cwd().parent / "shared" / "data")
    parser.add_argument("--data-dir", type=Path, default=Path(default))
    args = parser.parse_args(argv)
    for name, measure in (("pydocs", measure_pydocs), ("hotpotqa", measure_hotpotqa)):
        start = time.perf_counter()
        text = measure(args.data_dir)
        (OUT / f"{name}.md").write_text(text, encoding="utf-8")
        print(text)
        print(f"({name}: {time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
