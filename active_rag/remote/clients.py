"""A :class:`~active_rag.remote.lm.RemoteLM` from a framework's OpenAI-compatible client object, read by
duck typing so that this module imports neither framework:

- LangChain: ``ChatOpenAI(base_url=..., model=..., logprobs=True)`` (chat API; ``logprobs=True`` is required, as
  LangChain's own ``FlareChain`` requires it), ``OpenAI`` (the completions LLM), ``ChatOllama`` (Ollama's
  OpenAI-compatible route, ``{base_url}/v1``, chat API);
- LlamaIndex: ``OpenAILike(api_base=..., model=..., is_chat_model=...)`` and ``OpenAI``.

Only the connection settings are taken (base URL, model name, API key, timeout, retries); requests then go
through :class:`~active_rag.remote.http.EndpointClient`, with the log-probabilities the engine needs. Built models
are cached per client object and tokenizer, so a runnable that resolves its model on every call builds it once.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..errors import InvalidOptionError

__all__ = ["is_remote_client", "remote_from_client"]

_CACHE: dict[tuple[int, str | None, str], tuple[weakref.ref[Any] | None, Any]] = {}
_LOCK = threading.Lock()


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    getter = getattr(value, "get_secret_value", None)
    return str(getter()) if callable(getter) else str(value)


def _retries(client: Any) -> int:
    """The client's ``max_retries`` (0 included: no retry), 2 when it sets none."""
    value = getattr(client, "max_retries", None)
    return 2 if value is None else int(value)


def _settings(client: Any) -> dict[str, Any] | None:
    """RemoteLM keyword arguments from a client object, ``None`` when it is not one this module knows."""
    cls = type(client).__name__
    if hasattr(client, "openai_api_base") and hasattr(client, "model_name"):  # langchain_openai ChatOpenAI / OpenAI
        chat = "Chat" in cls
        if chat and not getattr(client, "logprobs", False):
            raise InvalidOptionError(
                f"{cls} does not return log-probabilities: build it with logprobs=True, e.g. "
                "ChatOpenAI(base_url='http://127.0.0.1:8080/v1', model='NAME', logprobs=True).")
        timeout = getattr(client, "request_timeout", None)
        options: dict[str, Any] = {
            "base_url": client.openai_api_base, "model": client.model_name, "api": "chat" if chat else "completions",
            "api_key": _secret(getattr(client, "openai_api_key", None)),
            "retries": _retries(client),
        }
        if isinstance(timeout, (int, float)) and timeout > 0:
            options["timeout"] = float(timeout)
        top = getattr(client, "top_logprobs", None)
        if isinstance(top, int) and top > 0:
            options["top_logprobs"] = top
        return options
    if cls == "ChatOllama" and hasattr(client, "model"):  # langchain_ollama: its OpenAI-compatible route
        base = str(getattr(client, "base_url", None) or "http://localhost:11434").rstrip("/")
        return {"base_url": base + "/v1", "model": client.model, "api": "chat"}
    if hasattr(client, "api_base") and hasattr(client, "model") and hasattr(client, "is_chat_model"):  # LlamaIndex
        options = {
            "base_url": client.api_base, "model": client.model, "api": "chat" if client.is_chat_model else "completions",
            "api_key": _secret(getattr(client, "api_key", None)),
            "retries": _retries(client),
        }
        timeout = getattr(client, "timeout", None)
        if isinstance(timeout, (int, float)) and timeout > 0:
            options["timeout"] = float(timeout)
        return options
    return None


def is_remote_client(client: Any) -> bool:
    """Whether ``client`` is an OpenAI-compatible client object :func:`remote_from_client` reads."""
    try:
        return _settings(client) is not None
    except InvalidOptionError:
        return True  # one of ours, misconfigured: remote_from_client says how


def remote_from_client(client: Any, tokenizer: Any = None, **overrides: Any) -> Any:
    """The :class:`~active_rag.remote.lm.RemoteLM` of an OpenAI-compatible client object (see the module docs);
    ``tokenizer``: the served model's tokenizer or its registry name / folder (:class:`RemoteLM`'s argument)."""
    from .lm import RemoteLM

    options = _settings(client)
    if options is None:
        raise TypeError(
            f"{type(client).__name__} is not an OpenAI-compatible client this package reads: pass ChatOpenAI(base_url=..., "
            "logprobs=True), OpenAILike(api_base=...), or an active_rag.RemoteLM.")
    options.update(overrides)
    key = (id(client), tokenizer if isinstance(tokenizer, str) or tokenizer is None else str(id(tokenizer)), repr(sorted(options.items())))
    with _LOCK:
        held = _CACHE.get(key)
        if held is not None and (held[0] is None or held[0]() is client):
            return held[1]
    lm = RemoteLM(tokenizer=tokenizer, **options)
    try:
        ref: weakref.ref[Any] | None = weakref.ref(client)
    except TypeError:
        ref = None
    with _LOCK:
        _CACHE[key] = (ref, lm)
    return lm
