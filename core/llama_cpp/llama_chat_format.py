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

from typing import Any, Callable, Iterator, Protocol

import attrs

from .plugins import ChatFormat, get_host


class LlamaChatCompletionHandlerNotFoundException(Exception):
    """No handler for the requested chat format."""


@attrs.define
class ChatFormatterResponse:
    """A rendered prompt and how generation should stop for this format."""

    prompt: str
    stop: str | list[str] | None = None
    stopping_criteria: Any = None
    added_special: bool = False  # the prompt already contains BOS (do not add another)


class ChatFormatter(Protocol):
    def __call__(self, *, messages: list[dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse: ...


class LlamaChatCompletionHandler(Protocol):
    """llama-cpp-python's handler protocol: called with ``llama=``, ``messages=`` and the request keywords."""

    def __call__(self, *, llama: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any: ...


def get_chat_completion_handler(name: str) -> Callable[..., Any]:
    """The handler of a registered chat format (ValueError lists the registered ones)."""
    try:
        return get_host().choose(ChatFormat, name).handler
    except ValueError as exc:
        raise LlamaChatCompletionHandlerNotFoundException(str(exc)) from None


# -- OpenAI shapes ------------------------------------------------------------------

def chat_logprobs(logprobs: dict[str, list] | None) -> dict[str, Any] | None:
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


def __getattr__(name: str) -> Any:
    """Seed names implemented by plugins (``Jinja2ChatFormatter``, ``format_chatml``...)."""
    if name.startswith("__"):  # the import system probes __path__ & co.: never load plugins for those
        raise AttributeError(name)
    for _plugin_name, plugin in get_host().iter_plugins():
        exported = getattr(plugin, "__llama_chat_format_exports__", None)
        if exported and name in exported:
            return getattr(plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (is the chat-formats plugin installed?)")
