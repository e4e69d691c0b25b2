"""``create_chat_completion``: choose the chat handler, pass the whole request on.

Selection, as in llama-cpp-python: the instance's ``chat_handler``, else the
chat format by name (``chat_format=`` or claimed by a plugin from the GGUF
metadata), else the model's own template (``tokenizer.chat_template``), else
``llama-2``.  ``chat_format="chat_template.<name>"`` picks one of the GGUF's
named templates; the format registered as ``chat_template`` renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Sequence

import attrs

from . import _chat_reasoning, cache_breakpoints
from ._chat_handlers import GGUF_TEMPLATE_FORMAT
from ._llama_base import LlamaBase
from .llama_chat_format import (ChatFormatterResponse, ChatPromptRenderer, LlamaChatCompletionHandlerNotFoundException,
                                get_chat_completion_handler)
from .chat_messages import normalize_messages
from .engine.normalize import check_tool_choice, check_tools, text_prompt_tokens
from .engine.policy import tagged
from .preserved_tokens import control_tokens_of, preserving
from .reasoning import template_variables
from .reasoning_grammar import thinking_first
from .sampling import SamplingParams, sampling_arguments

if TYPE_CHECKING:
    from .llama_grammar import LlamaGrammar

# the sampling keywords the seed's create_chat_completion always hands its handler
_ALWAYS_PASSED = ("temperature", "top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                  "repeat_penalty")
_RECORD_DEFAULTS = {f.name: f.default for f in attrs.fields(SamplingParams)}


class ChatAPI(LlamaBase):
    """The chat methods of :class:`llama_cpp.Llama`."""

    def _resolve_chat_handler(self) -> tuple[Any, dict[str, Any]]:
        if self.chat_handler is not None:
            return self.chat_handler, {}
        name = self.chat_format
        if name is None:
            name = "chat_template.default" if "tokenizer.chat_template" in self.metadata else "llama-2"
        if name.startswith(GGUF_TEMPLATE_FORMAT + "."):
            return get_chat_completion_handler(GGUF_TEMPLATE_FORMAT), {"chat_template_name": name.split(".", 1)[1]}
        return get_chat_completion_handler(name), {}

    def create_chat_completion(
        self,
        messages: list[dict[str, Any]],
        functions: list[dict[str, Any]] | None = None,
        function_call: str | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: str | None = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        assistant_prefill: bool | Literal["content", "reasoning_content"] = False,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        *,
        present_penalty: float = 0.0,
        temp: float | None = None,
        penalty_last_n: int = 64,
        min_keep: int = 0,
        top_n_sigma: float = -1.0,
        dynatemp_range: float = 0.0,
        dynatemp_exponent: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        xtc_probability: float = 0.0,
        xtc_threshold: float = 0.1,
        adaptive_target: float = -1.0,
        adaptive_decay: float = 0.9,
        dry_multiplier: float = 0.0,
        dry_base: float = 1.75,
        dry_allowed_length: int = 2,
        dry_penalty_last_n: int = 64,
        dry_seq_breakers: Sequence[str] = ("\n", ":", '"', "*"),
        ignore_eos: bool = False,
        grammar: LlamaGrammar | None = None,
        grammar_lazy: bool = False,
        grammar_triggers: Sequence[str | int] = (),
        use_infill: bool = False,
        reasoning_budget: int = -1,
        reasoning_start: str = "<think>",
        reasoning_end: str = "</think>",
        reasoning_budget_message: str | None = None,
        reasoning_start_in_prompt: bool = False,
        reasoning_start_max_tokens: int | None = 32,
        samplers: Sequence[str] | None = None,
        extra_samplers: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
        logits_processor: Callable[..., Any] | None = None,
        stopping_criteria: Callable[..., bool] | None = None,
        active_loras: list[dict[str, Any]] | None = None,
        control_vector: dict[str, Any] | None = None,
        priority: int | None = None,
        tenant: str | None = None,
        reasoning_format: str | None = None,
        reasoning_effort: str | None = None,
        parallel_tool_calls: bool | None = None,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """A chat completion in the OpenAI shape (chat.completion, or chunks with ``stream``).

        ``reasoning_format`` (llama-server's ``none``, the default here, ``deepseek``, ``deepseek-legacy``,
        ``auto``) splits a reasoning model's thinking into ``message.reasoning_content``
        (``delta.reasoning_content`` streamed), with the markers of the family a plugin recognises in the
        model (docs/chat.md); ``reasoning_effort`` reaches the template (``"none"``: ``enable_thinking``
        false).  ``assistant_prefill`` continues a trailing assistant message instead of answering it: True
        its content (its thinking, where it has thinking and no content), ``"content"`` or
        ``"reasoning_content"`` that one; where the template has thinking markers, the message's thinking is
        written inside them, closed before continued content (as llama-server's ``continue_final_message``).
        ``parallel_tool_calls`` false keeps a reply to one tool call (OpenAI's meaning); unset or true, a
        ``"required"`` choice may make several where the template writes several calls in a turn.

        Every keyword reaches the handler, including the sampler parameters,
        ``active_loras``/``control_vector`` and ``chat_template_kwargs`` (extra
        template variables such as ``enable_thinking``, merged over the ones
        given to the constructor).  Sampling keywords at their defaults are
        left out, except the few every handler of the seed takes, so that a
        custom handler with a narrow signature keeps working.  ``messages`` may come in any shape OpenAI's
        clients send (content null with tool_calls, lists of text parts, ``developer``...); the handler gets
        them in one (:func:`llama_cpp.chat_messages.normalize_messages`).  ``priority`` and ``tenant``
        reach the scheduling policy through :func:`llama_cpp.engine.policy.tagged`, not the handler: every
        request the handler makes during the call carries them.
        """
        messages = normalize_messages(messages)
        check_tools(tools, functions)
        check_tool_choice(tools, functions, tool_choice, function_call, grammar, response_format)
        marks = cache_breakpoints.marks_of(messages, tools)
        if marks:  # the marks are not the template's to render (llama-server drops them too)
            messages, tools = cache_breakpoints.unmarked(messages, tools)
        sampling = sampling_arguments(ChatAPI.create_chat_completion, locals())
        handler, extra_request = self._resolve_chat_handler()
        template_kwargs = template_variables({**self.chat_template_kwargs, **(chat_template_kwargs or {})},
                                             reasoning_effort)
        request = dict(
            functions=functions, function_call=function_call, tools=tools, tool_choice=tool_choice, stream=stream,
            stop=stop, seed=seed, response_format=response_format, max_tokens=max_tokens, model=model,
            logit_bias=logit_bias, logprobs=logprobs, top_logprobs=top_logprobs, assistant_prefill=assistant_prefill,
            add_generation_prompt=add_generation_prompt, chat_template_kwargs=template_kwargs, **extra_request,
        )
        for name in _ALWAYS_PASSED:
            request[name] = sampling.pop(name, _RECORD_DEFAULTS[name])
        request.update((k, v) for k, v in sampling.items() if k not in request and v != _RECORD_DEFAULTS[k])
        request.update((k, v) for k, v in (("logits_processor", logits_processor), ("stopping_criteria",
                       stopping_criteria), ("active_loras", active_loras), ("control_vector", control_vector),
                       ("parallel_tool_calls", parallel_tool_calls)) if v is not None)

        def render() -> ChatFormatterResponse | None:
            try:
                return self.render_chat_prompt(
                    messages, functions=functions, function_call=function_call, tools=tools, tool_choice=tool_choice,
                    assistant_prefill=assistant_prefill, add_generation_prompt=add_generation_prompt,
                    chat_template_kwargs=template_kwargs)
            except NotImplementedError:
                return None

        pins = self._prompt_pins(messages, request, marks) if marks else ()
        last = messages[-1]
        continued = str(last.get("reasoning_content") or "") if assistant_prefill and last.get("role") == "assistant" \
            else ""
        fmt, markers = _chat_reasoning.plan(self, reasoning_format, render, reasoning_budget >= 0, continued)
        if markers is not None:
            _chat_reasoning.budget_markers(request, markers)
            if fmt != "none" and grammar is None:
                wrapped = _chat_reasoning.response_format_with_reasoning(response_format, markers)
                if wrapped is not None:
                    request["grammar"] = wrapped
        # a family whose markers are control tokens: the reply keeps their text, for the split to find them
        kept: frozenset[int] = frozenset()
        if markers is not None and fmt != "none":
            kept = control_tokens_of(self, (markers.start, markers.end, markers.content_start, markers.content_end))
        thinking = markers if fmt != "none" else None  # what a handler's own grammar lets come first
        with tagged(priority, tenant), preserving(kept), thinking_first(thinking), cache_breakpoints.pinning(pins):
            result = handler(llama=self, messages=messages, **request)
        if markers is None or fmt == "none":
            return result
        if isinstance(result, dict):
            return _chat_reasoning.split_completion(result, markers)
        return _chat_reasoning.split_chunks(result, markers)

    def _prompt_pins(self, messages: list[dict[str, Any]], request: dict[str, Any],
                     marks: list[Any]) -> tuple[cache_breakpoints.PromptPin, ...]:
        """The prompt prefixes that end at the conversation's ``cache_control`` marks (none when the handler
        cannot render alone), for the requests the handler makes (:mod:`llama_cpp.cache_breakpoints`)."""
        def render(conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[str, bool]:
            rendered = self.render_chat_prompt(
                conversation, functions=request["functions"], function_call=request["function_call"], tools=tools,
                tool_choice=request["tool_choice"], assistant_prefill=request["assistant_prefill"],
                add_generation_prompt=request["add_generation_prompt"],
                chat_template_kwargs=request["chat_template_kwargs"])
            return rendered.prompt, bool(rendered.added_special)

        def tokenize(text: str, begins_with_bos: bool) -> list[int]:
            return text_prompt_tokens(self, text, starts_with_bos=begins_with_bos)

        try:
            return cache_breakpoints.locate(render, tokenize, messages, request["tools"], marks)
        except NotImplementedError:
            return ()

    def render_chat_prompt(
        self,
        messages: list[dict[str, Any]],
        functions: list[dict[str, Any]] | None = None,
        function_call: str | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        assistant_prefill: bool | Literal["content", "reasoning_content"] = False,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> ChatFormatterResponse:
        """The prompt ``create_chat_completion`` would generate from for the same keywords, rendered by the
        same handler, without generating (llama-server's ``/apply-template``).  ``prompt`` is the text
        (special tokens spelled out, an assistant prefill included); ``added_special`` says whether it
        begins with BOS already.  A handler that cannot render alone (it does not implement
        :class:`llama_cpp.llama_chat_format.ChatPromptRenderer`) is a ``NotImplementedError`` naming it."""
        messages = normalize_messages(messages)
        check_tools(tools, functions)
        if cache_breakpoints.marks_of(messages, tools):
            messages, tools = cache_breakpoints.unmarked(messages, tools)
        handler, extra_request = self._resolve_chat_handler()
        if not isinstance(handler, ChatPromptRenderer):
            raise NotImplementedError(f"the chat handler {getattr(handler, '__name__', type(handler).__name__)!r} "
                                      "renders only while it generates (it has no render_chat_prompt)")
        template_kwargs = template_variables({**self.chat_template_kwargs, **(chat_template_kwargs or {})})
        return handler.render_chat_prompt(
            llama=self, messages=messages, functions=functions, function_call=function_call, tools=tools,
            tool_choice=tool_choice, assistant_prefill=assistant_prefill,
            add_generation_prompt=add_generation_prompt, chat_template_kwargs=template_kwargs, **extra_request)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """``create_chat_completion`` returning the openai package's typed objects."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as exc:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from exc
        result = self.create_chat_completion(*args, **kwargs)
        if kwargs.get("stream"):
            return (ChatCompletionChunk.model_validate(chunk) for chunk in result)
        return ChatCompletion.model_validate(result)


__all__ = ["ChatAPI", "LlamaChatCompletionHandlerNotFoundException"]
