"""research/link_features.py: the replay of a linked look under a rule, and a dump of a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from research.link_features import RULES, replay, rules_table


def _question(links: list[dict], gold: list[str], options: bool = False) -> dict:
    return {"question": "q", "compare": False, "options": options, "floor": 10.0, "first": ["f1", "f2", "f3"],
            "ahead": ["n1", "n2", "n3", "n4"], "gold": gold, "links": links, "emb_floor": 0.3}


def _link(order: int, pid: str, gold: bool, *, mentions: int = 1, sent_rel: float = 0.0, qname: bool = False,
          emb: float = 0.0) -> dict:
    return {"order": order, "name": pid, "id": pid, "qname": qname, "rel": 0.0, "srank": 0, "mentions": mentions,
            "sent_rel": sent_rel, "gold": gold, "emb": emb, "sent_emb": 0.0}


def test_replay_keeps_the_links_then_fills_with_the_next_passages() -> None:
    q = _question([_link(0, "a", False), _link(1, "b", False), _link(2, "g", True)], ["f1", "g"])
    assert replay([q]) == (100.0, 2.0)  # a and b hold no gold; g completes the evidence
    first_link = RULES["first link (open), 2 (choice)"]
    assert replay([q], first_link) == (0.0, 1.0)  # only a is read, then n1 and n2: g is lost
    assert replay([q], lambda q, link: link["gold"]) == (100.0, 0.0)


def test_a_gold_next_passage_is_not_noise_and_hubs_leave() -> None:
    q = _question([_link(0, "hub", False, mentions=500), _link(1, "g", True)], ["f1", "g", "n1"])
    assert replay([q]) == (100.0, 1.0)  # hub is noise; n1 fills the third place
    hubs_out = RULES["hubs out (mentioned by 20+ passages)"]
    assert replay([q], hubs_out) == (100.0, 0.0)


def test_dense_rules_read_the_cosine_not_the_looks_order() -> None:
    q = _question([_link(0, "a", False, emb=0.1), _link(1, "b", False, emb=0.2), _link(2, "g", True, emb=0.5)],
                  ["f1", "g"])
    assert replay([q], RULES["2 closest links (open), 3 (choice), hubs out"]) == (100.0, 1.0)  # g and b, then n1
    assert replay([q], RULES["cosine >= floor + 0.05, hubs out"]) == (100.0, 0.0)  # only g clears 0.3 + 0.05
    assert replay([q], RULES["first link or cosine >= floor + 0.05, hubs out"]) == (100.0, 1.0)  # a by its order


def test_rules_table_reads_dumps(tmp_path: Path) -> None:
    path = tmp_path / "slice.jsonl"
    rows = [_question([_link(0, "a", False), _link(1, "g", True, sent_rel=9.0)], ["f1", "g"])]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    table = rules_table([path])
    assert "| the look as it is | 100.0 / 1.00 |" in table
    assert "| first link (open), 2 (choice) | -100.0 / 1.00x |" in table
    assert "| first 2 links or sentence >= 0.8 floor, hubs out | +0.0 / 1.00x |" in table


def _noisy_slice(count: int, seed: int) -> list[dict]:
    """Questions whose gold link's mentioning sentence bears on the question (sent_rel 9) and whose noise links'
    do not (0-2), in a random order of the look."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        links = [_link(0, f"g{i}", True, sent_rel=9.0)] + [_link(0, f"x{i}-{j}", False, sent_rel=rng.uniform(0, 2))
                                                           for j in range(2)]
        rng.shuffle(links)
        for order, link in enumerate(links):
            link["order"] = order
        rows.append(_question(links, ["f1", f"g{i}"]))
    return rows


def test_learned_filter_keeps_recall_and_drops_the_noise_it_can_tell(tmp_path: Path) -> None:
    from research.link_features import LearnedFilter, learned_table

    train, test = _noisy_slice(40, 0), _noisy_slice(30, 1)
    learned = LearnedFilter(train)
    threshold = learned.lossless_threshold(train)
    assert threshold > 0.0
    assert replay(train) == (100.0, 2.0)
    recall, noise = replay(test, learned.rule(threshold))
    assert recall == 100.0 and noise < 1.0  # every gold link kept on unseen questions, the noise cut
    paths = []
    for name, rows in (("fit", train), ("other", test)):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    saved = tmp_path / "filter.json"
    table = learned_table(paths, [["fit"]], save=saved)
    assert "| fit (" in table and "+0.0 / " in table and "x* |" in table  # the unseen slice is marked
    from active_rag.answer.link_filter import LinkFilter

    engine_filter = LinkFilter.load(saved)  # what the engine reads keeps the same links as the research rule
    assert engine_filter.threshold == threshold and engine_filter.fitted_on.startswith("fit")
    assert all(engine_filter.probability(q, x) == pytest.approx(learned.as_filter(threshold).probability(q, x))
               for q in test for x in q["links"])
    assert replay(test, lambda q, x: engine_filter.probability(q, x) >= threshold) == (recall, noise)


def test_learn_names_an_unknown_training_slice(tmp_path: Path) -> None:
    from research.link_features import learned_table

    path = tmp_path / "fit.jsonl"
    path.write_text(json.dumps(_noisy_slice(2, 0)[0]) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--train names nope"):
        learned_table([path], [["nope"]])
