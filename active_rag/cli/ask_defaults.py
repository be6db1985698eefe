"""What ``active-rag ask QUESTION`` runs when the user names no model or method: the best answer this machine can give.

- The model: the strongest registry model that loads without installing anything (:data:`ASK_MODELS`, strongest
  first): qwen2.5-coder-1.5b, else qwen2.5-coder-0.5b, else smollm2, which comes with the package but is too weak
  for multi-hop questions (HotpotQA EM 2.5 even with both gold paragraphs in context).
- The method: ``sr-rag-choose`` (:data:`ASK_METHOD`): retrieve once with the question, then add, chosen by the
  question's form, the own articles of the things a comparison names or the articles its passages link to, and
  answer once, a choice question with one of its options. With qwen2.5-coder-1.5b on the 20,218-passage union
  corpus it scores +12.4 F1 over SR-RAG with the same six passages on HotpotQA's bridge questions and +9.9 on
  2WikiMultihopQA, ties it on comparisons and StrategyQA, at under two retriever calls a question (docs/context.md,
  "Choose per question what to read"); it needs no threshold, where DRAGIN's and FLARE's would need
  ``active-rag calibrate`` on each model first. With ``--endpoint`` (no logits to mask for the options): ``sr-rag``
  (:data:`ASK_ENDPOINT_METHOD`), six passages, the best single retrieval.
"""

from __future__ import annotations

from collections.abc import Callable

from ..models.model_specs import DEFAULT_MODEL

__all__ = ["ASK_ENDPOINT_METHOD", "ASK_METHOD", "ASK_MODELS", "default_ask_method", "default_ask_model"]

#: Registry models, strongest first: ``ask``'s model is the first one that loads without installing anything.
ASK_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2")
#: ``ask``'s method with a local model.
ASK_METHOD = "sr-rag-choose"
#: ``ask``'s method with ``--endpoint``.
ASK_ENDPOINT_METHOD = "sr-rag"


def default_ask_model(loadable: Callable[[str], bool]) -> str:
    """The first of :data:`ASK_MODELS` that ``loadable`` says is on this machine (the CLI asks the registry:
    installed, or already converted); the package's default model when none is."""
    return next((name for name in ASK_MODELS if loadable(name)), DEFAULT_MODEL)


def default_ask_method(endpoint: bool = False) -> str:
    """:data:`ASK_ENDPOINT_METHOD` with an endpoint, else :data:`ASK_METHOD`."""
    return ASK_ENDPOINT_METHOD if endpoint else ASK_METHOD
