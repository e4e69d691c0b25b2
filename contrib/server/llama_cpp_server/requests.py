"""Request bodies to the library's keywords, and library chunks to OpenAI's streamed events.

What the library checks (sampler values, prompts, tools) it checks; here only the shapes that JSON cannot
carry are converted: ``logit_bias`` keys are token ids written as strings, ``grammar`` is GBNF text, and
OpenAI's ``max_completion_tokens`` is ``max_tokens``.
"""

from __future__ import annotations

from typing import Any, Callable

from llama_cpp.engine.normalize import choice_seed
from llama_cpp.llama_grammar import LlamaGrammar
from llama_cpp.reasoning import template_variables

from .errors import APIError
from .llama_server_samplers import llama_server_samplers
from .schemas import ChatRequest, CompletionRequest, LlamaServerFields, SamplerFields
from .settings import ServerSettings

_SAMPLER_FIELDS = tuple(SamplerFields.model_fields)


def with_server_defaults(body: CompletionRequest | ChatRequest,
                         server: ServerSettings) -> CompletionRequest | ChatRequest:
    """``body`` with the server's request defaults (``default_temperature``... llama-server's ``--temp``...) in
    the fields it did not set; a chat request's ``max_completion_tokens`` counts as setting ``max_tokens``."""
    given = body.model_fields_set | ({"max_tokens"} if "max_completion_tokens" in body.model_fields_set else set())
    limit = server.default_max_tokens
    wanted: dict[str, Any] = {"temperature": server.default_temperature, "top_k": server.default_top_k,
                              "top_p": server.default_top_p, "min_p": server.default_min_p,
                              "max_tokens": None if limit is None or limit < 0 else limit,  # -1: none, as unset
                              "reasoning_budget": server.default_reasoning_budget}
    if isinstance(body, ChatRequest):
        wanted["reasoning_format"] = server.reasoning_format
    unset = {name: value for name, value in wanted.items() if value is not None and name not in given}
    if isinstance(body, ChatRequest):
        if "preserve_reasoning" not in (body.chat_template_kwargs or {}):
            unset["chat_template_kwargs"] = {"preserve_reasoning": server.reasoning_preserve,
                                             **(body.chat_template_kwargs or {})}
        unset.update(_continuation(body, server))
    return body.model_copy(update=unset) if unset else body


def _continuation(body: ChatRequest, server: ServerSettings) -> dict[str, Any]:
    """``assistant_prefill`` as llama-server decides it: the body's ``continue_final_message`` (which needs
    ``add_generation_prompt`` false), else the body's ``assistant_prefill``, else the server's
    ``prefill_assistant`` for a conversation that ends with the assistant's message, which must not be one
    of two assistant messages at the end.  No message with tool calls is continued."""
    messages = body.messages
    if body.continue_final_message not in (None, False):
        if body.add_generation_prompt:
            raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.",
                           param="continue_final_message")
        if messages[-1].get("role") != "assistant":
            raise APIError(400, "continue_final_message: the last message must be the assistant's (role "
                           f"'assistant'), got role {messages[-1].get('role')!r}", param="continue_final_message")
        _check_continued(messages)
        return {"assistant_prefill": body.continue_final_message}
    if body.assistant_prefill is not None:
        if body.assistant_prefill and messages[-1].get("role") == "assistant":
            _check_continued(messages)
        return {}
    prefill = server.prefill_assistant and messages[-1].get("role") == "assistant"
    if prefill:
        if len(messages) >= 2 and messages[-2].get("role") == "assistant":
            raise APIError(400, "Cannot have 2 or more assistant messages at the end of the list.",
                           param="messages")
        _check_continued(messages)
    return {"assistant_prefill": prefill}


def _check_continued(messages: list[dict[str, Any]]) -> None:
    """What llama-server refuses to continue: a message that calls tools."""
    if messages[-1].get("tool_calls"):
        raise APIError(400, "Cannot continue an assistant message that contains tool calls.", param="messages")


def _sampler_arguments(body: SamplerFields, llm: Any) -> dict[str, Any]:
    """The sampler fields the request set, in the library's types."""
    kwargs = {name: getattr(body, name) for name in _SAMPLER_FIELDS if getattr(body, name) is not None}
    if "logit_bias" in kwargs:
        bias: dict[int, float] = {}
        for key, value in kwargs["logit_bias"].items():
            try:
                token = int(key)
            except ValueError:
                raise APIError(400, f"logit_bias: {key!r} is not a token id", param="logit_bias") from None
            if not 0 <= token < llm.n_vocab():
                raise APIError(400, f"logit_bias: token {token} is outside the vocabulary (0..{llm.n_vocab() - 1})",
                               param="logit_bias")
            bias[token] = value
        kwargs["logit_bias"] = bias
    if "grammar" in kwargs:
        try:
            kwargs["grammar"] = LlamaGrammar.from_string(kwargs["grammar"], verbose=False)
        except ValueError as exc:
            raise APIError(400, f"grammar: {exc}", param="grammar") from None
    for name in ("dry_seq_breakers", "grammar_triggers", "extra_samplers"):
        if name in kwargs:
            kwargs[name] = tuple(kwargs[name])
    if "samplers" in kwargs:
        kwargs["samplers"] = llama_server_samplers(kwargs["samplers"], keep_unknown=True)
    if isinstance(body, LlamaServerFields):  # llama-server's names, where the OpenAI ones are not given
        for name, ours in (("typ_p", "typical_p"), ("repeat_last_n", "penalty_last_n")):
            if getattr(body, name) is not None:
                kwargs.setdefault(ours, getattr(body, name))
    return kwargs


def _max_tokens(*given: int | None, n_predict: int | None = None) -> int | None:
    """The first of ``given`` that is set (0: no limit), else llama-server's ``n_predict`` (-1: no limit; 0
    samples one token, as in llama-server, whose limit is checked once a token exists)."""
    value = next((v for v in given if v is not None), None)
    if value is None and n_predict is not None and n_predict >= 0:
        value = max(1, n_predict)
    return value or None


def completion_arguments(body: CompletionRequest, llm: Any, model: str, tenant: str) -> dict[str, Any]:
    """``create_completion``'s keywords for a /v1/completions body (``stream`` is the caller's); ``model`` is
    the served model's name, the responses' ``model`` (the library's default is the file's path);
    ``tenant`` whom the request is served for (the scheduling policy's)."""
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of must equal n here (every choice is returned)", param="best_of")
    if body.suffix is not None and not llm.supports_infill():
        raise APIError(400, "suffix: this model has no fill-in-the-middle tokens, so it cannot complete between "
                       "a prompt and a suffix (use a code model with FIM tokens, or leave suffix out)", param="suffix")
    kwargs = _sampler_arguments(body, llm)
    kwargs.update(prompt=body.prompt, suffix=body.suffix, max_tokens=_max_tokens(body.max_tokens,
                                                                                n_predict=body.n_predict),
                  echo=body.echo,
                  logprobs=body.logprobs, stop=body.stop, n=body.n, model=model, priority=body.priority,
                  tenant=tenant)
    return kwargs


# the most generations (prompts times choices) one request may ask for: each is an engine request queued
# with its prompt's tokens, and the body limit alone lets in a million one-character prompts
MAX_GENERATIONS = 2048


def check_generations(n_prompts: int, choices: tuple[str, int], max_n: int) -> None:
    """400 for more choices per prompt (``choices``: the field that sets them, their number) than the server's
    ``max_n`` (llama-server bounds its ``n_cmpl`` by its parallel slots), or more generations in all than
    :data:`MAX_GENERATIONS`."""
    n_field, n = choices
    if n > max_n:
        raise APIError(400, f"{n_field}={n} is more than this server allows ({max_n})", param=n_field)
    if n_prompts * n > MAX_GENERATIONS:
        raise APIError(400, f"prompt: {n_prompts} prompts with {n_field}={n} ask for {n_prompts * n} generations; "
                       f"one request may ask for at most {MAX_GENERATIONS} (split it into several requests)",
                       param="prompt")


def prompt_count(prompt: object) -> int:
    """How many prompts a completion body's ``prompt`` holds: a list with no token id at its top level is
    one prompt per item (the rule of the core's ``prompt_list`` and llama-server's)."""
    if isinstance(prompt, list) and prompt and not any(isinstance(item, int) for item in prompt):
        return len(prompt)
    return 1


def template_kwargs(body: ChatRequest) -> dict[str, Any]:
    """The template variables of a chat body, as llama-server hands them over: ``enable_thinking`` true
    unless ``chat_template_kwargs`` or ``reasoning_effort: "none"`` turn it off, the body's
    ``chat_template_kwargs`` (the server's ``preserve_reasoning`` among them, :func:`with_server_defaults`)
    and what llama.cpp derives from them (:func:`llama_cpp.reasoning.template_variables`)."""
    return template_variables({"enable_thinking": True, **(body.chat_template_kwargs or {})}, body.reasoning_effort)


def chat_prompt_arguments(body: ChatRequest) -> dict[str, Any]:
    """The keywords of a chat body that shape its prompt (``Llama.render_chat_prompt``'s): what the chat
    route renders and what ``/apply-template`` shows are made of the same ones."""
    return dict(messages=body.messages, functions=body.functions, function_call=body.function_call,
                tools=body.tools, tool_choice=body.tool_choice, chat_template_kwargs=template_kwargs(body),
                add_generation_prompt=body.add_generation_prompt, assistant_prefill=body.assistant_prefill or False)


def chat_arguments(body: ChatRequest, llm: Any, model: str, tenant: str) -> list[dict[str, Any]]:
    """``create_chat_completion``'s keywords for a /v1/chat/completions body, one set per choice (``n``):
    choice ``j`` samples with ``seed + j``, as the completions of one prompt do; ``model`` and ``tenant``
    as in :func:`completion_arguments`."""
    kwargs = _sampler_arguments(body, llm)
    max_tokens = _max_tokens(body.max_completion_tokens, body.max_tokens, n_predict=body.n_predict)
    kwargs.update(**chat_prompt_arguments(body), response_format=body.response_format,
                  logprobs=body.logprobs, top_logprobs=body.top_logprobs, max_tokens=max_tokens,
                  stop=body.stop, model=model, priority=body.priority, tenant=tenant,
                  reasoning_format=body.reasoning_format, parallel_tool_calls=body.parallel_tool_calls)
    return [{**kwargs, "seed": choice_seed(kwargs.get("seed"), j)} for j in range(body.n)]


def check_embedding_input(value: Any) -> None:
    """400 for an embedding input with nothing to embed: an empty string or list, or an empty item in a list
    (as OpenAI's API and llama-server refuse them)."""
    items = value if isinstance(value, list) and value and not isinstance(value[0], int) else [value]
    for i, item in enumerate(items):
        if len(item) == 0:
            where = "input" if items[0] is value else f"input[{i}]"
            raise APIError(400, f"{where} is empty: every input must have some text or tokens to embed",
                           param="input")


def stream_shaper(body: CompletionRequest | ChatRequest,
                  timings: Callable[[], dict[str, Any] | None] = lambda: None,
                  ) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """The SSE events of one library chunk: the chunk without ``usage``, and with
    ``stream_options.include_usage`` the usage as a last chunk of its own with no choices (OpenAI's shape).
    The library's last chunk is the one with ``usage``: the last event made of it also gets ``timings()``
    (llama-server's ``timings``), when there is one."""
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def shape(chunk: dict[str, Any]) -> list[dict[str, Any]]:
        usage = chunk.pop("usage", None)
        events = [chunk] if chunk.get("choices") else []
        if usage is not None and include_usage:
            events.append({**{k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk},
                           "choices": [], "usage": usage})
        if usage is not None and events:
            measured = timings()
            if measured is not None:
                events[-1]["timings"] = measured
        return events

    return shape
