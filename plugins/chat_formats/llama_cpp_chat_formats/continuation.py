"""Continuing a trailing assistant message, as llama.cpp continues it.

A continued message (``assistant_prefill``; llama-server's ``continue_final_message``) is not rendered by
the template: the conversation before it is, then the template's generation prompt, then the message's
own text.  A model that thinks needs more than its text: a prefill of its answer must close the thinking
block first (or the model would take the answer for its thinking), and a prefill of its thinking must
open one.  The markers are the template's own, found as llama.cpp's parser generator finds them (its
differential analysis, ``common/chat-diff-analyzer.cpp``), so that both servers write the same prompt:

- render one turn with and without ``reasoning_content``: the markers around the thinking, with the
  whitespace the template puts inside them (Qwen3's ``<think>\\n`` and ``\\n</think>\\n\\n``);
- render a generation prompt with ``enable_thinking`` off and on: the block a template opens or closes
  there (DeepSeek-R1's ``<think>\\n``), for templates that show no thinking in the conversation;
- render a turn with tool calls: templates that show thinking only beside tool calls;
- and the template families llama.cpp names itself (templates that drop earlier thinking but whose
  models think in ``<think>`` tags).

Continuing the content then writes ``start + reasoning_content + end + content``; continuing the thinking
writes ``start + reasoning_content`` and leaves the block open.  A template in which no marker is found
gets the generation prompt and the content.  The families llama.cpp has parsers of its own for
(:mod:`.template_families`: gpt-oss, Gemma 4, Qwen3-Coder and Qwen3.5...) are continued as those parsers
continue them, with the turn openings and markers they write.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Literal

import attrs

from llama_cpp.llama_chat_format import ChatFormatterResponse

from .template_families import Family, family_of

Formatter = Callable[..., ChatFormatterResponse]
ContinueMode = Literal["auto", "content", "reasoning_content"]

# texts no template writes itself, so that where they land in a rendering says what the template did
_USER = {"role": "user", "content": "U_USER_MSG Hello END_U"}
_REPLY = "A_ASST_MSG I can help END_A"
_THOUGHT = "REASON_PART I am thinking END_R"
_TOOLS = [{"type": "function", "function": {
    "name": name, "description": "Test function", "parameters": {
        "type": "object", "properties": {"AA_ARG_FST_AA": {"type": "string"}, "BB_ARG_SND_BB": {"type": "string"}},
        "required": []}}} for name in ("FFF_FIRST_FUN_F", "SSS_SECOND_FUN_S")]
_CALL = {"id": "call00001", "type": "function", "function": {
    "name": "FFF_FIRST_FUN_F", "arguments": '{"AA_ARG_FST_AA": "VVVV", "BB_ARG_SND_BB": "XXXX"}'}}
_SPACE = " \t\n\v\f\r"
_CLOSERS = {"<": ">", "[": "]"}


@attrs.frozen
class ThinkingMarkers:
    """Where a template's thinking starts and ends, with the whitespace it writes inside them; ``""`` where
    the template shows no such marker."""

    start: str = ""
    end: str = ""


def resolve_mode(message: dict[str, Any], mode: ContinueMode) -> ContinueMode:
    """``auto``: the thinking is continued when the message has thinking and no content, else the content."""
    if mode != "auto":
        return mode
    return "reasoning_content" if message.get("reasoning_content") and not message.get("content") else "content"


def continued_text(message: dict[str, Any]) -> str:
    """The text of a continued message: its content, or its text parts joined by blank lines (llama.cpp's
    ``render_content``)."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content or ""


@attrs.frozen
class _Continued:
    """A message being continued, and what the prompt before it is."""

    source: str  # the template's source ("" for a formatter without one)
    before: str  # the conversation before the message, rendered without a generation prompt
    generation_prompt: str  # what the template adds to ``before`` to open the assistant's turn
    message: dict[str, Any]
    mode: ContinueMode  # "content" or "reasoning_content"

    def turn(self, opening: str, start: str = "", end: str = "", *, thinks: bool = True) -> str:
        """``opening``, then (where the model ``thinks``) the thinking after ``start``, then for continued
        content ``end`` and the content."""
        text = opening + start + ((self.message.get("reasoning_content") or "") if thinks else "")
        return text + end + continued_text(self.message) if self.mode == "content" else text

    def text_after(self, opening: str) -> str:
        """``opening`` and the content, whatever is continued (a family whose model does not think)."""
        return opening + continued_text(self.message)


# the thinking markers of llama.cpp's parser for each family that thinks (common/parsers/*.cpp), with the
# whitespace they include; an end marker may go on into the opening of the answer (gpt-oss's final channel)
_FAMILY_MARKERS: dict[Family, ThinkingMarkers] = {
    "ministral-3": ThinkingMarkers("[THINK]", "[/THINK]"),
    "gpt-oss": ThinkingMarkers("<|channel|>analysis<|message|>",
                               "<|end|><|start|>assistant<|channel|>final<|message|>"),
    "muse-glimmer": ThinkingMarkers("", "<|eom|><|start|>assistant to=user<|message|>"),
    "kimi-k2": ThinkingMarkers("<think>", "</think>"),
    "kimi-k3": ThinkingMarkers("<|open|>think<|sep|>", "<|close|>think<|sep|><|open|>response<|sep|>"),
    "ling-3": ThinkingMarkers("<think>", "</think>"),
    "cohere2-moe": ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|><|START_TEXT|>"),
    "lfm2": ThinkingMarkers("<think>", "</think>"),
    "minimax-m3": ThinkingMarkers("<mm:think>", "</mm:think>"),
    "deepseek-v3.2": ThinkingMarkers("<think>", "</think>"),
    "gemma-4": ThinkingMarkers("<|channel>thought\n", "<channel|>"),
    "minicpm-5": ThinkingMarkers("<think>\n", "\n</think>\n\n"),
    "qwen3-coder": ThinkingMarkers("<think>\n", "\n</think>\n\n"),  # where the template has <think> at all
}


def _family_turn(family: Family, c: _Continued) -> str:
    """How llama.cpp's parser for ``family`` continues a message: the turn's fixed opening, then the thinking
    inside the family's markers."""
    m = _FAMILY_MARKERS.get(family, ThinkingMarkers())
    if family == "functionary-v3.2":
        return c.text_after("<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\n")
    if family == "gigachat-3":
        return c.text_after("assistant<|role_sep|>\n")
    if family == "qwen3-coder" and "<think>" not in c.source:
        return c.turn("<|im_start|>assistant\n", thinks=False)
    if family == "deepseek-v3.2" and "function_calls" not in c.source and not c.message.get("reasoning_content"):
        return c.turn("<\uff5cAssistant\uff5c>", "", m.end)  # V4 closes an empty block with a bare </think>
    openings: dict[Family, str] = {
        "gpt-oss": "<|start|>assistant", "muse-glimmer": "<|start|>assistant to=self<|message|>",
        "kimi-k2": "<|im_assistant|>assistant<|im_middle|>", "kimi-k3": '<|open|>message role="assistant"<|sep|>',
        "ling-3": "<role>ASSISTANT</role>\n", "cohere2-moe": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        "lfm2": "<|im_start|>assistant\n", "minimax-m3": c.generation_prompt,
        "deepseek-v3.2": "<\uff5cAssistant\uff5c>",
        "gemma-4": "<|turn>model\n" if c.before.endswith("<turn|>\n") else "",
        "minicpm-5": "<|im_start|>assistant\n", "qwen3-coder": "<|im_start|>assistant\n",
    }
    return c.turn(openings.get(family, ""), m.start, m.end)


def template_thinking_markers(formatter: Formatter) -> ThinkingMarkers:
    """The thinking markers llama.cpp's parser knows ``formatter``'s template by, with their whitespace: its
    family's, or those :func:`thinking_markers` finds in it; ``ThinkingMarkers()`` where it has none."""
    source = getattr(formatter, "template", None)
    family = family_of(source) if isinstance(source, str) else None
    if family is None:
        return thinking_markers(formatter)
    if family == "qwen3-coder" and "<think>" not in str(source):
        return ThinkingMarkers()
    return _FAMILY_MARKERS.get(family, ThinkingMarkers())


def continue_message(formatter: Formatter, conversation: list[dict[str, Any]], message: dict[str, Any],
                     mode: ContinueMode, **render: Any) -> ChatFormatterResponse:
    """``conversation`` rendered by ``formatter`` (with ``render``'s keywords), continued by ``message``: the
    template's generation prompt, the thinking markers where the template has them, and the text ``mode``
    continues (``auto``: see :func:`resolve_mode`); for a family llama.cpp has a parser of, as that parser does."""
    before = formatter(messages=conversation, add_generation_prompt=False, **render)
    opened = formatter(messages=conversation, add_generation_prompt=True, **render)
    source = getattr(formatter, "template", None)
    continued = _Continued(source=source if isinstance(source, str) else "", before=before.prompt,
                           generation_prompt=opened.prompt[_common_prefix(before.prompt, opened.prompt):],
                           message=message, mode=resolve_mode(message, mode))
    family = family_of(continued.source)
    if family is not None:
        before.prompt += _family_turn(family, continued)
        return before
    markers = thinking_markers(formatter)
    if markers.start:
        opening = continued.generation_prompt
        cut = opening.find(markers.start)
        before.prompt += continued.turn(opening[:cut] if cut >= 0 else opening, markers.start, markers.end)
    else:
        before.prompt += continued.turn(continued.generation_prompt, thinks=False)
    return before


_markers: weakref.WeakKeyDictionary[Any, ThinkingMarkers] = weakref.WeakKeyDictionary()


def thinking_markers(formatter: Formatter) -> ThinkingMarkers:
    """The thinking markers of ``formatter``'s template (see the module's docstring), found once per
    formatter."""
    try:
        return _markers[formatter]
    except KeyError:
        pass
    markers = _named_markers(formatter, _analysed(formatter))
    try:
        _markers[formatter] = markers
    except TypeError:  # a formatter that cannot be referenced weakly is analysed each time
        pass
    return markers


def _render(formatter: Formatter, messages: list[dict[str, Any]], *, add_generation_prompt: bool,
            enable_thinking: bool, tools: list[dict[str, Any]] | None = None) -> str | None:
    """A probe's rendering, or None where the template refuses or fails on it (nothing is learnt there)."""
    try:
        return formatter(messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
                         enable_thinking=enable_thinking).prompt
    except Exception:  # noqa: BLE001 - a template that fails on a probe shows no markers through it
        return None


def _analysed(formatter: Formatter) -> ThinkingMarkers:
    markers = _from_thinking_switch(formatter, _around_thinking(formatter))
    return _beside_tool_calls(formatter, markers)


def _around_thinking(formatter: Formatter) -> ThinkingMarkers:
    """The markers around the thinking of an earlier turn, as the template renders it."""
    plain = _render(formatter, [_USER, {"role": "assistant", "content": _REPLY}], add_generation_prompt=False,
                    enable_thinking=True)
    thought = _render(formatter, [_USER, {"role": "assistant", "content": _REPLY, "reasoning_content": _THOUGHT}],
                      add_generation_prompt=False, enable_thinking=True)
    if plain is None or thought is None or _THOUGHT in plain or _THOUGHT not in thought:
        return ThinkingMarkers()
    return _wrapped(thought, space_before_end=True) or ThinkingMarkers(end=_closing(thought))


def _from_thinking_switch(formatter: Formatter, found: ThinkingMarkers) -> ThinkingMarkers:
    """What a generation prompt gains with ``enable_thinking`` on (an opened block) or off (a closed empty
    one), for the markers not found yet."""
    off = _render(formatter, [_USER], add_generation_prompt=True, enable_thinking=False)
    on = _render(formatter, [_USER], add_generation_prompt=True, enable_thinking=True)
    if off is None or on is None:
        return found
    only_off, only_on = _difference(off, on)
    start, end = found.start, found.end
    if not only_off.strip(_SPACE) and only_on:  # a block opened: its start
        if only_on.strip(_SPACE) and on.endswith(only_on.strip(_SPACE)) and not start:
            start = only_on
    elif not only_on.strip(_SPACE) and only_off:  # an empty block closed: its end, and the marker before it
        if only_off.strip(_SPACE) and off.endswith(only_off.strip(_SPACE)) and not end:
            written = [segment for segment in _segments(off) if segment[1].strip(_SPACE)]
            if len(written) >= 2 and written[-1][1] == only_off.strip(_SPACE) and written[-2][0]:
                start = written[-2][1]
            end = only_off
    elif only_off.strip(_SPACE) and only_on.strip(_SPACE):
        start, end = _appended_pair(off, on, start, end)
    return ThinkingMarkers(start, end)


def _appended_pair(off: str, on: str, start: str, end: str) -> tuple[str, str]:
    """Where the two renderings differ elsewhere too (SmolLM3 changes its system message), the two markers
    one of them appends after the other's last 64 characters."""
    for base, extended in ((on, off), (off, on)):
        anchor = base[-64:]
        at = extended.rfind(anchor)
        if at < 0 or at + len(anchor) >= len(extended):
            continue
        extra = extended[at + len(anchor):].strip(_SPACE)
        if not extra:
            continue
        segments = [(is_marker, value) for is_marker, value in _segments(extra) if value.strip(_SPACE)]
        if len(segments) == 2 and segments[0][0] and segments[1][0]:
            return start or segments[0][1], end or segments[1][1]
    return start, end


def _beside_tool_calls(formatter: Formatter, found: ThinkingMarkers) -> ThinkingMarkers:
    """For a template that shows thinking only in a turn that calls tools: the markers around it there."""
    answered = {"role": "assistant", "content": _REPLY, "reasoning_content": _THOUGHT}
    calling = {"role": "assistant", "content": None, "reasoning_content": _THOUGHT, "tool_calls": [_CALL]}
    plain = _render(formatter, [_USER, answered], add_generation_prompt=False, enable_thinking=True, tools=_TOOLS)
    called = _render(formatter, [_USER, calling], add_generation_prompt=False, enable_thinking=True, tools=_TOOLS)
    if plain is None or called is None or _THOUGHT in plain or _THOUGHT not in called:
        return found
    return _wrapped(called, space_before_end=False) or ThinkingMarkers(found.start, _closing(called))


def _named_markers(formatter: Formatter, markers: ThinkingMarkers) -> ThinkingMarkers:
    """The template families whose markers llama.cpp names rather than finds."""
    source = getattr(formatter, "template", None)
    if not isinstance(source, str):
        return markers
    if ("content.split('</think>')" in source and "reasoning_content" not in source
            and "<SPECIAL_12>" not in source and not (markers.start or markers.end)):
        return ThinkingMarkers("<think>", "</think>")  # QwQ, DeepSeek-R1 distills: earlier thinking dropped
    if "Write your thoughts between <think></think> and write your response between <response></response>" \
            in source:
        return ThinkingMarkers("<think>", "</think>")  # Granite 3.3
    if all(tag in source for tag in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        return ThinkingMarkers("<think>\n", "</think>")  # Nemotron Nano v2
    if "laguna_glm_thinking" in source:
        return ThinkingMarkers(markers.start.strip(_SPACE), markers.end.strip(_SPACE))  # Laguna's bare tags
    return markers


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _marker_end(text: str, at: int) -> int:
    """The end of the ``<...>`` or ``[...]`` marker at ``at``, or -1 where none starts there."""
    closer = _CLOSERS.get(text[at:at + 1])
    if closer is None:
        return -1
    close = text.find(closer, at + 1)
    return -1 if close < 0 else close + 1


def _wrapped(text: str, *, space_before_end: bool) -> ThinkingMarkers | None:
    """The first ``marker space THOUGHT space marker space`` in ``text``: its two halves (the space after the
    thought in the second one with ``space_before_end``)."""
    for at, char in enumerate(text):
        if char not in _CLOSERS:
            continue
        opened = _marker_end(text, at)
        if opened < 0:
            continue
        inside = _skip_space(text, opened)
        if not text.startswith(_THOUGHT, inside):
            continue
        after = inside + len(_THOUGHT)
        closing = _skip_space(text, after)
        closed = _marker_end(text, closing)
        if closed >= 0:
            end_from = after if space_before_end else closing
            return ThinkingMarkers(text[at:inside], text[end_from:_skip_space(text, closed)])
    return None


def _closing(text: str) -> str:
    """The marker (and the whitespace after it) that follows the thinking in ``text``, "" where none does."""
    after = _skip_space(text, text.index(_THOUGHT) + len(_THOUGHT))
    closed = _marker_end(text, after)
    return text[after:_skip_space(text, closed)] if closed >= 0 else ""


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _segments(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into markers (``<...>``, ``[...]``) and the text between them: (is_marker, value)."""
    out: list[tuple[bool, str]] = []
    border, closer = 0, ""
    for i, char in enumerate(text):
        if not closer and char in _CLOSERS:
            if border < i:
                out.append((False, text[border:i]))
            border, closer = i, _CLOSERS[char]
        elif closer and char == closer:
            out.append((True, text[border:i + 1]))
            border, closer = i + 1, ""
    if border < len(text):
        out.append((False, text[border:]))
    return out


def _difference(left: str, right: str) -> tuple[str, str]:
    """What only ``left`` and only ``right`` hold between their common beginning and end, compared marker by
    marker first and then character by character inside text (llama.cpp's ``calculate_diff_split``)."""
    a, b = _segments(left), _segments(right)
    if not a:
        return "", right
    if not b:
        return left, ""
    a_first, a_last, b_first, b_last = 0, len(a) - 1, 0, len(b) - 1
    a_used = b_used = False
    while a_first != a_last and b_first != b_last:
        moved = False
        if a[a_first] == b[b_first]:
            a_first, b_first, moved = a_first + 1, b_first + 1, True
        if a[a_last] == b[b_last]:
            if a_first != a_last:
                a_last -= 1
            else:
                a_used = True
            if b_first != b_last:
                b_last -= 1
            else:
                b_used = True
            moved = True
        if not moved:
            break
    if a_first == a_last and b_first != b_last:
        if a[a_first] == b[b_last]:
            b_last, a_used = b_last - 1, True
        elif a[a_first] == b[b_first]:
            b_first, a_used = b_first + 1, True
    elif b_first == b_last and a_first != a_last:
        if a[a_last] == b[b_first]:
            a_last, b_used = a_last - 1, True
        elif a[a_first] == b[b_first]:
            a_first, b_used = a_first + 1, True
    elif a_first == a_last and b_first == b_last and a[a_first] == b[b_first] and a[a_first][0]:
        a_used = b_used = True
    text_suffix = not a[a_last][0] and not b[b_last][0]
    text_prefix = not a[a_first][0] and not b[b_first][0]
    rest_a = "".join(value for _, value in a[a_first:a_last + (0 if a_used else 1)])
    rest_b = "".join(value for _, value in b[b_first:b_last + (0 if b_used else 1)])
    suffix = _common_prefix(rest_a[::-1], rest_b[::-1]) if text_suffix else 0
    prefix = _common_prefix(rest_a[:len(rest_a) - suffix], rest_b[:len(rest_b) - suffix]) if text_prefix else 0
    only_a, only_b = rest_a[prefix:len(rest_a) - suffix], rest_b[prefix:len(rest_b) - suffix]
    if not only_a and only_b and right.startswith(left):
        only_b = right[len(left):]
    return only_a, only_b
