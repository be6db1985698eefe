"""Decoding: the model and its KV-cached session (:mod:`~active_rag.decoding.model`), the decode scheduler and the
ragged attention that batch the questions in flight, admission, the prefix cache, attention capture, constrained
decoding, stop rules and what fits the context window.
"""
