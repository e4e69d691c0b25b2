"""What llama.cpp's handlers for a few model families change in the messages before the family's template
renders them (its ``common/parsers``), so that the same conversation gives the same prompt here.

These templates read an earlier turn's thinking under a name of their own, not OpenAI's
``reasoning_content``: LFM2's and gpt-oss's as ``message.thinking``, Ministral 3's (and Devstral's) as a
``thinking`` content block before the text.  Each family is recognised by its template's source, as
llama.cpp recognises it (:mod:`.template_families`).
"""

from __future__ import annotations

from typing import Any, Callable

from .template_families import Family, family_of

Messages = list[dict[str, Any]]


def _thinking_field(messages: Messages, *, drop_content_of_calls: bool) -> Messages:
    """``reasoning_content`` also as ``thinking`` (gpt-oss's also drops the content of a turn that calls
    tools, as its handler does)."""
    out = []
    for message in messages:
        thinking = message.get("reasoning_content")
        if isinstance(thinking, str):
            message = {**message, "thinking": thinking}
            if drop_content_of_calls and message.get("tool_calls"):
                message.pop("content", None)
        out.append(message)
    return out


def _thinking_blocks(messages: Messages) -> Messages:
    """Ministral 3: a system or assistant message's content as blocks, its ``reasoning_content`` the first
    (``{"type": "thinking", "thinking": ...}``), then its text (or its own blocks)."""
    out = []
    for message in messages:
        if message.get("role") not in ("system", "assistant"):
            out.append(message)
            continue
        blocks: list[Any] = []
        thinking = message.get("reasoning_content")
        if isinstance(thinking, str):
            blocks.append({"type": "thinking", "thinking": thinking})
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        adjusted = {key: value for key, value in message.items() if key != "reasoning_content"}
        adjusted["content"] = blocks
        out.append(adjusted)
    return out


_ADAPTERS: dict[Family, Callable[[Messages], Messages]] = {
    "gpt-oss": lambda messages: _thinking_field(messages, drop_content_of_calls=True),
    "lfm2": lambda messages: _thinking_field(messages, drop_content_of_calls=False),
    "ministral-3": _thinking_blocks,
}


def adapted(template: str, messages: Messages) -> Messages:
    """``messages`` as the handler of ``template``'s family hands them to it; unchanged for the others."""
    family = family_of(template)
    adapt = _ADAPTERS.get(family) if family is not None else None
    return adapt(messages) if adapt is not None else messages
