"""Errors raised by active-rag.

Every error names the problem and the fix. They all derive from :class:`ActiveRAGError`, and the
ones caused by bad arguments also derive from :class:`ValueError`, so callers can catch either.
"""

from __future__ import annotations

from collections.abc import Iterable


class ActiveRAGError(Exception):
    """Base class of every error raised by active-rag."""


class EmptyQuestionError(ActiveRAGError, ValueError):
    """The question is empty or only whitespace."""

    def __init__(self) -> None:
        super().__init__("The question is empty: pass a non-empty question string, e.g. 'Who wrote Hamlet?'.")


class UnknownNameError(ActiveRAGError, ValueError):
    """An unknown method, trigger, query formulator, router or model name."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"Unknown {kind} {name!r}. Valid {kind}s: {', '.join(self.valid)}.")


class CorpusError(ActiveRAGError, ValueError):
    """A corpus is missing or a line of it is malformed."""


class ContextOverflowError(ActiveRAGError, ValueError):
    """The prompt does not fit in the model's context window, even without retrieved passages."""


class RetrieverError(ActiveRAGError):
    """The retriever raised an exception; the original exception is the ``__cause__``."""


class AttentionCaptureError(ActiveRAGError):
    """The model's attention weights cannot be captured during generation."""


class ModelNotInstalledError(ActiveRAGError):
    """The weights of a named model are not installed; the message gives the install command."""


class ModelIntegrityError(ActiveRAGError):
    """The installed weights of a named model do not match their published checksum."""


class InvalidOptionError(ActiveRAGError, ValueError):
    """A numeric or date option is out of range, not finite, or of the wrong type (e.g. ``theta=nan``,
    ``top_k=0``, ``max_retrievals=-1``, ``today="notadate"``)."""


class QuestionTypeError(ActiveRAGError, TypeError, ValueError):
    """The question is not a string (``None``, bytes, a number...); the message names the type given."""

    def __init__(self, given: object) -> None:
        self.given_type = type(given).__name__
        hint = " (decode it first, e.g. question.decode('utf-8'))" if isinstance(given, (bytes, bytearray)) else ""
        super().__init__(
            f"The question must be a string, got {self.given_type}{hint}: pass e.g. 'Who wrote Hamlet?'."
        )


class QuestionsTypeError(ActiveRAGError, TypeError, ValueError):
    """``run_batch``/``stream_batch`` got one string where a list of questions belongs (it would be answered one
    character at a time)."""

    def __init__(self, given: object) -> None:
        shown = given if len(given) <= 40 else given[:37] + "..."  # type: ignore[arg-type,index]
        super().__init__(f"run_batch takes a list of questions, got one {type(given).__name__} {shown!r}: "
                         f"wrap it as [question], or call run(question).")


class IndexPathError(ActiveRAGError, ValueError):
    """An index cannot be written where asked: the path is a file, an existing index (without
    ``overwrite``/``--force``), a folder holding other files, or not writable."""


class ModelLoadError(ActiveRAGError):
    """A model folder exists but cannot be loaded (e.g. a broken ``config.json``); the original error is the cause."""


class NonFiniteLogitsError(ActiveRAGError, RuntimeError):
    """The model's next-token distribution holds NaN or infinite values (float16 overflows on some models, e.g.
    Qwen2): every signal read from it would be meaningless, so decoding stops instead of deciding on it."""


class RunCancelledError(ActiveRAGError):
    """The async caller of a run was cancelled (or stopped reading its stream): decoding stopped at the next step
    instead of running to the end in its thread."""


class DecodeOutOfMemoryError(ActiveRAGError, MemoryError):
    """The device ran out of memory on this sequence's decode step even in a batch of its own: the other
    sequences of its batched forward were retried without it and went on (their caches are as before the failed
    try); this one's cache is rolled back to before the step, so a shorter prompt, fewer ``max_new_tokens`` or
    a smaller ``prefix_cache_mb`` can free the room. The device's own error is the ``__cause__``."""


class BatchError(ActiveRAGError):
    """Some questions of :meth:`ActiveRAG.run_batch` failed; the others finished.

    ``failures`` lists ``(index, exception)``; ``results`` holds every question's result or exception,
    in input order."""

    def __init__(self, failures: list[tuple[int, BaseException]], results: list[object]) -> None:
        self.failures = failures
        self.results = results
        index, first = failures[0]
        more = f" ({len(failures) - 1} more failed)" if len(failures) > 1 else ""
        super().__init__(
            f"{len(failures)} of {len(results)} questions failed; question {index}: {type(first).__name__}: {first}{more}. "
            "The other questions finished: their results are in .results (pass return_exceptions=True to get them directly)."
        )


class EndpointError(ActiveRAGError):
    """An OpenAI-compatible endpoint (``RemoteLM``, ``--endpoint``) could not be used: unreachable, a timeout, an
    HTTP error, or a reply without what the engine needs. The message is one line naming the problem and the fix."""


class EndpointUnreachableError(EndpointError):
    """Nothing answers at the endpoint's address (connection refused, unknown host), even after the retries."""


class EndpointTimeoutError(EndpointError):
    """The endpoint did not answer within the timeout, even after the retries."""


class EndpointHTTPError(EndpointError):
    """The endpoint answered with an HTTP error (a 5xx after the retries, or a 4xx at once); ``status`` holds its code."""

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)


class NoLogprobsError(EndpointError):
    """The endpoint's reply holds no token log-probabilities: every active-retrieval signal needs them."""


class NeedsLocalModelError(AttentionCaptureError, ValueError):
    """A method that reads the model's attention (DRAGIN's RIND trigger, the QFS / attention queries) was built on a
    remote model: an endpoint returns token probabilities only. Raised when the engine is constructed."""
