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
- With a registry model under 1B parameters (:data:`ASK_SMALL_MODELS`: qwen2.5-coder-0.5b, smollm2),
  ``look-again-choose`` (:data:`ASK_SMALL_MODEL_METHOD`) with the ``focus`` context (:data:`ASK_SMALL_MODEL_CONTEXT`):
  answer from the question's three passages, and where the draft is unsure or not found in them, look again as the
  question's form says and read the look in a prompt as short as the draft's (the question's best two passages
  and the look's best; a comparison's look in full). The 0.5B reader reads six passages worse than three, so
  ``sr-rag-choose``'s six do not pay on HotpotQA (-0.3 F1 against six passages over the union); read this way the
  look is above six passages on every HotpotQA and 2WikiMultihopQA slice measured (HotpotQA +1.4 to +3.5,
  2WikiMultihopQA +9.6 to +10.1) and 1.7 below them on StrategyQA, where this reader is at chance (docs/context.md,
  "A look read in a prompt as short as the first").
"""

from __future__ import annotations

from collections.abc import Callable

from ..models.model_specs import DEFAULT_MODEL

__all__ = [
    "ASK_ENDPOINT_METHOD",
    "ASK_METHOD",
    "ASK_MODELS",
    "ASK_SMALL_MODELS",
    "ASK_SMALL_MODEL_CONTEXT",
    "ASK_SMALL_MODEL_METHOD",
    "default_ask_context",
    "default_ask_method",
    "default_ask_model",
    "default_method_reason",
]

#: Registry models, strongest first: ``ask``'s model is the first one that loads without installing anything.
ASK_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2")
#: ``ask``'s method with a local model.
ASK_METHOD = "sr-rag-choose"
#: ``ask``'s method with ``--endpoint``.
ASK_ENDPOINT_METHOD = "sr-rag"
#: Registry models under 1B parameters: their reader loses in six passages what the links add (module docstring).
ASK_SMALL_MODELS = ("qwen2.5-coder-0.5b", "smollm2")
#: ``ask``'s method with one of :data:`ASK_SMALL_MODELS`.
ASK_SMALL_MODEL_METHOD = "look-again-choose"
#: ``ask``'s context policy with one of :data:`ASK_SMALL_MODELS` (the method's own with any other model).
ASK_SMALL_MODEL_CONTEXT = "focus"


def default_ask_model(loadable: Callable[[str], bool]) -> str:
    """The first of :data:`ASK_MODELS` that ``loadable`` says is on this machine (the CLI asks the registry:
    installed, or already converted); the package's default model when none is."""
    return next((name for name in ASK_MODELS if loadable(name)), DEFAULT_MODEL)


def default_ask_method(endpoint: bool = False, model: str | None = None) -> str:
    """:data:`ASK_ENDPOINT_METHOD` with an endpoint, :data:`ASK_SMALL_MODEL_METHOD` for one of
    :data:`ASK_SMALL_MODELS`, else :data:`ASK_METHOD` (``model``: the registry name or the Hugging Face id or folder
    ``ask`` loads; a model outside the registry gets :data:`ASK_METHOD`)."""
    if endpoint:
        return ASK_ENDPOINT_METHOD
    return ASK_SMALL_MODEL_METHOD if model in ASK_SMALL_MODELS else ASK_METHOD


def default_ask_context(endpoint: bool = False, model: str | None = None) -> str | None:
    """:data:`ASK_SMALL_MODEL_CONTEXT` where :func:`default_ask_method` picks :data:`ASK_SMALL_MODEL_METHOD`, else
    ``None`` (the method's own context policy)."""
    return ASK_SMALL_MODEL_CONTEXT if not endpoint and model in ASK_SMALL_MODELS else None


def default_method_reason(endpoint: bool = False, model: str | None = None) -> str:
    """Why :func:`default_ask_method` picked its method, as ``ask``'s header says it (``Method: ... (<reason>)``)."""
    if endpoint:
        return "the default with --endpoint: one retrieval, six passages"
    if model in ASK_SMALL_MODELS:
        return "the default for models under 1B parameters"
    return "the default for models of 1B parameters and more" if model in ASK_MODELS else "the default"
