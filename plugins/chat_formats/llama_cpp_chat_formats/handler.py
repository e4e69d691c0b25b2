"""From a prompt formatter to a chat-completion handler.

The handler renders the conversation, turns ``response_format`` into a
grammar, runs ``Llama.create_completion`` with every sampling keyword of the
request, and reshapes the result into OpenAI chat objects.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from llama_cpp.chat_messages import require_text
from llama_cpp.llama_chat_format import (ChatFormatterResponse, chunks_to_chat_chunks,
                                         completion_to_chat_completion)
from llama_cpp import llama_grammar
from llama_cpp.llama_grammar import LlamaGrammar, json_schema_grammar
from llama_cpp.engine.normalize import stop_list, text_prompt_tokens
from llama_cpp.preserved_tokens import control_tokens_of, current_preserved, preserving
from llama_cpp.reasoning_grammar import after_thinking, current_thinking
from llama_cpp.reasoning_split import Markers, ReasoningSplitter
from llama_cpp.sampling import SAMPLING_FIELDS

from .continuation import ContinueMode, continue_message, template_thinking_markers
from .call_frames import CallFrame
from .forced_calls import ForcedReply, chosen_tools, frame_for, read_forced_reply
from .lazy_calls import LazyCalls, lazy_calls
from .streaming import stream_auto_reply, stream_forced_reply
from .tool_calls import SYNTAX_TOKENS, legacy_functions_as_tools, parse_tool_calls

# request keywords that are not sampling parameters and not create_completion's own
_CHAT_ONLY = {"functions", "function_call", "tools", "tool_choice", "parallel_tool_calls", "response_format",
              "logprobs", "top_logprobs",
              "assistant_prefill", "add_generation_prompt", "chat_template_kwargs", "chat_template_name"}
_COMPLETION_KEYWORDS = {"max_tokens", "stream", "stop", "seed", "model", "logit_bias", "logits_processor",
                        "stopping_criteria", "temperature", "top_p", "top_k", "min_p", "typical_p",
                        "presence_penalty", "frequency_penalty", "repeat_penalty", "active_loras", "control_vector"}


def continue_mode(assistant_prefill: object) -> ContinueMode | None:
    """What ``assistant_prefill`` continues: nothing (False, None), the content or the thinking as the
    message asks (True), or one of them (``"content"``, ``"reasoning_content"``: llama-server's
    ``continue_final_message``)."""
    if assistant_prefill is None or assistant_prefill is False:
        return None
    if assistant_prefill is True:
        return "auto"
    if assistant_prefill in ("content", "reasoning_content"):
        return assistant_prefill
    raise ValueError(f"assistant_prefill must be a bool, 'content' or 'reasoning_content', got {assistant_prefill!r}")


def response_format_grammar(response_format: dict[str, Any] | None) -> Any:
    """The grammar for ``response_format`` (None for plain text)."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return json_schema_grammar(schema) if schema is not None else LlamaGrammar.from_string(llama_grammar.JSON_GBNF)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ValueError("response_format json_schema needs {'json_schema': {'schema': {...}}}")
        return json_schema_grammar(spec["schema"])
    raise ValueError(f"response_format type {kind!r} is not one of 'text', 'json_object', 'json_schema'")


class FormatterHandler:
    """A llama-cpp-python chat handler over ``formatter`` (``chat_formatter_to_chat_completion_handler``):
    called, it renders and completes; :meth:`render_chat_prompt` renders alone (the core's
    ``ChatPromptRenderer``), the same text."""

    def __init__(self, formatter: Callable[..., ChatFormatterResponse]) -> None:
        self.formatter = formatter

    def __call__(self, *, llama: Any, messages: list[dict[str, Any]], **request: Any) -> Any:
        return complete_chat(llama, self.formatter, messages, request)

    def render_chat_prompt(self, *, llama: Any, messages: list[dict[str, Any]],
                           **request: Any) -> ChatFormatterResponse:
        return render_chat(self.formatter, messages, request)


def formatter_handler(formatter: Callable[..., ChatFormatterResponse]) -> Callable[..., Any]:
    """A llama-cpp-python chat handler over ``formatter`` (``chat_formatter_to_chat_completion_handler``)."""
    return FormatterHandler(formatter)


def tools_of(request: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any]:
    """The request's (tools, tool_choice), the legacy ``functions``/``function_call`` included."""
    if request.get("functions") and not request.get("tools"):
        request["tools"], request["tool_choice"] = legacy_functions_as_tools(request["functions"],
                                                                             request.get("function_call"))
    tools = request.get("tools") or None
    tool_choice = request.get("tool_choice") or ("auto" if tools else "none")
    if tool_choice not in ("auto", "none", "required") and not isinstance(tool_choice, dict):
        raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named function, got {tool_choice!r}")
    return tools, tool_choice


def tokenize_prompt(llama: Any, prompt: str, added_special: bool) -> list[int]:
    """Special tokens in the rendered prompt are tokens; BOS as the vocabulary wants it, unless the
    template wrote it already."""
    return text_prompt_tokens(llama, prompt, starts_with_bos=added_special)


def completion_arguments(request: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``create_completion`` for a chat request (sampling, logprobs, limits, adapters).

    ``stop``, ``grammar`` and ``stream`` are left to the caller, which knows
    the format's stop strings and what it constrains or streams.
    """
    unknown = set(request) - _CHAT_ONLY - _COMPLETION_KEYWORDS - SAMPLING_FIELDS - {"grammar"}
    if unknown:
        raise TypeError(f"create_chat_completion() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    top_logprobs = request.get("top_logprobs")
    kwargs = {k: v for k, v in request.items()
              if (k in _COMPLETION_KEYWORDS or k in SAMPLING_FIELDS) and v is not None
              and k not in ("stop", "stream", "grammar")}
    kwargs["logprobs"] = (top_logprobs or 0) if request.get("logprobs") else None  # logprobs=True alone works
    kwargs["max_tokens"] = request.get("max_tokens")  # None: up to the end of the context
    return kwargs


def user_stops(request: dict[str, Any], *format_stops: str) -> list[str]:
    """The request's stop strings followed by the format's own."""
    stops = stop_list(request.get("stop"))
    return stops + [s for s in format_stops if s and s not in stops]


def render_chat(formatter: Callable[..., ChatFormatterResponse], messages: list[dict[str, Any]],
                request: dict[str, Any]) -> ChatFormatterResponse:
    """``messages`` rendered by ``formatter`` as :func:`complete_chat` renders them: the legacy ``functions``
    as tools (``request`` is updated), a trailing assistant message continued with ``assistant_prefill``
    (:mod:`.continuation`); the template's thinking markers as llama.cpp knows them, for the reasoning split."""
    require_text(messages)
    tools_of(request)
    template_kwargs = dict(request.get("chat_template_kwargs") or {})
    prompt_kwargs = dict(functions=request.get("functions"), function_call=request.get("function_call"),
                         tools=request.get("tools"), tool_choice=request.get("tool_choice"), **template_kwargs)
    mode = continue_mode(request.get("assistant_prefill"))
    if mode is not None and messages and messages[-1].get("role") == "assistant":
        rendered = continue_message(formatter, messages[:-1], messages[-1], mode, **prompt_kwargs)
    else:
        rendered = formatter(messages=messages, add_generation_prompt=request.get("add_generation_prompt", True),
                             **prompt_kwargs)
    markers = template_thinking_markers(formatter)
    if markers.start or markers.end:
        rendered.thinking_markers = (markers.start, markers.end)
    return rendered


def complete_chat(llama: Any, formatter: Callable[..., ChatFormatterResponse], messages: list[dict[str, Any]],
                  request: dict[str, Any], to_prompt: Callable[[str, bool], Any] | None = None,
                  ) -> dict[str, Any] | Iterator[dict[str, Any]]:
    """Render ``messages`` with ``formatter`` and complete: structured output, tools, streaming.

    ``to_prompt(text, added_special)`` makes the prompt of the rendered text (default: its tokens); a
    multimodal handler turns its media markers into media chunks there, after it has put them in the text
    (so a media part that reaches a formatter is refused rather than dropped).
    """
    rendered = render_chat(formatter, messages, request)
    tools, tool_choice = tools_of(request)
    chosen = chosen_tools(tools, tool_choice) if tools else None
    forced: ForcedReply | None = None
    lazy: LazyCalls | None = None
    if chosen is not None:  # in the template's own call syntax, after the thinking (:mod:`.forced_calls`)
        thinking = current_thinking()
        frame = frame_for(formatter, dict(request.get("chat_template_kwargs") or {}), thinking)
        parallel = several_calls(tool_choice, request.get("parallel_tool_calls"), frame)
        request["grammar"] = after_thinking(frame.grammar(chosen, parallel))
        forced = ForcedReply(frame, chosen, thinking, parallel)
    elif tools and tool_choice in (None, "auto") and not _constrained(request):  # constrained once a call begins
        lazy = lazy_calls(formatter, dict(request.get("chat_template_kwargs") or {}),
                          chosen_tools(tools, "required") or [], request.get("parallel_tool_calls"), rendered.prompt)
        if lazy is not None:
            request.update(grammar=lazy.grammar, grammar_lazy=True, grammar_triggers=[lazy.trigger])
            for key, value in lazy.thinking.items():  # (a request's own markers, as for a budget, stay)
                request.setdefault(key, value)
    if to_prompt is None:
        prompt_tokens = tokenize_prompt(llama, rendered.prompt, rendered.added_special)
    else:
        prompt_tokens = to_prompt(rendered.prompt, rendered.added_special)
    format_stops = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop] if rendered.stop else []
    grammar = request.get("grammar") or response_format_grammar(request.get("response_format"))
    stream = bool(request.get("stream"))
    calling = bool(tools) and tool_choice != "none"
    kept = current_preserved() | control_tokens_of(llama, SYNTAX_TOKENS) if calling else current_preserved()
    with preserving(kept):  # a call's markers that are control tokens stay in the text, for the parse
        result = llama.create_completion(prompt_tokens, grammar=grammar, stop=user_stops(request, *format_stops),
                                         stream=stream, **completion_arguments(request))
    if tools is None or tool_choice == "none":
        return chunks_to_chat_chunks(result) if stream else completion_to_chat_completion(result)
    if stream:
        if forced is not None:
            return stream_forced_reply(result, forced)
        return stream_auto_reply(result, lambda text: _calls_read(text, tools, request), thinking=current_thinking(),
                                 lazy=lazy)
    return _with_tool_calls(completion_to_chat_completion(result), tools, forced, request)


def _constrained(request: dict[str, Any]) -> bool:
    """Whether the request constrains its reply itself (a grammar, lazy or not, or a response format)."""
    response_format = request.get("response_format")
    return any(request.get(key) for key in ("grammar", "grammar_lazy", "grammar_triggers")) or \
        bool(response_format) and not (isinstance(response_format, dict) and response_format.get("type") == "text")


def several_calls(tool_choice: Any, parallel_tool_calls: bool | None, frame: CallFrame) -> bool:
    """Whether a forced reply may call several tools: for ``"required"`` only (a named choice is one call of
    it), as ``parallel_tool_calls`` says; unset, where the template writes several calls in a turn (the
    default llama-server takes from the template's capabilities)."""
    if tool_choice != "required" or not frame.link:
        return False
    return parallel_tool_calls is not False


def _calls_read(text: str, tools: list[dict[str, Any]], request: dict[str, Any],
                thinking: Markers | None = None) -> tuple[str | None, list[Any]]:
    """The reply's text and calls (the first alone with ``parallel_tool_calls`` false: what a reply
    constrained to one call, as llama-server constrains it, would have held).  With ``thinking``, calls are
    read in the answer after the thinking block only (a marker the model thought about is thought), which
    stays at the front of the text for the reasoning split."""
    at = 0
    if thinking is not None:
        split = ReasoningSplitter(thinking)
        split.feed(text)
        split.finish()
        at = len(text) if split.answer_at is None else split.answer_at
    content, calls = parse_tool_calls(text[at:], tools)
    content = text[:at] + (content or "") or None
    return content, calls[:1] if request.get("parallel_tool_calls") is False else calls


def _with_tool_calls(chat: dict[str, Any], tools: list[dict[str, Any]], forced: ForcedReply | None,
                     request: dict[str, Any]) -> dict[str, Any]:
    """Read tool calls out of the reply (a forced reply is its thinking and the calls, in the grammar's frame)."""
    choice = chat["choices"][0]
    text = choice["message"]["content"] or ""
    thinking = ""
    if forced is not None:
        thinking, calls = read_forced_reply(text, forced)
        if not calls:  # max_tokens cut it short: the text stays, finish_reason "length"
            return chat
        content: str | None = None
    else:
        content, calls = _calls_read(text, tools, request, current_thinking())
    if not calls:
        choice["message"]["content"] = content  # without routing markers such as functionary's ">>>all"
    else:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:  # split here: the core's split finds no text to split once the call is taken out
            message["reasoning_content"] = thinking
        message["tool_calls"] = calls
        if len(calls) == 1:  # the legacy field, as the seed returns it
            message["function_call"] = dict(calls[0]["function"])
        choice["message"] = message
        if forced is None or choice["finish_reason"] != "length":  # (a forced reply's later call cut short)
            choice["finish_reason"] = "tool_calls"
    return chat
