"""LlamaIndex integration of active-rag: active retrieval-augmented generation as LlamaIndex components."""
