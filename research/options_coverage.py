"""How often a question set's questions offer options (:func:`~active_rag.answer.options.question_options`), and on
how many of those the gold answer is one of them: what ``answer_options`` can win (the gold is an option) or lose
(it is not, so an answer constrained to the options cannot be right). No model; the questions only::

    python research/options_coverage.py --dataset hotpotqa --split dev-b

"The gold is an option" is counted two ways: ``exact``, the SQuAD-normalised gold equals an option ("Terry
Richardson"), and ``named``, one of the two holds every word of the other ("Virginia Woolf" for the gold "Adeline
Virginia Woolf": the option names the gold's entity, which F1 mostly credits).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from active_rag.answer.options import question_options
from active_rag.evaluation.datasets import DATASETS, DEFAULT_SPLIT, Example, load_dataset
from active_rag.answer.normalize import normalize_answer

__all__ = ["OptionsCoverage", "gold_option_match", "main", "options_coverage"]


@dataclass(frozen=True)
class OptionsCoverage:
    """``questions`` in all, ``with_options`` that offer two, and of those the ones whose gold is an option
    (``gold_exact``: equal once normalised; ``gold_named``: one holds every word of the other)."""

    questions: int
    with_options: int
    gold_exact: int
    gold_named: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def gold_option_match(gold: str, options: Sequence[str]) -> str | None:
    """``"exact"`` when the normalised ``gold`` equals an option, ``"named"`` when one of the two holds every word of
    the other, else ``None``."""
    norm = normalize_answer(gold)
    words = set(norm.split())
    found = None
    for option in options:
        other = normalize_answer(option)
        if other == norm:
            return "exact"
        option_words = set(other.split())
        if option_words and words and (option_words <= words or words <= option_words):
            found = "named"
    return found


def options_coverage(examples: Sequence[Example]) -> OptionsCoverage:
    """Count the questions of ``examples`` that offer options, and those whose gold answer is one (any gold)."""
    with_options = exact = named = 0
    for example in examples:
        options = question_options(example.question)
        if not options:
            continue
        with_options += 1
        matches = {gold_option_match(gold, options) for gold in example.answers}
        exact += "exact" in matches
        named += bool(matches - {None})
    return OptionsCoverage(questions=len(examples), with_options=with_options, gold_exact=exact, gold_named=named)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/options_coverage.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="hotpotqa", choices=DATASETS)
    parser.add_argument("--split", default=DEFAULT_SPLIT, help="dev (default) or, for hotpotqa, dev-b")
    parser.add_argument("--data-dir", type=Path, default=None, help="data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    args = parser.parse_args(argv)
    from active_rag.errors import ActiveRAGError

    try:
        examples = load_dataset(args.dataset, args.data_dir, split=args.split, resolve_gold_ids=False)
    except ActiveRAGError as exc:
        parser.exit(2, f"error: {exc}\n")
    c = options_coverage(examples)
    sys.stdout.write(f"{args.dataset} {args.split}: {c.questions} questions, {c.with_options} offer options; the gold "
                     f"answer is an option on {c.gold_exact} (exact) / {c.gold_named} (names it)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
