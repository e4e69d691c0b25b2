"""Chat messages in every shape OpenAI's clients send, made into the one shape every chat format renders.

Clients send the same conversation in several shapes: the second turn of a
tool loop carries ``{"role": "assistant", "content": null, "tool_calls": [...]}``,
newer clients say ``developer`` for ``system``, any content may be a list of
``{"type": "text", "text": ...}`` parts, and the ``openai`` package writes
``null`` for every field it did not set.  Templates were written for one of
them: SmolLM2's concatenates ``message['content']`` and fails on null, many
test ``message.tool_calls is defined`` and then iterate it.
:func:`normalize_messages` runs once, in ``Llama.create_chat_completion``
(the server's /v1/chat/completions calls it too), so that every chat format,
GGUF template and handler sees one shape.  The rules are those of
llama.cpp's server (``common_chat_msgs_parse_oaicompat`` and
``common_chat_msg::to_json_oaicompat`` in common/chat.cpp):

- ``role`` is required; ``developer`` becomes ``system``
  (``map_developer_role_to_system``; llama.cpp keeps it for gpt-oss, whose
  template reads the two alike).
- ``content`` null becomes ``""``, as does an empty list of parts; content
  may be left out only by a message that calls tools (``tool_calls`` or the
  legacy ``function_call``), and then it is ``""`` too.
- a list of parts stays a list: a text part needs a string ``text``; media
  parts (``image_url``, ``input_audio``...) are kept as they are for the
  multimodal handlers.  A text-only format refuses them
  (:func:`require_text`); a template that renders strings gets the text parts
  joined by newlines (:func:`content_text`).
- a field that is null is absent (templates test ``is defined``), and so is
  an empty ``tool_calls``; ``name``, ``tool_call_id`` and
  ``reasoning_content`` are strings; each tool call is
  ``{"type": "function", "function": {"name": ..., "arguments": ...}}`` with
  the arguments as a JSON string (an object is serialized, as llama.cpp
  does; a template that takes an object gets it parsed back).

A message that cannot be rendered is a ValueError that names the message and
the field (``messages[2].content[0].text must be a string``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

#: Role names that are another name for one every format knows.
ROLE_ALIASES = {"developer": "system"}

_STRING_FIELDS = ("name", "tool_call_id", "reasoning_content")


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` in the one shape every chat format renders (see the module's rules); new dicts, the
    caller's are not changed.  ValueError naming the message and the field when one cannot be rendered."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    return [_normalize_message(message, i) for i, message in enumerate(messages)]


def _normalize_message(message: Any, i: int) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError(f"messages[{i}].role must be a non-empty string ('system', 'user', 'assistant', "
                         f"'tool', ...), got {role!r:.60}")
    out = {key: value for key, value in message.items() if value is not None}
    out["role"] = ROLE_ALIASES.get(role, role)
    calls_tools = "tool_calls" in out or "function_call" in out
    for field in _STRING_FIELDS:
        if field in out and not isinstance(out[field], str):
            raise ValueError(f"messages[{i}].{field} must be a string, got {type(out[field]).__name__}")
    if "tool_calls" in out:
        out["tool_calls"] = _tool_calls(out["tool_calls"], i)
        if not out["tool_calls"]:
            del out["tool_calls"]
    if "function_call" in out and not isinstance(out["function_call"], dict):
        raise ValueError(f"messages[{i}].function_call must be a dict with 'name' and 'arguments'")
    if "content" not in message and not calls_tools:
        raise ValueError(f"messages[{i}].content is required: a string, a list of content parts or null "
                         "(only a message with tool_calls may leave it out)")
    out["content"] = _content(out.get("content"), i)
    return out


def _content(content: Any, i: int) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"messages[{i}].content must be a string, a list of content parts or null, got "
                         f"{type(content).__name__}")
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ValueError(f"messages[{i}].content[{j}] must be a dict with a string 'type' ('text', "
                             f"'image_url', 'input_audio', ...), got {part!r:.60}")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise ValueError(f"messages[{i}].content[{j}].text must be a string")
    return list(content) if content else ""


def _tool_calls(calls: Any, i: int) -> list[dict[str, Any]]:
    """The calls with their arguments as a JSON string, OpenAI's form (a chat template that takes them as
    an object gets them parsed back, as llama.cpp does: ``func_args_not_string``)."""
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ValueError(f"messages[{i}].tool_calls must be a list of tool call dicts")
    normalized = []
    for k, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{k}]"
        if call.get("type", "function") != "function":
            raise ValueError(f"{where}.type must be 'function', got {call.get('type')!r:.60}")
        if "id" in call and not isinstance(call["id"], str):
            raise ValueError(f"{where}.id must be a string, got {type(call['id']).__name__}")
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"{where}.function must be a dict with a non-empty string 'name' and 'arguments'")
        arguments = fn.get("arguments")
        if isinstance(arguments, dict):
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}.function.arguments cannot be written as JSON: {exc}") from None
        elif not isinstance(arguments, str):
            raise ValueError(f"{where}.function.arguments must be a JSON string or an object, got "
                             f"{type(arguments).__name__}")
        normalized.append({**call, "function": {**fn, "arguments": arguments}})
    return normalized


def content_text(content: str | list[Mapping[str, Any]] | None) -> str:
    """The text of a message's content for a format that renders strings: text parts joined by newlines, as
    llama.cpp joins them for such templates (``concat_content_parts``); other parts have no text form."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def require_text(messages: Sequence[Mapping[str, Any]]) -> None:
    """ValueError naming the part, unless every content part of ``messages`` is text: a text-only chat format
    would render a conversation without its images or audio."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") != "text":
                raise ValueError(f"messages[{i}].content[{j}] is a {part.get('type')!r} part, which this chat "
                                 "format cannot render (it renders text): media need a multimodal handler, "
                                 "Llama(model_path, mmproj_path=...)")


__all__ = ["ROLE_ALIASES", "content_text", "normalize_messages", "require_text"]
