"""LangChain integration of active-rag: active retrieval-augmented generation as LangChain components."""
