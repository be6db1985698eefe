"""The engine: the loop (:class:`~active_rag.engine.loop.ActiveRAG`), the state of one run
(:class:`~active_rag.engine.run.Run`), and the collaborators every phase of a run uses: the generation helpers
(:mod:`active_rag.engine.generation`), the retrieval steps (:mod:`active_rag.engine.retrieving`) and the answer
steps (:mod:`active_rag.engine.answer_steps`)."""

from .answer_steps import AnswerStep, EngineParts
from .loop import ActiveRAG, Router
from .run import Run

__all__ = ["ActiveRAG", "AnswerStep", "EngineParts", "Router", "Run"]
