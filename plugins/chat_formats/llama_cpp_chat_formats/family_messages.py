"""What llama.cpp's handlers for a few model families change in the messages before the family's template
renders them (its ``common/parsers``), so that the same conversation gives the same prompt here.

These templates read an earlier turn's thinking under a name of their own, not OpenAI's
``reasoning_content``: LFM2's and gpt-oss's as ``message.thinking``, Ministral 3's (and Devstral's) as a
``thinking`` content block before the text.  Each family is recognised by its template's source, as
llama.cpp recognises it.
"""

from __future__ import annotations

from typing import Any, Callable

Messages = list[dict[str, Any]]


def _is_gpt_oss(template: str) -> bool:
    return "<|channel|>" in template


def _is_lfm2(template: str) -> bool:
    return ("<|tool_list_start|>" in template and "<|tool_list_end|>" in template) or \
        ("List of tools: [" in template and "<|tool_list_start|>" not in template)


def _is_ministral_3(template: str) -> bool:
    return all(marker in template for marker in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")) and \
        "[CALL_ID]" not in template


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


_FAMILIES: tuple[tuple[Callable[[str], bool], Callable[[Messages], Messages]], ...] = (
    (_is_gpt_oss, lambda messages: _thinking_field(messages, drop_content_of_calls=True)),
    (_is_lfm2, lambda messages: _thinking_field(messages, drop_content_of_calls=False)),
    (_is_ministral_3, _thinking_blocks),
)


def adapted(template: str, messages: Messages) -> Messages:
    """``messages`` as the handler of ``template``'s family hands them to it; unchanged for the others."""
    for claims, adapt in _FAMILIES:
        if claims(template):
            return adapt(messages)
    return messages
