"""Chat: the contracts between ``Llama.create_chat_completion`` and chat-format plugins.

The core owns the shapes (what a formatter returns, what a handler is, the
OpenAI chat.completion objects); the formats themselves (ChatML, Llama 3, the
Jinja renderer of GGUF templates...) come from plugins, the built-in ones from
the chat-formats plugin.  Names that a plugin implements, such as
``Jinja2ChatFormatter`` or ``format_chatml``, are looked up in the loaded
plugins on first access, so ``from llama_cpp.llama_chat_format import X``
keeps working without the core importing any plugin.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Protocol, runtime_checkable

import attrs

from ._utils import Singleton
from .plugins import ChatFormat, get_host, seed_exports


class LlamaChatCompletionHandlerNotFoundException(Exception):
    """No handler for the requested chat format."""


@attrs.define
class ChatFormatterResponse:
    """A rendered prompt and how generation should stop for this format."""

    prompt: str
    stop: str | list[str] | None = None
    stopping_criteria: Any = None
    added_special: bool = False  # the prompt already contains BOS (do not add another)
    #: the template's thinking (start, end) markers with the whitespace it writes with them, as llama.cpp's
    #: parser for the template knows them: the reasoning split drops that whitespace (None: not known)
    thinking_markers: tuple[str, str] | None = None


class ChatFormatter(Protocol):
    def __call__(self, *, messages: list[dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse: ...


class LlamaChatCompletionHandler(Protocol):
    """llama-cpp-python's handler protocol: called with ``llama=``, ``messages=`` and the request keywords."""

    def __call__(self, *, llama: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any: ...


@runtime_checkable
class ChatPromptRenderer(Protocol):
    """A chat handler that can also render its prompt without generating (``Llama.render_chat_prompt``).

    A handler is a callable that renders and generates in one call; the server's ``/apply-template`` and
    token count need the rendered text alone, the same text the handler would generate from.  A handler
    that implements this method gives it; one that does not (a script's own function) is refused there
    with its name.  ``request`` holds the chat keywords that shape the prompt (``tools``, ``tool_choice``,
    ``functions``, ``function_call``, ``add_generation_prompt``, ``assistant_prefill``,
    ``chat_template_kwargs``, and the handler's own such as ``chat_template_name``).  The returned
    ``prompt`` is the whole text the generation would continue, an assistant prefill included.
    """

    def render_chat_prompt(self, *, llama: Any, messages: list[dict[str, Any]],
                           **request: Any) -> ChatFormatterResponse: ...


class LlamaChatCompletionHandlerRegistry(Singleton):
    """Chat handlers registered in code, llama-cpp-python's way (one registry per process).

    Plugins publish formats through the ``llama_cpp_chat_formats`` hook; this
    registry is for a handler defined in a script or an application.  Its
    names are looked up before the plugins' ones, so ``overwrite=True`` can
    replace a plugin's format for this process.
    """

    def __init__(self) -> None:  # once: a Singleton's later calls give the same instance
        self._handlers: dict[str, Callable[..., Any]] = {}

    def register_chat_completion_handler(self, name: str, chat_handler: Callable[..., Any],
                                         overwrite: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a chat handler needs a non-empty string name, got {name!r}")
        if not callable(chat_handler):
            raise TypeError(f"chat handler {name!r} must be callable, got {chat_handler!r}")
        if not overwrite and (name in self._handlers or name in get_host().records(ChatFormat)):
            raise ValueError(f"chat handler {name!r} is already registered (pass overwrite=True to replace it)")
        self._handlers[name] = chat_handler

    def unregister_chat_handler(self, name: str) -> None:
        if name not in self._handlers:
            raise ValueError(f"no chat handler {name!r} was registered in code; registered: "
                             f"{', '.join(sorted(self._handlers)) or 'none'}")
        del self._handlers[name]

    def get_chat_completion_handler_by_name(self, name: str) -> Callable[..., Any]:
        handler = self._handlers.get(name)
        if handler is not None:
            return handler
        try:
            return get_host().choose(ChatFormat, name).handler
        except ValueError as exc:
            raise LlamaChatCompletionHandlerNotFoundException(
                f"{exc}{'; registered in code: ' + ', '.join(sorted(self._handlers)) if self._handlers else ''}"
            ) from None


def get_chat_completion_handler(name: str) -> Callable[..., Any]:
    """The handler called ``name``: registered in code, else a plugin's format (the error lists them)."""
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a chat completion handler under ``name``."""

    def decorator(handler: Callable[..., Any]) -> Callable[..., Any]:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, handler)
        return handler

    return decorator


def register_chat_format(name: str) -> Callable[[Callable[..., ChatFormatterResponse]], Callable[..., Any]]:
    """Decorator: register a prompt formatter (messages -> ChatFormatterResponse) as the format ``name``.

    The formatter is wrapped by the chat-formats plugin's
    ``chat_formatter_to_chat_completion_handler`` (structured output, tools,
    streaming), found when the decorator runs.
    """

    def decorator(formatter: Callable[..., ChatFormatterResponse]) -> Callable[..., Any]:
        to_handler = __getattr__("chat_formatter_to_chat_completion_handler")
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, to_handler(formatter))
        return formatter

    return decorator


# -- OpenAI shapes ------------------------------------------------------------------

def chat_template_names(metadata: Mapping[str, str]) -> list[str]:
    """The GGUF's chat templates: ``default`` for ``tokenizer.chat_template``, then each ``tokenizer.chat_template.<name>``."""
    prefix = "tokenizer.chat_template"
    return sorted("default" if key == prefix else key[len(prefix) + 1:]
                  for key in metadata if key == prefix or key.startswith(prefix + "."))


def chat_logprobs(logprobs: dict[str, list[Any]] | None) -> dict[str, Any] | None:
    """Completion logprobs -> chat ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    if not logprobs:
        return None
    content = []
    for token, value, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]):
        content.append({
            "token": token, "logprob": value, "bytes": list(token.encode("utf-8")),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode("utf-8"))}
                             for t, v in (top or {}).items()],
        })
    return {"content": content, "refusal": None}


def completion_to_chat_completion(completion: dict[str, Any], *, message: dict[str, Any] | None = None,
                                  finish_reason: str | None = None) -> dict[str, Any]:
    """A text_completion object as a chat.completion object (``message`` overrides the content message)."""
    choice = completion["choices"][0]
    msg = message or {"role": "assistant", "content": choice["text"]}
    return {
        "id": "chat" + completion["id"],
        "object": "chat.completion",
        "created": completion["created"],
        "model": completion["model"],
        "choices": [{
            "index": 0,
            "message": msg,
            "logprobs": chat_logprobs(choice.get("logprobs")),
            "finish_reason": finish_reason or choice["finish_reason"],
        }],
        "usage": completion["usage"],
    }


def chunks_to_chat_chunks(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """text_completion chunks as chat.completion.chunk objects: role first, content deltas, then the end."""
    first = True
    for chunk in chunks:
        choice = chunk["choices"][0]
        base = {"id": "chat" + chunk["id"], "object": "chat.completion.chunk", "created": chunk["created"],
                "model": chunk["model"]}
        if first:
            yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                        "finish_reason": None}]}
            first = False
        if choice["text"]:
            yield {**base, "choices": [{"index": 0, "delta": {"content": choice["text"]},
                                        "logprobs": chat_logprobs(choice.get("logprobs")), "finish_reason": None}]}
        if choice["finish_reason"] is not None:
            final = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                          "finish_reason": choice["finish_reason"]}]}
            if "usage" in chunk:
                final["usage"] = chunk["usage"]
            yield final


# Seed names implemented by plugins (``Jinja2ChatFormatter``, ``format_chatml``...).
__getattr__ = seed_exports(__name__, "__llama_chat_format_exports__", "llama-cpp-chat-formats")
