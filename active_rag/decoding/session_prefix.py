"""A decoding session's use of the model's prefix cache (:mod:`active_rag.decoding.prefix_cache`): start from the
longest cached prefix of its prompt, remember the prompt it computed, and put it back for prompts that share it.
:class:`~active_rag.decoding.model.DecodingSession` inherits these."""

from __future__ import annotations

from typing import Any

from .kv_layer import GrowingLayer, is_full_attention_layer


class SessionPrefixCache:
    """The prefix-cache half of a decoding session (its ``lm``, ``ids``, KV ``_cache`` and ``_fed`` count)."""

    lm: Any
    ids: list[int]
    cached_tokens: int
    prefilled_tokens: int
    _cache: Any
    _fed: int

    def _layers(self) -> list[Any] | None:
        layers = list(getattr(self._cache, "layers", []))
        if not layers or not all(is_full_attention_layer(layer) for layer in layers):
            return None  # sliding-window or other cache layouts are not shared
        return layers

    def _start_from_prefix_cache(self) -> None:
        cache = self.lm.prefix_cache
        prompt = len(self.ids)
        if cache is None or self._layers() is None:
            self.prefilled_tokens = prompt
            return
        # at least the last prompt token is fed, so its logits (and capture) come from this session
        hit = cache.lookup(self.ids, limit=prompt - 1, namespace=self.lm.cache_namespace)
        if hit is None:
            self.prefilled_tokens = prompt
            return
        layers = self._layers()
        assert layers is not None
        for layer, (k, v) in zip(layers, hit.kv, strict=True):
            layer.lazy_initialization(k, v)
            layer.keys = k[:, :, : hit.length]
            layer.values = v[:, :, : hit.length]
        self._fed = hit.length
        self.cached_tokens = hit.length
        self.prefilled_tokens = prompt - hit.length

    def _remember_prompt(self) -> None:
        cache = self.lm.prefix_cache
        layers = self._layers()
        if cache is None or layers is None or self._fed > len(self.ids) or any(
                layer.keys is None or layer.keys.shape[-2] != self._fed for layer in layers):
            return  # no cache, or a model that does not fill this cache layout
        kv = [v for layer in layers if isinstance(layer, GrowingLayer) and (v := layer.share(self._fed)) is not None]
        shared = len(kv) == len(layers)  # the prompt's KV held once: the cache views this session's buffers
        cache.insert(self.ids[: self._fed], kv if shared else [(layer.keys, layer.values) for layer in layers],
                     namespace=self.lm.cache_namespace, shared=shared)

    def remember_prefix(self, length: int) -> None:
        """Put the KV of this session's first ``length`` tokens (its prompt) in the model's prefix cache again, as the
        most recent entry (a copy): sessions about to open on prompts that share it (the questions an answer step
        asks with the same passages) read it from there instead of prefilling it, even where the prompts of other
        sessions (a batch's) have aged it out. Nothing without a cache, or beyond the tokens this session has fed."""
        cache = self.lm.prefix_cache
        layers = self._layers()
        if cache is None or layers is None or not 1 <= length <= min(self._fed, len(self.ids)) or any(
                layer.keys is None or layer.keys.shape[-2] < length for layer in layers):
            return
        cache.insert(self.ids[:length], [(layer.keys, layer.values) for layer in layers],
                     namespace=self.lm.cache_namespace)
