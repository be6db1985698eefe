"""Evidence recall of a second retrieval, without the model (``look-again-linked``, ``sr-rag-linked``).

After a first retrieval with the question (BM25, ``--top-k`` passages), what share of questions would have every
gold passage in the prompt once ``--more`` passages are added, by each way of choosing them:

- ``question``: the question's next-ranked passages (SR-RAG with ``top-k + more`` passages);
- ``per-name``: every name the first passages mention asked of the retriever alone, a name's article kept when its
  title is the name (:func:`active_rag.entities.is_article_of`), then the question's next passages: the linked
  look as it was before the name index, kept here to compare with;
- ``linked``: :func:`active_rag.answer.links.follow_links`: the names worth following looked up in the index's name index
  (:mod:`active_rag.retrieval.name_index`), then the question's next passages;
- ``choose``: ``sr-rag-choose``'s per-question choice (:func:`active_rag.answer.read_choice.choose_reading`): a comparison
  of named things follows only the question's own names, any other question as ``linked``;
- ``budget`` (with ``--budget OPEN,CHOICE,SHARE``): ``choose``'s links kept by a budget (:func:`budgeted_links`): the
  question's own names, the first ``OPEN`` links of an open question and ``CHOICE`` of a choice question ("A or
  B?"), and any other whose passage scores at least ``SHARE`` times the least relevant first passage; the question's
  next passages fill the rest.

It prints the new-evidence rate (the share of questions whose added passages bring a gold passage the first ones
lacked), how many of the added passages are linked articles that the question's next-ranked ones do not include,
how many of those hold no gold passage (the noise a reader has to skip), and the retriever calls a question makes,
the first retrieval included. ``--hide-titles`` titles every passage ``doc-<n>.txt`` (a user's files), so that
links can only come from the passages' text; the gold passages are still the same passages. It also reports how
often the name index, built over the corpus, finds each gold passage by its real title (``name_index``)::

    python research/linked_recall.py --dataset hotpotqa [--split dev-b] [--data-dir DIR] [--hide-titles]
    python research/linked_recall.py --dataset hotpotqa --without-question-names --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from active_rag.entities import entities_of, is_article_of
from active_rag.errors import ActiveRAGError
from active_rag.evaluation.datasets import Example, load_dataset
from active_rag.evaluation.method_engines import load_corpus_index
from active_rag.answer.link_filter import LinkFilter, default_link_filter
from active_rag.answer.links import follow_links, question_names
from active_rag.answer.options import question_options
from active_rag.retrieval.name_index import NameIndex, name_index_of, name_key
from active_rag.retrieval.relevance import relevance_of, terms
from active_rag.retrieval.rankings import fetch_rankings
from active_rag.answer.read_choice import choose_reading
from active_rag.text import split_sentences
from active_rag.types import Passage

WAYS = ("question", "per-name", "linked", "choose")


class CountingRetriever:
    """A retriever that counts the calls made to the one it wraps, with ``name_index`` (default: the wrapped one's)
    as its name index."""

    def __init__(self, index: Any, name_index: NameIndex | None = None) -> None:
        self.index = index
        self.name_index = name_index if name_index is not None else name_index_of(index)
        self.calls = 0

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.calls += 1
        return self.index.retrieve(query, k)


def per_name_articles(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                      held: set[str]) -> list[Passage]:
    """The linked look before the name index: every name the passages mention, each asked of the retriever alone
    (3 passages), a name's first passage titled with it kept, ranked by the question's content words shared, then
    the question's next passages."""
    from active_rag.entities import content_words

    names: list[str] = []
    for p in passages:
        for sentence in split_sentences(p.text):
            names.extend(n for n in entities_of(sentence, question, names_only=True) if n not in names)
    found: list[Passage] = []
    for name, ranking in zip(names, fetch_rankings(retriever, names, 3, held)):
        own = next((p for p in ranking if is_article_of(p, name)), None)
        if own is not None and all(own.id != f.id for f in found):
            found.append(own)
    asked = set(content_words(question))
    found.sort(key=lambda p: -len(asked & set(content_words(p.text))))
    for p in fetch_rankings(retriever, [question], k, held)[0]:
        if all(p.id != f.id for f in found):
            found.append(p)
    return found[:k]


def budgeted_links(retriever: CountingRetriever, first: Sequence[Passage], question: str, more: int, held: set[str],
                   budget: tuple[int, int, float], continuation: bool = True) -> list[str]:
    """The ids of ``more`` passages: ``choose``'s links (see the module docstring) kept by ``budget`` (open, choice,
    share), then the question's next passages."""
    open_links, choice_links, share = budget
    index = retriever.name_index
    compare = choose_reading(question).way == "compare"
    links = follow_links(retriever, [] if compare else first, question, more, held, fill=False, continuation=continuation)
    named = [(p, n) for p, n in links.sources if n is not None]
    relevance, asked = relevance_of(index), terms(question)
    floor = min(relevance.score(asked, p) for p in first) if first else 0.0
    own = {name_key(n) for n in question_names(question, index.names_document)}
    allowed = choice_links if question_options(question) else open_links
    ids = [p.id for order, (p, name) in enumerate(named)
           if name_key(name) in own or order < allowed or (floor > 0 and relevance.score(asked, p) >= share * floor)]
    ids = ids[:more]
    if len(ids) < more:
        for p in fetch_rankings(retriever, [question], more + len(ids), held)[0]:
            if len(ids) >= more:
                break
            if p.id not in ids:
                ids.append(p.id)
    return ids


def added_passages(retriever: CountingRetriever, example: Example, top_k: int, more: int,
                   with_question_names: bool = True,
                   min_share: float = 0.0,
                   continuation: bool = True, hub: float = 0.0,
                   budget: tuple[int, int, float] | None = None,
                   link_filter: LinkFilter | None = None,
                   subject: bool = True) -> tuple[list[str], dict[str, list[str]], dict[str, int]]:
    """The first retrieval's passage ids, per way (:data:`WAYS`, and ``budget`` when given) the ids of the ``more``
    passages it adds, and per way the retriever calls the question made (the first retrieval's included)."""
    retriever.calls = 0
    first = retriever.retrieve(example.question, top_k)
    held = {p.id for p in first}
    added: dict[str, list[str]] = {}
    calls: dict[str, int] = {}
    for way in WAYS + (("budget",) if budget is not None else ()):
        retriever.calls = 1
        if way == "budget":
            assert budget is not None
            ids = budgeted_links(retriever, first, example.question, more, held, budget, continuation)
        elif way == "question":
            ids = [p.id for p in fetch_rankings(retriever, [example.question], more, held)[0][:more]]
        elif way == "per-name":
            ids = [p.id for p in per_name_articles(retriever, first, example.question, more, held)]
        else:
            compare = way == "choose" and choose_reading(example.question).way == "compare"
            links = follow_links(retriever, [] if compare else first, example.question, more, held,
                                 with_question_names=with_question_names, min_share=min_share,
                                 continuation=continuation, hub=hub, link_filter=link_filter, subject=subject)
            ids = [p.id for p in links.passages]
        added[way], calls[way] = ids, retriever.calls
    return [p.id for p in first], added, calls


def recall_table(index: Any, examples: Sequence[Example], top_k: int = 3, more: int = 3,
                 name_index: NameIndex | None = None, with_question_names: bool = True,
                 min_share: float = 0.0, continuation: bool = True, hub: float = 0.0,
                 budget: tuple[int, int, float] | None = None,
                 link_filter: LinkFilter | None = None, subject: bool = True) -> dict[str, dict[str, float]]:
    """Per way: ``all_gold`` (% of questions whose prompt holds every gold passage after the added ones),
    ``new_evidence`` (% whose added passages bring a gold passage the first ones lacked), ``linked`` and
    ``linked_without_gold`` (added passages a question that the question's next-ranked ones would not have
    added, and those that are not gold), ``calls`` and ``max_calls`` (retriever calls a question, the first
    retrieval's included); ``first`` is the first retrieval alone. ``name_index``: the one the linked look reads
    (default: the index's own); ``with_question_names=False`` leaves the question's own names out of it."""
    rows = [e for e in examples if e.gold_passage_ids]
    if not rows:
        raise ValueError("No question has gold passage ids: evidence recall needs HotpotQA, 2WikiMultihopQA or StrategyQA.")
    retriever = CountingRetriever(index, name_index)
    most: dict[str, int] = {}
    out: dict[str, dict[str, float]] = {"first": {"all_gold": 0.0}}
    for way in WAYS + (("budget",) if budget is not None else ()):
        out[way] = {"all_gold": 0.0, "new_evidence": 0.0, "linked": 0.0, "linked_without_gold": 0.0, "calls": 0.0,
                    "max_calls": 0.0}
    for e in rows:
        gold = set(e.gold_passage_ids)
        first, added, calls = added_passages(retriever, e, top_k, more, with_question_names, min_share, continuation, hub,
                                             budget, link_filter, subject)
        out["first"]["all_gold"] += gold <= set(first)
        question_ids = set(added["question"])
        for way, ids in added.items():
            stats = out[way]
            stats["all_gold"] += gold <= set(first) | set(ids)
            stats["new_evidence"] += bool((gold - set(first)) & set(ids))
            linked = [i for i in ids if i not in question_ids]
            stats["linked"] += len(linked)
            stats["linked_without_gold"] += sum(i not in gold for i in linked)
            stats["calls"] += calls[way]
            most[way] = max(most.get(way, 0), calls[way])
    for way, stats in out.items():
        for key in stats:
            stats[key] = stats[key] / len(rows) * (100.0 if key in ("all_gold", "new_evidence") else 1.0)
        if way in most:
            stats["max_calls"] = float(most[way])
    return out


def name_index_hits(names: NameIndex, examples: Sequence[Example], titles: dict[str, str]) -> dict[str, float]:
    """How the name index finds the gold passages by their real titles (``titles``: id -> title): ``first`` (% whose
    title's first passage is the gold one), ``found`` (% among its passages) and ``passages`` (found a title)."""
    gold = sorted({g for e in examples for g in e.gold_passage_ids if g in titles})
    if not gold:
        return {"gold": 0, "first": 0.0, "found": 0.0, "passages": 0.0}
    first = found = returned = 0
    for g in gold:
        ids = [p.id for p in names.articles(titles[g])]
        first += bool(ids) and ids[0] == g
        found += g in ids
        returned += len(ids)
    return {"gold": len(gold), "first": 100.0 * first / len(gold), "found": 100.0 * found / len(gold),
            "passages": returned / len(gold)}


def hide_titles(index: Any) -> Any:
    """The same corpus with every passage titled ``doc-<n>.txt``, as a user's files would be, indexed again."""
    from active_rag.retrieval.bm25 import BM25Index

    return BM25Index.from_passages([Passage(id=p.id, text=p.text, title=f"doc-{n}.txt", metadata=p.metadata)
                                    for n, p in enumerate(index.passages)])


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table."""
    t = report["table"]
    split = "" if report.get("split", "dev") == "dev" else f" {report['split']}"
    lines = [f"{report['dataset']}{split}, {report['questions']} questions, {report['passages']} passages"
             f"{' (titles hidden)' if report['hide_titles'] else ''}"
             f"{'' if report.get('question_names', True) else ', linked without the question names'}"
             f"{'' if report.get('continuation', True) else ', every link followed (no continuation)'}"
             f"{'' if report.get('subject', True) else ', links scored with the read documents names (no subject)'}, "
             f"BM25 top-{report['top_k']}, then "
             f"{report['more']} more passages", "",
             "| Second retrieval | All gold % | New evidence % | Linked / q | of them without gold / q "
             "| Retriever calls / q (max) |",
             "|---|---:|---:|---:|---:|---:|",
             f"| none ({report['top_k']} passages) | {t['first']['all_gold']:.1f} | - | - | - | 1 |"]
    for way in [w for w in t if w != "first"]:
        s = t[way]
        lines.append(f"| {way} | {s['all_gold']:.1f} | {s['new_evidence']:.1f} | {s['linked']:.2f} | "
                     f"{s['linked_without_gold']:.2f} | {s['calls']:.2f} ({s['max_calls']:.0f}) |")
    n = report["name_index"]
    lines += ["", f"Name index: built in {report['name_index_seconds']:.1f} s "
              f"({report['name_index_cpu_seconds']:.1f} s of CPU); of {n['gold']} gold passages, looked up "
              f"by their real title, {n['first']:.1f}% come first and {n['found']:.1f}% are found "
              f"({n['passages']:.2f} passages a title)."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/linked_recall.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=("hotpotqa", "2wikimultihopqa", "strategyqa", "pydocs"))
    parser.add_argument("--data-dir", type=Path, default=None, help="data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    parser.add_argument("--split", default="dev", help="question file: dev (default) or, for hotpotqa, dev-b")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument("--top-k", type=int, default=3, help="passages of the first retrieval (default 3)")
    parser.add_argument("--more", type=int, default=3, help="passages the second retrieval adds (default 3)")
    parser.add_argument("--hide-titles", action="store_true", help="title every passage doc-<n>.txt (links from text only)")
    parser.add_argument("--without-question-names", action="store_true",
                        help="linked: follow only the names the passages mention, not the question's own")
    parser.add_argument("--min-share", type=float, default=0.0,
                        help="linked/choose: read a linked passage only when its relevance to the question is at least "
                             "this share of the question's own least relevant passage's (active_rag.retrieval.relevance; "
                             "default 0: every one)")
    parser.add_argument("--hub", type=float, default=0.0,
                        help="linked/choose: do not follow a name that at least this share of the corpus's passages (and "
                             "at least 20) mention (active_rag.answer.links.follow_links' hub; default 0: every one)")
    parser.add_argument("--link-filter", action="store_true",
                        help="read a linked passage only when the shipped learned filter keeps it "
                             "(active_rag.answer.link_filter; the linked looks' ways)")
    parser.add_argument("--no-subject", action="store_true",
                        help="linked/choose: score a mentioned name's passage with the names of the documents the "
                             "question reads too (active_rag.answer.links.follow_links' subject off)")
    parser.add_argument("--no-continuation", action="store_true",
                        help="linked/choose: follow every name even where the question's next passage continues a "
                             "document it reads (active_rag.answer.links.follow_links' continuation off)")
    parser.add_argument("--budget", default=None, metavar="OPEN,CHOICE,SHARE",
                        help="also the way 'budget': choose's links kept by a budget (the first OPEN links of an open "
                             "question, CHOICE of a choice question, any whose passage scores at least SHARE times the "
                             "least relevant first passage; the question's own names always)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here, and as Markdown beside it")
    args = parser.parse_args(argv)
    if args.top_k < 1 or args.more < 1:
        print("error: --top-k and --more must be at least 1.", file=sys.stderr)
        return 2
    budget = None
    if args.budget is not None:
        try:
            open_links, choice_links, share = args.budget.split(",")
            budget = (int(open_links), int(choice_links), float(share))
        except ValueError:
            print(f"error: --budget {args.budget!r} is not OPEN,CHOICE,SHARE (two whole numbers and a number, "
                  "e.g. 1,2,0.5).", file=sys.stderr)
            return 2
    try:
        examples = load_dataset(args.dataset, args.data_dir, args.limit, split=args.split)
        index, _, _ = load_corpus_index(args.dataset, args.data_dir)
        titles = {p.id: p.title for p in index.passages}
        if args.hide_titles:
            index = hide_titles(index)
        start, cpu = time.perf_counter(), time.process_time()
        names = NameIndex.from_passages(index.passages)  # built here: a cached index may hold one by older rules
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        table = recall_table(index, examples, args.top_k, args.more, names, not args.without_question_names,
                             args.min_share, not args.no_continuation, args.hub, budget,
                             default_link_filter() if args.link_filter else None, not args.no_subject)
    except (ActiveRAGError, ValueError) as exc:  # no data folder, a malformed file, no gold ids
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = {"dataset": args.dataset, "split": args.split, "min_share": args.min_share, "hub": args.hub,
              "link_filter": args.link_filter,
              "budget": args.budget, "continuation": not args.no_continuation,
              "subject": not args.no_subject, "data_dir": str(args.data_dir or "default"), "hide_titles": args.hide_titles,
              "question_names": not args.without_question_names,
              "questions": sum(1 for e in examples if e.gold_passage_ids), "passages": len(index.passages),
              "top_k": args.top_k, "more": args.more, "table": table, "name_index_seconds": seconds,
              "name_index_cpu_seconds": cpu,
              "name_index": name_index_hits(names, examples, titles)}
    text = markdown(report)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        args.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
