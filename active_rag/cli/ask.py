"""What ``active-rag ask`` prints and its feedback options (:func:`active_rag.cli.commands.cmd_ask` runs it): the
header (the question, the model and why it, the method and why it), each retrieval, the answer check and the cost,
and ``--threads``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..types import TokenEvent

__all__ = [
    "add_threads_option",
    "is_terminal",
    "print_answer_check",
    "print_checks_and_cost",
    "print_header",
    "print_retrieval",
    "rewind_label",
    "set_threads",
]


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch's CPU threads, as ``active-rag eval --threads``."""
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch CPU threads (default: torch's choice; 1 or 2 is steadier on a shared machine)")


def set_threads(threads: int | None) -> None:
    """Check ``--threads`` (at least 1) and give torch that many CPU threads; ``None`` leaves torch's choice."""
    if threads is None:
        return
    from ..validation import check_int

    check_int("--threads", threads, minimum=1)
    import torch

    torch.set_num_threads(threads)


def print_header(args: argparse.Namespace, engine: Any, out: Any) -> None:
    """The lines ``ask`` prints before it reads the prompt: the question, the model and why that model (named with
    ``--model``, or the strongest registry model installed), and the method with why that method (``--method``, or
    ``ask``'s default for this model: :mod:`active_rag.cli.ask_defaults`)."""
    print(f"Question: {args.question}", file=out)
    model_why = getattr(args, "model_reason", None) or "--model"
    endpoint = getattr(args, "endpoint", None)
    where = f" at {endpoint}" if endpoint else ""
    print(f"Model:    {args.model or 'the served model'}{where} ({model_why})", file=out)
    source = engine.describe()["threshold_source"]
    theta = f" (theta {engine.describe()['threshold']:g}: {source})" if source else ""
    context = f", context {engine.context.name}" if getattr(args, "context", None) else ""  # not the method's
    why = getattr(args, "method_reason", None)
    why = f" ({why})" if why else " (--method)" if args.method else ""
    print(f"Method:   {engine.method}{theta}{context}, prompt mode {engine.prompt_mode}{why}", file=out)


def print_retrieval(r: Any, out: Any) -> None:
    """One retrieval, human-readable: where (output token position), why (the trigger, the token that fired it,
    its score and the threshold, with where the threshold came from), the query, and the passages (title and
    id) the prompt got. A field that does not apply (a retrieval before generation has no token or score, a
    trigger without a threshold none) prints as ``-``."""
    score = "-" if r.score is None else f"{r.score:.3f}"
    source = f" ({r.threshold_source})" if r.threshold is not None and getattr(r, "threshold_source", None) else ""
    threshold = "-" if r.threshold is None else f"{r.threshold:g}"
    token = "(before generation)" if r.token is None else repr(r.token)
    print(f"  [retrieval @ token {r.position}] trigger={r.trigger} token={token} score={score} "
          f"threshold={threshold}{source}", file=out)
    print(f"      query: {r.query}", file=out)
    if r.top_k is not None and r.returned is not None and r.returned < r.top_k:
        print(f"      the retriever returned {r.returned} of the {r.top_k} passages asked for", file=out)
    details = r.details or {}
    linked = details.get("articles") if r.formulator == "linked" else None
    if r.formulator == "linked":  # the per-question choice, then the names followed, best first
        if details.get("choice"):
            print(f"      chose {details['choice']}: {details.get('choice_reason', '')}", file=out)
        print(f"      names followed: {', '.join(details.get('names') or []) or '(none)'}", file=out)
        scores, filtered = details.get("link_scores") or {}, set(details.get("filtered") or ())
        if scores:  # the link filter: each name's probability that its article is gold; below the threshold: not read
            print("      link filter: " + ", ".join(f"{n} {p:.2f}" + (" (not read)" if n in filtered else "")
                                             for n, p in scores.items()), file=out)
    for p in r.passages:
        origin = ""
        if linked is not None:  # the linked look: a name's own article, or the question's next passage
            origin = f"  <- the article of {linked[p.id]!r}" if p.id in linked else "  <- the question's next passage"
        print(f"      - {p.shown_title or p.id}  [{p.id}]{origin}", file=out)
    premise = set(details.get("premise_pages") or ())
    dropped = [p for p in r.dropped if p.id not in premise]
    if dropped:
        from ..answer.premise import PREMISE_REASON

        reason = r.dropped_reason.replace(f"; {PREMISE_REASON}", "")
        print(f"      ({len(dropped)} lower-ranked passages left out of the prompt: {reason})", file=out)
    if premise:  # a linked look read the page the question describes: the premise's own pages leave
        print(f"      left out, pages of what only the question's premise names (the page it describes is read): "
              f"{', '.join(sorted(premise))}", file=out)
    held = getattr(r, "held_ids", None)
    if held is not None and held != r.passage_ids:  # a context policy that keeps earlier passages
        print(f"      the prompt now holds {len(held)} passages: {', '.join(held)}", file=out)


def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def rewind_label(last: TokenEvent, event: TokenEvent) -> str:
    """What a token at an earlier position than the last one means, for ``ask --stream``."""
    if event.attempt != last.attempt:
        return "answer again" if event.attempt else "answer kept: the draft"
    return "the text after here dropped: a repeated sentence, or one a check cut"


def print_checks_and_cost(result: Any, out: Any) -> None:
    """What ``ask`` prints after the retrievals: the answer check, the dates compared, and the question's cost."""
    if result.answer_check is not None:
        print_answer_check(result.answer_check, out)
    if result.date_comparison is not None and result.date_comparison.get("event") == "version-asked":
        record = result.date_comparison  # a question that asks for a version: the version the answer names
        if record["written"] != record["answer"]:  # said only where the short answer is not the span as written
            print(f"Version asked: {record['written']!r} -> {record['answer']!r}", file=out)
    elif result.date_comparison is not None:
        from ..answer.dates import describe_comparison

        label = "Versions compared" if result.date_comparison.get("event") == "version" else "Dates compared"
        print(f"{label}: {describe_comparison(result.date_comparison)}", file=out)
    if result.each_name is not None:
        same = result.each_name.get("rule") == "same"
        missing = "no value" if same else "neither yes nor no"
        asked = "; ".join(f"{a['question']!r}: {a['verdict'] or missing}" for a in result.each_name["asked"])
        settled = result.each_name["answer"] or "the reader's answer stands"
        print(f"{'Each value asked' if same else 'Each name asked'}: {asked} -> {settled}", file=out)
    print(f"Retriever calls: {result.retriever_calls}", file=out)
    print(f"Prompt tokens: {result.prompt_tokens_read} read ({result.cached_prompt_tokens} from the prefix cache, "
          f"{result.prefilled_prompt_tokens} prefilled)", file=out)


def print_answer_check(check: dict[str, Any], out: Any) -> None:
    """The answer check's record: each answer with the probability of its weakest answer token, and which was kept."""
    def line(name: str, c: dict[str, Any]) -> str:
        return f"  {name}: {c['answer']!r} (weakest answer token {c['token']!r}, p={c['min_prob']:.3f})"

    print(f"Answer check ({check['name']}, theta {check['theta']:g}, keep by {check['select']}): "
          f"{'looked again' if check['fired'] else check.get('reason', 'sure of the draft')}; kept the {check['kept']}",
          file=out)
    print(line("draft", check["draft"]), file=out)
    if check.get("second"):
        print(line("second", check["second"]), file=out)
