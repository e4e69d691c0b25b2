"""Prompt-cache breakpoints: ``cache_control`` marks in a chat request become prompt prefixes the cache keeps.

Anthropic's Messages API marks a content block, a tool or the system prompt with ``cache_control: {"type":
"ephemeral", "ttl": "5m" | "1h"}``: the prompt up to the end of it is worth keeping.  OpenAI-shaped clients that
talk to Anthropic through a gateway (OpenRouter, LiteLLM) put the same mark on a chat message's text part, on a
message, or on a tool, and ``Llama.create_chat_completion`` takes it there:

- a text part's mark ends at the end of its text;
- a message's mark (or a mark on one of its other parts: an image, a tool call) ends at the end of its last text:
  its string content or its last text part;
- a tool's mark ends at the end of its description.

Where that is in the rendered prompt is found by rendering the conversation once more for each mark, with a
unique word appended at the marked place: the prompt without the word must be the prompt itself (else the
template changed something because of it, and that mark is left out), and the word's offset is the
breakpoint.  Its token position is where the tokens of the prompt cut there stop agreeing with the whole
prompt's, so a token that straddles the cut is left out of the prefix.  A mark that cannot be placed (an empty
text, a template that cannot render alone) pins nothing: a breakpoint is a hint, as it is on Anthropic's API.

The prefixes go to the requests the chat handler makes through :func:`pinning`; a request whose prompt starts with
one carries it as a :class:`llama_cpp.engine.request.PrefixPin`, and the engine keeps that prefix's snapshot in the
prompt cache, pinned for the ttl (docs/caching.md).  Without a prompt cache nothing is pinned.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from .engine.prefix import common_prefix
from .engine.request import PrefixPin

#: A mark's ``ttl`` in seconds; Anthropic's default is five minutes.
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
DEFAULT_TTL = "5m"
#: Marks one request may carry (Anthropic's limit).
MAX_BREAKPOINTS = 4


class PromptPin(NamedTuple):
    """A prompt prefix to keep in the prompt cache for ``seconds``: the tokens up to a breakpoint."""

    tokens: tuple[int, ...]
    seconds: float


class _Mark(NamedTuple):
    """Where a breakpoint's word goes: ``messages[message].content[part].text`` (part None: the content string),
    or ``tools[tool].function.description``."""

    seconds: float
    message: int = -1
    part: int | None = None
    tool: int = -1


_pins: contextvars.ContextVar[tuple[PromptPin, ...]] = contextvars.ContextVar("llama_cpp_prompt_pins", default=())


@contextlib.contextmanager
def pinning(pins: Sequence[PromptPin]) -> Iterator[None]:
    """Requests made inside the block (in this context) pin these prefixes, where their prompt starts with one."""
    token = _pins.set(tuple(pins))
    try:
        yield
    finally:
        _pins.reset(token)


def pins_for(prompt: Sequence[int]) -> tuple[PrefixPin, ...]:
    """The pins of the enclosing :func:`pinning` block that ``prompt`` starts with, shortest first; a prefix must
    leave at least the prompt's last token out (that one is always evaluated: its logits are needed)."""
    found: dict[int, float] = {}
    for pin in _pins.get():
        n = len(pin.tokens)
        if 0 < n < len(prompt) and tuple(prompt[:n]) == pin.tokens:
            found[n] = max(found.get(n, 0.0), pin.seconds)
    return tuple(PrefixPin(n, seconds) for n, seconds in sorted(found.items()))


def ttl_seconds(mark: Any, where: str) -> float:
    """The seconds of a ``cache_control`` value; ValueError naming ``where`` when it is not one."""
    ttl = mark.get("ttl") or DEFAULT_TTL if isinstance(mark, dict) else None
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"} or \
            not isinstance(ttl, str) or ttl not in TTL_SECONDS:
        raise ValueError(f"{where}.cache_control must be {{'type': 'ephemeral'}} with an optional 'ttl' of "
                         f"{' or '.join(map(repr, TTL_SECONDS))}, got {mark!r:.80}")
    return TTL_SECONDS[ttl]


def marks_of(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[_Mark]:
    """The breakpoints of a (normalized) conversation and its tools, checked; ValueError naming a malformed
    one, or more than :data:`MAX_BREAKPOINTS`."""
    marks: list[_Mark] = []
    for k, tool in enumerate(tools or ()):
        if "cache_control" in tool:
            marks.append(_Mark(ttl_seconds(tool["cache_control"], f"tools[{k}]"), tool=k))
    for i, message in enumerate(messages):
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        text_parts = [j for j, part in enumerate(parts) if part.get("type") == "text"]
        seconds = [ttl_seconds(message["cache_control"], f"messages[{i}]")] if "cache_control" in message else []
        for j, part in enumerate(parts):
            if "cache_control" not in part:
                continue
            ttl = ttl_seconds(part["cache_control"], f"messages[{i}].content[{j}]")
            if part.get("type") == "text":
                marks.append(_Mark(ttl, message=i, part=j))
            else:
                seconds.append(ttl)
        if seconds:  # the message's own mark, and those of parts that have no text: the end of its last text
            marks.append(_Mark(max(seconds), message=i, part=text_parts[-1] if text_parts else None))
    if len(marks) > MAX_BREAKPOINTS:
        raise ValueError(f"at most {MAX_BREAKPOINTS} cache_control breakpoints may be given, found {len(marks)}")
    return marks


def unmarked(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Copies without the ``cache_control`` marks (the caller's are not changed)."""
    def clean(item: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in item.items() if key != "cache_control"}

    def clean_message(message: dict[str, Any]) -> dict[str, Any]:
        out = clean(message)
        if isinstance(out.get("content"), list):
            out["content"] = [clean(part) for part in out["content"]]
        return out

    return [clean_message(m) for m in messages], None if tools is None else [clean(t) for t in tools]


def _with_word(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, mark: _Mark,
               word: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None] | None:
    """Copies of ``messages`` and ``tools`` with ``word`` appended at ``mark`` (None: nowhere to put it)."""
    if mark.tool >= 0:
        assert tools is not None
        tool = tools[mark.tool]
        description = tool.get("function", {}).get("description")
        if not isinstance(description, str):
            return None
        tools = list(tools)
        tools[mark.tool] = {**tool, "function": {**tool["function"], "description": description + word}}
        return messages, tools
    message = messages[mark.message]
    content = message.get("content")
    if mark.part is None:
        if not isinstance(content, str) or not content:
            return None
        content = content + word
    else:
        assert isinstance(content, list)
        part = content[mark.part]
        if not part["text"]:
            return None
        content = list(content)
        content[mark.part] = {**part, "text": part["text"] + word}
    messages = list(messages)
    messages[mark.message] = {**message, "content": content}
    return messages, tools


def locate(render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], tuple[str, bool]],
           tokenize: Callable[[str, bool], list[int]], messages: list[dict[str, Any]],
           tools: list[dict[str, Any]] | None, marks: Sequence[_Mark]) -> tuple[PromptPin, ...]:
    """The prefixes of the rendered prompt that end at ``marks``.  ``render(messages, tools)`` is the chat
    handler's ``(prompt text, whether it begins with BOS)``; ``tokenize(text, begins_with_bos)`` its tokens, as
    the handler makes them."""
    prompt, bos = render(messages, tools)
    tokens = tokenize(prompt, bos)
    pins = []
    for mark in marks:
        word = "CacheBreakpoint" + secrets.token_hex(8)
        marked = _with_word(messages, tools, mark, word)
        if marked is None:
            continue
        text, _ = render(*marked)
        at = text.find(word)
        if at < 0 or text.count(word) != 1 or text[:at] + text[at + len(word):] != prompt:
            continue  # the template did more than copy the text through
        n = common_prefix(tokenize(prompt[:at], bos), tokens)
        if n > 0:
            pins.append(PromptPin(tuple(tokens[:n]), mark.seconds))
    return tuple(pins)


__all__ = ["DEFAULT_TTL", "MAX_BREAKPOINTS", "PromptPin", "TTL_SECONDS", "locate", "marks_of", "pinning",
           "pins_for", "ttl_seconds", "unmarked"]
