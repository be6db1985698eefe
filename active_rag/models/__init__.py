"""The models' files: the registry of models (:mod:`~active_rag.models.registry`), their specs, installation, GGUF
files and converted-model cache, loading, weights (int8 / int4) and devices.
"""
