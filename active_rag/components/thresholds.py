"""Calibrated thresholds: the cache of :mod:`active_rag.engine.calibration`'s results, and how ``theta="auto"`` resolves.

A calibration is cached per model, trigger (+ scale), profile and prompt mode (:func:`calibration_key`) in
``calibration.json`` under the model cache folder (:func:`~active_rag.models.model_cache.cache_dir`:
``$ACTIVE_RAG_CACHE``, else ``$XDG_CACHE_HOME/active-rag``, else ``~/.cache/active-rag``). A trigger with
``theta="auto"`` (the presets' default) uses the cached value when there is one, else the profile's or the
paper's value, and says which in ``threshold_source`` (trace, ``--json``, ``active-rag methods``):
:func:`resolve_threshold`, which the loop calls when it is built.

Also here: :class:`Calibration` (one cached threshold and the evidence behind it) and
:func:`threshold_for_rate` (the threshold at which a given share of scores fires). Running the model to
measure the scores is :mod:`active_rag.engine.calibration`'s, above the loop; this module sits below it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models.model_cache import cache_dir

if TYPE_CHECKING:  # pragma: no cover
    from .profiles import Profile

__all__ = [
    "CALIBRATION_FILE",
    "Calibration",
    "cache_path",
    "calibration_entries",
    "calibration_key",
    "load_calibration",
    "resolve_threshold",
    "save_calibration",
    "threshold_for_rate",
    "trigger_key",
]

CALIBRATION_FILE = "calibration.json"


def cache_path() -> Path:
    """The calibration cache file: ``calibration.json`` in :func:`~active_rag.models.model_cache.cache_dir`."""
    return cache_dir() / CALIBRATION_FILE


def trigger_key(trigger: Any) -> str:
    """``trigger[:scale]``: the trigger's name, with RIND's scale unless it is the default ``sentence``."""
    scale = getattr(trigger, "scale", None)
    return f"{trigger.name}:{scale}" if scale and scale != "sentence" else str(trigger.name)


def calibration_key(model: str, trigger: Any, profile: str | None = None, prompt_mode: str = "single") -> str:
    """``model|trigger[:scale]|profile|prompt mode``: one cached threshold per combination."""
    return f"{model}|{trigger_key(trigger)}|{profile or '-'}|{prompt_mode}"


@dataclass
class Calibration:
    """One calibrated threshold and the evidence behind it."""

    model: str
    trigger: str
    theta: float
    target_retrievals_per_question: float
    fire_fraction: float
    questions: int
    checks: int
    profile: str | None = None
    prompt_mode: str = "single"
    score_quantiles: dict[str, float] = field(default_factory=dict)
    created: str = ""

    @property
    def checks_per_question(self) -> float:
        return self.checks / self.questions if self.questions else 0.0

    @property
    def reachable(self) -> bool:
        """Whether one threshold can give the target: a model whose answers offer fewer checks per question
        than the target's retrievals per question fires on every check and still falls short."""
        return self.target_retrievals_per_question <= self.checks_per_question

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "checks_per_question": self.checks_per_question,
                "reachable": self.reachable}


def threshold_for_rate(scores: Sequence[float], fraction: float, *, fires_above: bool) -> float:
    """The threshold at which ``fraction`` of ``scores`` fire (``score > theta`` when ``fires_above``, else
    ``score < theta``): ``k = round(fraction * n)`` scores fire. RIND: the ``k+1``-th largest score;
    FLARE: the ``k+1``-th smallest. ``k = n`` gives a threshold just past the last score."""
    if not scores:
        raise ValueError("No check scores to calibrate on: the questions produced no trigger checks.")
    if not 0.0 <= fraction <= 1.0 or math.isnan(fraction):
        raise ValueError(f"fraction must be between 0 and 1, got {fraction}.")
    ordered = sorted(scores, reverse=fires_above)
    k = int(round(fraction * len(ordered)))
    if k >= len(ordered):
        last = ordered[-1]
        return max(0.0, last - 1e-6) if fires_above else last + 1e-6
    return float(ordered[k])


# --------------------------------------------------------------------------------------------------- cache


def _read_cache(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def save_calibration(cal: Calibration, trigger: Any, path: Path | None = None) -> Path:
    """Add (or replace) ``cal`` in the cache file, atomically; other entries are kept."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_cache(path)
    data[calibration_key(cal.model, trigger, cal.profile, cal.prompt_mode)] = cal.to_dict()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path


def load_calibration(model: str, trigger: Any, profile: str | None = None, prompt_mode: str = "single",
                     path: Path | None = None) -> dict[str, Any] | None:
    """The cached calibration entry, or ``None``."""
    entry = _read_cache(path or cache_path()).get(calibration_key(model, trigger, profile, prompt_mode))
    return entry if isinstance(entry, dict) and isinstance(entry.get("theta"), (int, float)) else None


def resolve_threshold(trigger: Any, model: str, profile: Profile | None = None, prompt_mode: str = "single") -> Any:
    """A copy of ``trigger`` with ``theta="auto"`` replaced: the cached calibration for this model, trigger,
    profile and prompt mode when there is one (``threshold_source = "calibrated:<file>"``), else the profile's
    theta for RIND (``"profile:<name>"``), else the paper's default (``"default (not calibrated for <model>)"``).
    Triggers without ``theta="auto"`` are returned unchanged."""
    if getattr(trigger, "theta", None) != "auto":
        return trigger
    entry = load_calibration(model, trigger, profile.name if profile else None, prompt_mode)
    if entry is not None:
        return dataclasses.replace(trigger, theta=float(entry["theta"]), threshold_source=f"calibrated:{cache_path()}")
    if profile is not None and trigger.name == "rind":
        return dataclasses.replace(trigger, theta=profile.theta, threshold_source=f"profile:{profile.name}")
    return dataclasses.replace(trigger, theta=float(trigger.default_theta),
                               threshold_source=f"default (not calibrated for {model})")


def calibration_entries(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every cached calibration, by key (``model|trigger|profile|prompt mode``)."""
    return {k: v for k, v in _read_cache(path or cache_path()).items() if isinstance(v, dict) and "theta" in v}
