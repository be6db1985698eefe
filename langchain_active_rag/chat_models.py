"""``ChatActiveHF``: a LangChain chat model over the engine's :class:`active_rag.ActiveLM`.

Messages are rendered with the tokenizer's chat template (``apply_chat_template``, tools included; see
:mod:`langchain_active_rag.tools`), then decoded with one KV-cached
:meth:`ActiveLM.session(...).generate <active_rag.DecodingSession.generate>` pass. With
``logprobs=True`` (field or ``.bind(logprobs=True)``) the response carries OpenAI-shaped log-probabilities
in ``response_metadata["logprobs"]``: ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``;
``top_logprobs=k`` fills each token's ``top_logprobs`` with the ``k`` most likely tokens of the raw
distribution. Structured output and forced tool calls are decoded under a JSON schema
(:mod:`active_rag.decoding.constrained`), so they always parse.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Literal

import torch
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import (
    BaseChatModel,
    LangSmithParams,
    LanguageModelInput,
)
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers import (
    JsonOutputKeyToolsParser,
    JsonOutputParser,
    PydanticOutputParser,
    PydanticToolsParser,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import (
    convert_to_json_schema,
    convert_to_openai_tool,
)
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import ConfigDict, Field, field_validator, model_validator

from active_rag import ActiveLM, TokenStep
from active_rag.decoding.constrained import JsonSchemaConstraint, TopLogprobs, chain
from active_rag.stopping import StopFilter

from .tools import (
    CALL_OPEN,
    call_schema,
    forced_names,
    parse_tool_calls,
    template_supports_tools,
    to_chat_turns,
    with_tools_system_turn,
)

_LOAD_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _load(name: str, weights: str) -> ActiveLM:
    return ActiveLM.load(name, weights=weights)


def load_active_lm(name: str, weights: str = "auto") -> ActiveLM:
    """``ActiveLM.load(name, weights=weights)``, once per process, name and weights (thread-safe)."""
    from active_rag.models.weights import check_weights

    with _LOAD_LOCK:
        return _load(name, check_weights(weights))


def logprob_entry(step: TokenStep, text: str | None = None, top: list[tuple[int, str, float]] | None = None) -> dict[str, Any]:
    """One OpenAI-style ``logprobs.content`` item (``top``: the step's ``(id, text, logprob)`` alternatives)."""
    token = step.text if text is None else text
    alternatives = [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))} for _, t, lp in (top or [])]
    return {"token": token, "logprob": step.logprob, "bytes": list(token.encode("utf-8")), "top_logprobs": alternatives}


_CALL_KWARGS = {"max_tokens", "temperature", "logprobs", "top_logprobs", "seed", "model", "stop", "tools", "tool_choice",
                "response_format", "ls_structured_output_format"}


def _response_schema(response_format: Any) -> tuple[bool, dict[str, Any] | None]:
    """``(constrained?, JSON schema or None for any object)`` of an OpenAI-style ``response_format``."""
    if response_format is None:
        return False, None
    if isinstance(response_format, dict) and response_format.get("type") == "json_object":
        return True, None
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, dict):
            return True, schema
    raise ValueError(
        f"Unsupported response_format {response_format!r}: use {{'type': 'json_object'}} or "
        "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}."
    )


class ChatActiveHF(BaseChatModel):
    """A local Hugging Face chat model (through :class:`active_rag.ActiveLM`) as a LangChain chat model.

    Setup:
        Install ``active-rag`` with the LangChain extra; models load offline from the registry
        (``smollm2``, ``qwen2.5-coder-0.5b``, ...), a local folder, a GGUF file or the local HF cache.

        .. code-block:: bash

            pip install "active-rag[langchain]"

    Key init args — completion params:
        model_name (alias ``model``): registry name or path for ``ActiveLM.load`` (loaded on first use,
        shared per process). lm: an already loaded ``ActiveLM`` (takes precedence, never serialized).
        max_tokens: maximum generated tokens. temperature: 0 decodes greedily. stop: stop sequences.
        logprobs / top_logprobs: OpenAI-shaped log-probabilities. seed: sampling seed.

    Instantiate:
        .. code-block:: python

            from langchain_active_rag import ChatActiveHF

            chat = ChatActiveHF(model="smollm2", max_tokens=64)
            # or around a loaded model: ChatActiveHF(lm=ActiveLM.load("qwen2.5-coder-0.5b"))

    Invoke:
        .. code-block:: python

            messages = [("system", "Answer in one word."), ("human", "What is the capital of France?")]
            chat.invoke(messages)

        .. code-block:: python

            AIMessage(content='Paris', response_metadata={'model_name': 'smollm2', 'finish_reason': 'stop'},
                      usage_metadata={'input_tokens': 31, 'output_tokens': 2, 'total_tokens': 33})

    Stream:
        .. code-block:: python

            for chunk in chat.stream(messages):
                print(chunk.content, end="")  # one chunk per token; the last carries usage and finish_reason

    Async:
        .. code-block:: python

            await chat.ainvoke(messages)
            async for chunk in chat.astream(messages): ...
            await chat.abatch([messages, messages])  # decoded in worker threads

    Tool calling:
        .. code-block:: python

            from pydantic import BaseModel, Field

            class GetWeather(BaseModel):
                \"\"\"Get the current weather in a given location.\"\"\"
                location: str = Field(..., description="The city, e.g. Paris")

            chat_with_tools = chat.bind_tools([GetWeather])
            msg = chat_with_tools.invoke("What is the weather in Paris?")
            msg.tool_calls  # [{'name': 'GetWeather', 'args': {'location': 'Paris'}, 'id': 'call_...', 'type': 'tool_call'}]

        Tools go through the model's own chat template (``apply_chat_template(tools=...)``; Qwen2.5's
        supports them). A template without tool support (SmolLM2) gets the same instructions in the
        Hermes format Qwen2.5 uses. ``tool_choice="any"`` / ``"required"`` / a tool name forces a call,
        decoded under the tools' JSON schemas, so it always parses. ``ToolMessage`` results go back
        to the model with their ``tool_call_id``.

    Structured output:
        .. code-block:: python

            class Joke(BaseModel):
                setup: str
                punchline: str

            chat.with_structured_output(Joke).invoke("Tell me a joke about cats")  # method="json_schema"
            chat.with_structured_output(Joke, method="function_calling")
            chat.with_structured_output(None, method="json_mode")  # any JSON object, as a dict

    Response metadata:
        .. code-block:: python

            msg = chat.bind(logprobs=True, top_logprobs=2).invoke("Hi")
            msg.response_metadata
            # {'model_name': 'smollm2', 'finish_reason': 'stop',
            #  'logprobs': {'content': [{'token': 'Hello', 'logprob': -0.41, 'bytes': [72, ...],
            #                            'top_logprobs': [{'token': 'Hello', 'logprob': -0.41, ...}, ...]}, ...]}}

        With ``logprobs`` this model drives LangChain's ``FlareChain`` (langchain-classic) locally.
    """

    model_name: str = Field(default="smollm2", alias="model")
    """Registry name, GGUF file or local folder for ``ActiveLM.load`` (ignored when ``lm`` is given)."""
    lm: ActiveLM | None = Field(default=None, exclude=True)
    """An already loaded model; takes precedence over ``model_name``."""
    weights: str = "auto"
    """How a model loaded from ``model_name`` stores its linear layers: ``auto`` (mixed on the CPU), ``float32``,
    ``int8`` or ``int4`` (:mod:`active_rag.models.weights`)."""
    max_tokens: int = 256
    temperature: float = 0.0
    """0 decodes greedily; above 0 samples."""
    stop: list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    """With ``logprobs``: how many most likely alternatives each token's ``top_logprobs`` lists."""
    seed: int | None = None
    """Seed for sampling (``temperature > 0``)."""
    streaming: bool = False
    """Accepted for compatibility; ``stream()`` always streams token by token."""

    model_config = ConfigDict(populate_by_name=True, arbitrary_types_allowed=True, protected_namespaces=())

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: str) -> str:
        from active_rag.models.weights import check_weights

        return check_weights(value)

    @model_validator(mode="before")
    @classmethod
    def _name_from_lm(cls, values: Any) -> Any:
        if isinstance(values, dict) and isinstance(values.get("lm"), ActiveLM):
            if "model_name" not in values and "model" not in values:
                values = {**values, "model_name": values["lm"].name}
        return values

    # -- LangChain metadata ---------------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "active-hf"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "logprobs": self.logprobs,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "active_rag"
        if "ls_stop" not in params and (stop or self.stop):
            params["ls_stop"] = stop or self.stop
        return params

    # -- model ----------------------------------------------------------------------------------------
    @property
    def active_lm(self) -> ActiveLM:
        """The :class:`active_rag.ActiveLM` (loaded on first use when built from ``model_name``)."""
        if self.lm is None:
            self.lm = load_active_lm(self.model_name, self.weights)
        return self.lm

    def _lm_for(self, model: str | None) -> ActiveLM:
        if model is None or model == self.model_name or (self.lm is not None and model == self.lm.name):
            return self.active_lm
        return load_active_lm(model, self.weights)

    def prompt_ids(
        self, messages: Sequence[BaseMessage], lm: ActiveLM | None = None, tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of the conversation (with ``tools``, OpenAI-format tool schemas), ending where the
        assistant's answer starts."""
        lm = lm or self.active_lm
        native = bool(tools) and lm.has_chat_template and template_supports_tools(lm.tokenizer)
        turns = to_chat_turns(messages, native_tools=native or not tools)
        if tools and not native:
            turns = with_tools_system_turn(turns, tools)
        if lm.has_chat_template:
            extra = {"tools": list(tools)} if native else {}
            text = str(lm.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True, **extra))
        else:
            labels = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
            text = "".join(f"{labels.get(t['role'], t['role'].title())}: {t['content']}\n\n" for t in turns) + "Assistant:"
        ids = lm.encode(text)
        if not ids:
            raise ValueError("The conversation is empty: pass at least one message with some text.")
        return ids

    def _pieces(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> Iterator[tuple[str, TokenStep | None, dict[str, Any]]]:
        """Yield ``(text, step, {"top": alternatives})`` per released piece of output, then
        ``("", None, info)`` once (finish reason, token counts, model name, tool-call mode)."""
        unknown = set(kwargs) - _CALL_KWARGS
        if unknown:
            raise TypeError(f"ChatActiveHF got unexpected keyword argument(s) {sorted(unknown)}.")
        lm = self._lm_for(kwargs.get("model"))
        max_tokens = int(kwargs.get("max_tokens") or self.max_tokens)
        temperature = float(kwargs.get("temperature", self.temperature) or 0.0)
        seed = kwargs.get("seed", self.seed)
        stops = stop if stop is not None else (kwargs.get("stop") or self.stop or [])
        tools = list(kwargs.get("tools") or [])
        forced = forced_names(kwargs.get("tool_choice"), tools) if tools else None
        offered = tools if kwargs.get("tool_choice") != "none" else []
        constrained, schema = _response_schema(kwargs.get("response_format"))
        if constrained:  # as hosted structured outputs do: the model is told what it must write
            messages = [SystemMessage(_json_instruction(schema)), *messages]
        ids = self.prompt_ids(messages, lm, offered)
        if forced:
            ids = ids + lm.encode(CALL_OPEN)  # the call's opening is given; its JSON is decoded under the schema
            constrained, schema = True, call_schema(tools, forced)
        k = int(kwargs.get("top_logprobs", self.top_logprobs) or 0)
        top = TopLogprobs(lm, k) if k > 0 and self._wants_logprobs(kwargs) else None
        constraint = JsonSchemaConstraint(lm, schema, len(ids)) if constrained else None
        generator = torch.Generator(device=lm.device).manual_seed(int(seed)) if temperature > 0 and seed is not None else None
        session = lm.session(ids)
        filt = StopFilter(stops)
        generated = 0

        def extra(step: TokenStep) -> dict[str, Any]:
            return {"top": top.steps[step.position - len(ids)]} if top is not None else {}

        for step in session.generate(max_tokens, temperature=temperature, generator=generator, logits_processor=chain(top, constraint)):
            generated += 1
            for text, s in filt.push(step):
                yield text, s, extra(s)
            if filt.stopped:
                break
        if not filt.stopped:
            for text, s in filt.flush():
                yield text, s, extra(s)
        finish = "stop" if filt.stopped or session.finished else "length"
        yield "", None, {
            "finish_reason": finish,
            "input_tokens": len(ids),
            "output_tokens": generated,
            "model_name": lm.name,
            "tools": bool(offered),
            "forced": bool(forced),
        }

    def _wants_logprobs(self, kwargs: dict[str, Any]) -> bool:
        return bool(kwargs.get("logprobs", self.logprobs))

    @staticmethod
    def _usage(info: dict[str, Any]) -> UsageMetadata:
        return UsageMetadata(
            input_tokens=info["input_tokens"],
            output_tokens=info["output_tokens"],
            total_tokens=info["input_tokens"] + info["output_tokens"],
        )

    def _collect(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
        want_logprobs = self._wants_logprobs(kwargs)
        texts: list[str] = []
        entries: list[dict[str, Any]] = []
        info: dict[str, Any] = {}
        for text, step, extra in self._pieces(messages, stop, kwargs):
            if step is None:
                info = extra
                continue
            texts.append(text)
            if want_logprobs:
                entries.append(logprob_entry(step, text, extra.get("top")))
        return "".join(texts), entries, info

    @staticmethod
    def _tool_message_parts(text: str, info: dict[str, Any]) -> tuple[str, list[Any], list[Any], str]:
        """``(content, tool_calls, invalid_tool_calls, finish_reason)`` of a tool-enabled answer."""
        content, calls, invalid = parse_tool_calls(CALL_OPEN + text + "\n</tool_call>" if info["forced"] else text)
        finish = "tool_calls" if calls else info["finish_reason"]
        return content, calls, invalid, finish

    # -- BaseChatModel --------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text, entries, info = self._collect(messages, stop, kwargs)
        calls: list[Any] = []
        invalid: list[Any] = []
        finish = info["finish_reason"]
        if info["tools"]:
            text, calls, invalid, finish = self._tool_message_parts(text, info)
        metadata: dict[str, Any] = {"model_name": info["model_name"], "finish_reason": finish}
        if self._wants_logprobs(kwargs):
            metadata["logprobs"] = {"content": entries}
        message = AIMessage(
            content=text, tool_calls=calls, invalid_tool_calls=invalid, response_metadata=metadata,
            usage_metadata=self._usage(info),
        )
        return ChatResult(generations=[ChatGeneration(message=message, generation_info={"finish_reason": finish})])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        want_logprobs = self._wants_logprobs(kwargs)
        if kwargs.get("tools") and kwargs.get("tool_choice") != "none":
            # tool calls are parsed from the whole answer: one chunk with the text, the calls and the usage
            text, entries, info = self._collect(messages, stop, kwargs)
            content, calls, invalid, finish = self._tool_message_parts(text, info)
            metadata: dict[str, Any] = {"model_name": info["model_name"], "finish_reason": finish}
            if want_logprobs:
                metadata["logprobs"] = {"content": entries}
            chunks = [tool_call_chunk(name=c["name"], args=_json(c["args"]), id=c["id"], index=i) for i, c in enumerate(calls)]
            chunks += [tool_call_chunk(name=c.get("name"), args=c.get("args"), id=c.get("id"), index=len(chunks) + i)
                       for i, c in enumerate(invalid)]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=content, tool_call_chunks=chunks, response_metadata=metadata,
                    usage_metadata=self._usage(info), chunk_position="last",
                ),
                generation_info={"finish_reason": finish},
            )
            return
        for text, step, info in self._pieces(messages, stop, kwargs):
            if step is None:
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content="",
                        response_metadata={"model_name": info["model_name"], "finish_reason": info["finish_reason"]},
                        usage_metadata=self._usage(info),
                        chunk_position="last",
                    ),
                    generation_info={"finish_reason": info["finish_reason"]},
                )
                return
            logprobs = {"content": [logprob_entry(step, text, info.get("top"))]} if want_logprobs else None
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text, response_metadata={"logprobs": logprobs} if logprobs else {}))
            if run_manager is not None:  # langchain-core < 1 dispatches tokens from here (1.x does it itself)
                run_manager.on_llm_new_token(text, chunk=chunk, logprobs=logprobs)
            yield chunk

    # -- tools and structured output ------------------------------------------------------------------
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: dict[str, Any] | str | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer ``tools`` (LangChain tools, functions, pydantic models, TypedDicts or OpenAI tool dicts).

        ``tool_choice``: ``None``/``"auto"`` (the model decides), ``"none"`` (tools not offered),
        ``"any"``/``"required"``/``True`` (a call to one of them is forced) or a tool name (that tool
        is forced)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            forced_names(tool_choice, formatted)  # validates now, not at the first call
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | Any]:
        """A runnable returning ``schema``'s objects (a pydantic instance, else a dict).

        ``method``: ``"json_schema"`` (default: the answer is decoded under the schema),
        ``"function_calling"`` (a forced call of a tool made from the schema, decoded under its
        schema) or ``"json_mode"`` (any JSON object; ``schema`` only parses it, so say the keys in the
        prompt). With ``json_schema`` and ``json_mode`` a system instruction tells the model to answer
        in JSON (with the schema), as hosted structured outputs do. ``include_raw=True`` returns ``{"raw", "parsed", "parsing_error"}``. Long objects need
        a ``max_tokens`` large enough for the whole JSON."""
        strict = kwargs.pop("strict", None)
        if kwargs:
            raise ValueError(f"Received unsupported arguments {sorted(kwargs)}")
        if schema is None and method != "json_mode":
            raise ValueError(f"with_structured_output(method={method!r}) needs a schema.")
        pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        ls_format = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        parser: Runnable
        if method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]  # type: ignore[arg-type]
            llm = self.bind_tools([schema], tool_choice=name, ls_structured_output_format=ls_format)  # type: ignore[list-item]
            parser = (
                PydanticToolsParser(tools=[schema], first_tool_only=True)  # type: ignore[list-item]
                if pydantic
                else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
            )
        elif method in ("json_schema", "json_mode"):
            if method == "json_schema":
                json_schema = convert_to_json_schema(schema)
                response_format = {"type": "json_schema", "json_schema": {"name": json_schema.get("title", "output"), "schema": json_schema}}
            else:
                response_format = {"type": "json_object"}
            bind_kwargs: dict[str, Any] = {"response_format": response_format}
            if schema is not None:
                bind_kwargs["ls_structured_output_format"] = ls_format
            llm = self.bind(**bind_kwargs)
            parser = PydanticOutputParser(pydantic_object=schema) if pydantic else JsonOutputParser()  # type: ignore[arg-type]
        else:
            raise ValueError(f"Unknown method {method!r}: use 'json_schema', 'function_calling' or 'json_mode'.")
        if not include_raw:
            return llm | parser
        parse = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parse.with_fallbacks([fallback], exception_key="parsing_error")


def _json_instruction(schema: dict[str, Any] | None) -> str:
    """The system instruction of a structured answer (the output is also constrained to the schema)."""
    if schema is None:
        return "Respond with a JSON object only."
    return "Respond with a JSON object only, matching this JSON schema:\n" + _json(schema)


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


__all__ = ["ChatActiveHF", "load_active_lm", "to_chat_turns", "logprob_entry"]
