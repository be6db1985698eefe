"""Per-dataset hyperparameters of DRAGIN (Su et al. 2024), Table 9, as named profiles.

Table 9 gives, per LLM and dataset, the RIND threshold ``theta``, the number of query tokens kept by QFS
(``top n tokens``) and the generation length. A profile named after a dataset (``hotpotqa``,
``2wikimultihopqa``, ``strategyqa``, ``iirc``) holds the Llama2-13b-chat column; ``<dataset>-llama2-7b`` and
``<dataset>-vicuna-13b`` hold the other two. ``active-rag eval`` picks the profile named after its dataset;
``--profile NAME`` picks one by name (``ask`` and ``eval``).

A profile sets the RIND threshold and segment length, the QFS ``top_n`` and the answer length
(``max_new_tokens``: the released code stops once the answer is longer than ``generate_max_length``). It
also carries the retrieval rates of Table 3 (retrievals per question of DRAGIN and FLARE), the default
targets of threshold calibration (:mod:`active_rag.engine.calibration`).

The values are those printed in the paper. DRAGIN's released configurations (``config/<LLM>/<dataset>/
DRAGIN.json``) differ in places (e.g. Llama2-13b-chat 2WikiMultihopQA theta 0.8 there, 0.6 in Table 9);
the paper is the reference here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import UnknownNameError

__all__ = ["PROFILES", "Profile", "get_profile", "profile_for_dataset"]


@dataclass(frozen=True)
class Profile:
    """One column of DRAGIN Table 9 (and the matching cells of Table 3)."""

    name: str
    dataset: str
    llm: str
    theta: float  # RIND threshold
    top_n: int  # QFS query tokens
    generate_length: int  # tokens per generation (segment length and answer cap)
    dragin_retrievals: float  # Table 3: DRAGIN's retrievals per question
    flare_retrievals: float  # Table 3: FLARE's retrievals per question

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def target_rate(self, trigger: str) -> float:
        """The paper's retrievals per question for a trigger (``rind`` -> DRAGIN, ``low-confidence`` -> FLARE)."""
        return self.flare_retrievals if trigger == "low-confidence" else self.dragin_retrievals


_DATASETS = ("2wikimultihopqa", "hotpotqa", "iirc", "strategyqa")
# Table 9 rows (columns: 2WikiMultihopQA, HotpotQA, IIRC, StrategyQA) and Table 3 (#Num) per LLM.
_TABLES: dict[str, dict[str, tuple[float, ...]]] = {
    "llama2-13b-chat": {
        "generate_length": (64, 100, 128, 100),
        "theta": (0.6, 1.2, 1.25, 1.0),
        "top_n": (25, 35, 25, 25),
        "dragin": (2.631, 3.505, 2.829, 4.786),
        "flare": (1.592, 3.378, 5.521, 0.625),
    },
    "llama2-7b-chat": {
        "generate_length": (64, 100, 128, 100),
        "theta": (1.0, 1.3, 1.3, 0.75),
        "top_n": (25, 35, 35, 35),
        "dragin": (2.836, 3.013, 2.927, 4.629),
        "flare": (0.941, 1.064, 1.095, 1.271),
    },
    "vicuna-13b-v1.5": {
        "generate_length": (64, 100, 128, 100),
        "theta": (1.2, 1.2, 1.3, 1.5),
        "top_n": (25, 35, 35, 25),
        "dragin": (2.542, 3.184, 3.120, 3.744),
        "flare": (1.093, 1.078, 0.335, 1.118),
    },
}
_SUFFIX = {"llama2-13b-chat": "", "llama2-7b-chat": "-llama2-7b", "vicuna-13b-v1.5": "-vicuna-13b"}


def _build() -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    for llm, rows in _TABLES.items():
        for i, dataset in enumerate(_DATASETS):
            name = dataset + _SUFFIX[llm]
            out[name] = Profile(
                name=name, dataset=dataset, llm=llm, theta=float(rows["theta"][i]), top_n=int(rows["top_n"][i]),
                generate_length=int(rows["generate_length"][i]), dragin_retrievals=float(rows["dragin"][i]),
                flare_retrievals=float(rows["flare"][i]),
            )
    return out


#: Every profile by name.
PROFILES: dict[str, Profile] = _build()


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (:class:`~active_rag.errors.UnknownNameError` lists the valid names)."""
    key = name.strip().lower()
    if key not in PROFILES:
        raise UnknownNameError("profile", name, PROFILES)
    return PROFILES[key]


def profile_for_dataset(dataset: str) -> Profile | None:
    """The Llama2-13b-chat profile of an evaluation dataset, ``None`` for datasets Table 9 does not cover."""
    return PROFILES.get(dataset.strip().lower())
