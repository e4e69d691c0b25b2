"""Tool calls: constraining a forced call, and reading calls out of a model's reply.

Models write tool calls in their family's style; the reply is parsed into
OpenAI ``tool_calls`` when it matches one of them, for a tool that was offered:

* Hermes / Qwen 2.5-3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several = parallel)
* Qwen3-Coder: ``<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>``
* Mistral: ``[TOOL_CALLS]NAME[ARGS]{...}`` (Mistral Small 3.2: ``NAME[CALL_ID]ID[ARGS]``) and the older ``[TOOL_CALLS][{"name": ..., "arguments": ...}]``
* Llama 3.x: a JSON object ``{"name": ..., "parameters": {...}}`` (optionally after ``<|python_tag|>``)
* functionary v3.2: ``>>>NAME\\n{...}``, with ``>>>all\\n`` before text
* functionary v3.1 / Llama 3.1 custom tools: ``<function=NAME>{...}</function>``
* FireFunction v2: ``functools[{"name": ..., "arguments": {...}}, ...]``
* chatml-function-calling: ``functions.NAME:\\n{...}``
* gpt-oss (harmony): ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}``, or the
  recipient in the role header: ``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}``
* Gemma 4: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1,flags:[true]}<tool_call|>`` (its own value syntax:
  bare keys, strings between ``<|"|>``)
* the families with markers of their own: DeepSeek, Kimi K2, Solar Open and the JSON lists between markers
  (:mod:`.marked_json_calls`); GLM, MiniMax-M2, DeepSeek V3.2/V4, Seed-OSS, MiniCPM 5 and Hunyuan 3, whose
  arguments are tagged one by one (:mod:`.tagged_calls`); LFM2's Python calls (:mod:`.pythonic_calls`)

Each style is a :class:`ToolCallStyle`: its reader, the texts that open its calls (a stream holds the reply
back from the first, :data:`CALL_MARKERS`) and its markers' texts; they are tried in :data:`STYLES`' order.

Several of these markers are control tokens in their models' vocabularies (gpt-oss's ``<|channel|>``,
Mistral's ``[TOOL_CALLS]``...), which the detokenizer leaves out of the text: while tools are offered, a
reply keeps their text (:data:`SYNTAX_TOKENS`), as llama-server keeps its formats' preserved tokens.

A named or required tool is not left to chance: the reply is constrained to one call, in the syntax
the template writes calls in (:mod:`.forced_calls`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import marked_json_calls, pythonic_calls, tagged_calls
from .call_values import OfferedTools, ToolCallStyle, json_values, make_tool_call, named_call, scalar

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_QWEN_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>\s*(.*?)\s*</function>", re.S)
_QWEN_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)
_MISTRAL_ARGS = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z0-9_.\-]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]")
_RECIPIENT = re.compile(r">>>\s*([A-Za-z0-9_.\-]+)[ \t]*\n")
_CHATML_FC = re.compile(r"functions\.([A-Za-z0-9_.\-]+):\s*\n")
_FUNCTION_TAG = re.compile(r"<function=([A-Za-z0-9_.\-]+)>")
# a harmony message that calls a function: the recipient in the role header or in the channel header, an
# optional constraint (" <|constrain|>json", " json"), then the arguments after <|message|>
_HARMONY_CALL = re.compile(r"(?:<\|start\|>assistant)?(?: to=functions\.(?P<in_role>[^\s<]+))?"
                           r"<\|channel\|>(?:commentary|analysis)(?: to=functions\.(?P<in_channel>[^\s<]+))?"
                           r"(?:\s*(?:<\|constrain\|>)?[A-Za-z0-9_-]+)?<\|message\|>")
_GEMMA4_CALL = re.compile(r"<\|tool_call>call:([^{\s]+)")
_GEMMA4_QUOTE = '<|"|>'
_GEMMA4_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")  # JSON's, as Gemma 4 writes them

def _parse_hermes(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    blocks = list(_HERMES.finditer(text))
    calls = []
    for block in blocks:
        body = block.group(1)
        xml = _QWEN_XML_FUNCTION.search(body)
        if xml and xml.group(1) in offered:
            params = {k: scalar(v) for k, v in _QWEN_XML_PARAMETER.findall(xml.group(2))}
            calls.append(make_tool_call(xml.group(1), params))
            continue
        values = json_values(body)
        call = named_call(values[0][0], offered) if values else None
        if call:
            calls.append(call)
    if not calls:
        return None
    return text[: blocks[0].start()].strip(), calls


def _parse_mistral(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    at = text.find("[TOOL_CALLS]")
    if at < 0:
        return None
    calls = []
    for match in _MISTRAL_ARGS.finditer(text):
        values = json_values(text[match.end():])
        if match.group(1) in offered and values and values[0][1] == 0:
            calls.append(make_tool_call(match.group(1), values[0][0]))
    if not calls:
        values = json_values(text[at + len("[TOOL_CALLS]"):])
        if values and isinstance(values[0][0], list):
            calls = [c for c in (named_call(v, offered) for v in values[0][0]) if c]
    return (text[:at].strip(), calls) if calls else None


def _parse_prefixed(text: str, offered: OfferedTools, pattern: re.Pattern[str]) -> tuple[str, list[dict[str, Any]]] | None:
    calls, first = [], None
    for match in pattern.finditer(text):
        values = json_values(text[match.end():])
        if match.group(1) in offered and values and not text[match.end():match.end() + values[0][1]].strip():
            calls.append(make_tool_call(match.group(1), values[0][0]))
            first = match.start() if first is None else first
    return (text[:first].strip(), calls) if calls else None


def _parse_function_tags(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    calls, first = [], None
    for match in _FUNCTION_TAG.finditer(text):
        values = json_values(text[match.end():])
        if match.group(1) in offered and values and values[0][1] == 0:
            calls.append(make_tool_call(match.group(1), values[0][0]))
            first = match.start() if first is None else first
    return (text[:first].strip(), calls) if calls else None


def _parse_functools(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    at = text.find("functools[")
    if at < 0:
        return None
    values = json_values(text[at + len("functools"):])
    if not values or values[0][1] != 0 or not isinstance(values[0][0], list):
        return None
    calls = [c for c in (named_call(v, offered) for v in values[0][0]) if c]
    return (text[:at].strip(), calls) if calls else None


def _parse_harmony(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    """gpt-oss: each message addressed ``to=functions.NAME`` whose arguments are JSON; the text before the first
    (its analysis and commentary messages, which the reasoning split reads) stays."""
    if "to=functions." not in text:
        return None
    calls, first = [], None
    for match in _HARMONY_CALL.finditer(text):
        name = match.group("in_role") or match.group("in_channel")
        values = json_values(text[match.end():])
        if name in offered and values and values[0][1] == 0:
            calls.append(make_tool_call(name, values[0][0]))
            first = match.start() if first is None else first
    return (text[:first].strip(), calls) if calls else None


def _parse_gemma4(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    """Gemma 4: ``<|tool_call>call:NAME{...}<tool_call|>`` blocks, their arguments in Gemma's value syntax."""
    if "<|tool_call>" not in text:
        return None
    calls, first = [], None
    for match in _GEMMA4_CALL.finditer(text):
        try:
            arguments, end = _gemma4_value(text, match.end())
        except ValueError:
            continue
        if match.group(1) in offered and isinstance(arguments, dict) and text.startswith("<tool_call|>", end):
            calls.append(make_tool_call(match.group(1), arguments))
            first = match.start() if first is None else first
    return (text[:first].strip(), calls) if calls else None


def _gemma4_value(text: str, i: int) -> tuple[Any, int]:
    """The Gemma 4 value at ``text[i]`` and where it ends: a string between ``<|"|>``, a dict of bare keys, a list,
    or a JSON number, boolean or null.  ValueError when there is none."""
    if text.startswith(_GEMMA4_QUOTE, i):
        end = text.find(_GEMMA4_QUOTE, i + len(_GEMMA4_QUOTE))
        if end < 0:
            raise ValueError("an unterminated string")
        return text[i + len(_GEMMA4_QUOTE):end], end + len(_GEMMA4_QUOTE)
    if text.startswith("{", i) or text.startswith("[", i):
        closing, items, is_dict = ("}" if text[i] == "{" else "]"), [], text[i] == "{"
        i = _skip_space(text, i + 1)
        if text.startswith(closing, i):
            return ({} if is_dict else []), i + 1
        while True:
            if is_dict:
                colon = text.find(":", i)
                key = text[i:colon] if colon >= 0 else ""
                if not key or "}" in key:
                    raise ValueError("a key without its value")
                value, i = _gemma4_value(text, _skip_space(text, colon + 1))
                items.append((key.strip(), value))
            else:
                value, i = _gemma4_value(text, i)
                items.append(value)
            i = _skip_space(text, i)
            if text.startswith(",", i):
                i = _skip_space(text, i + 1)
            elif text.startswith(closing, i):
                return (dict(items) if is_dict else items), i + 1
            else:
                raise ValueError("a list or dict that does not close")
    match = _GEMMA4_SCALAR.match(text, i)
    if match is None:
        raise ValueError("no value")
    return json.loads(match.group()), match.end()


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _parse_recipients(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    """functionary v3.2: messages ``>>>RECIPIENT\\n...``; ``all`` is text, an offered function a call."""
    if ">>>" not in text:
        return None
    heads = list(_RECIPIENT.finditer(text))
    if not heads:
        return None
    texts, calls = [text[:heads[0].start()]], []
    for head, after in zip(heads, [*heads[1:], None]):
        body = text[head.end():after.start() if after else len(text)]
        values = json_values(body)
        if head.group(1) in offered and values and not body[:values[0][1]].strip():
            calls.append(make_tool_call(head.group(1), values[0][0]))
        elif head.group(1) == "all":
            texts.append(body)
        else:
            texts.append(text[head.start():after.start() if after else len(text)])
    return "".join(texts).strip(), calls


def _parse_llama3(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    body = text.split("<|python_tag|>", 1)[-1]
    values = json_values(body)
    if not values or body[: values[0][1]].strip():
        return None
    calls = [c for c in (named_call(v[0], offered) for v in values) if c]
    return ("", calls) if calls else None


_GPT_OSS_TOKENS = ("<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>")

#: every style, in the order they are tried: those with markers of their own first, bare JSON last
STYLES = (
    # gpt-oss: a message to a function, from its header on (a final answer's header is streamed)
    ToolCallStyle("harmony", _parse_harmony, ("<|start|>assistant to=", "<|start|>assistant<|channel|>commentary to=",
                                              "<|start|>assistant<|channel|>analysis to=", "<|channel|>commentary to=",
                                              "<|channel|>analysis to=", " to=functions."), _GPT_OSS_TOKENS),
    ToolCallStyle("gemma4", _parse_gemma4, ("<|tool_call>",),
                  ("<|tool_call>", "<tool_call|>", _GEMMA4_QUOTE, "<|channel>", "<channel|>")),
    *marked_json_calls.STYLES[:3],  # DeepSeek, Kimi K2, Solar Open
    ToolCallStyle("hermes", _parse_hermes, ("<tool_call>",), ("<tool_call>", "</tool_call>")),
    *tagged_calls.STYLES,  # (GLM's <tool_call>NAME<arg_key>..., after Hermes' <tool_call>{JSON})
    *marked_json_calls.STYLES[3:],  # JSON lists between markers
    pythonic_calls.STYLE,
    ToolCallStyle("mistral", _parse_mistral, ("[TOOL_CALLS]",), ("[TOOL_CALLS]", "[CALL_ID]", "[ARGS]")),
    ToolCallStyle("functools", _parse_functools, ("functools[",)),
    ToolCallStyle("function-tags", _parse_function_tags, ("<function=",)),
    ToolCallStyle("llama3", _parse_llama3, ("<|python_tag|>",), ("<|python_tag|>",)),  # (and a leading "{")
    # functionary v3.2: also a text-only reply, whose ">>>all" is not part of the text
    ToolCallStyle("recipients", _parse_recipients, (">>>",)),
    ToolCallStyle("chatml-function-calling", lambda text, offered: _parse_prefixed(text, offered, _CHATML_FC),
                  ("functions.",)),
)

#: the texts that open a tool call in one of the styles, and the markers' texts of all of them
CALL_MARKERS = tuple(dict.fromkeys(marker for style in STYLES for marker in style.opens))
SYNTAX_TOKENS = tuple(dict.fromkeys(token for style in STYLES for token in style.tokens))


def parse_tool_calls(text: str, tools: list[dict[str, Any]] | None) -> tuple[str | None, list[dict[str, Any]]]:
    """(remaining content or None, tool_calls) of a reply; no calls when nothing matches an offered tool."""
    offered = OfferedTools(tools)
    if not offered:
        return text, []
    for style in STYLES:
        parsed = style.parse(text, offered)
        if parsed is not None:
            return parsed[0] or None, parsed[1]
    return text, []


def legacy_functions_as_tools(functions: list[dict[str, Any]] | None, function_call: Any) -> tuple[Any, Any]:
    """The seed's ``functions``/``function_call`` as ``tools``/``tool_choice``."""
    tools = [{"type": "function", "function": fn} for fn in functions or ()]
    if isinstance(function_call, dict):
        choice: Any = {"type": "function", "function": {"name": function_call.get("name")}}
    else:
        choice = function_call
    return tools or None, choice
