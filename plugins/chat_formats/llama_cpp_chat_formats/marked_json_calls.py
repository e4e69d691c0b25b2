"""Tool calls whose arguments are JSON, each call or the whole list between a family's own markers.

* DeepSeek R1 / V3 / V3.1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...``;
  R1 writes ``function<｜tool▁sep｜>NAME`` and the arguments in a fenced ``json`` block
* Kimi K2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}``
* Solar Open: ``<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|>``
* a JSON list (or objects) between markers: Nemotron Nano v2's ``<TOOLCALL>[...]</TOOLCALL>``, Apriel's and
  MiniMax-M1's ``<tool_calls>...</tool_calls>``, Command R7B's and Cohere2 MoE's
  ``<|START_ACTION|>[{"tool_name": ...}]<|END_ACTION|>``, Apertus's ``<|tools_prefix|>[{NAME: {...}}]
  <|tools_suffix|>``, GigaChat 3.1's ``<|function_call|>{...}``, GigaChat 3's ``function call<|role_sep|>`` and
  Command R+'s ``Action:`` with a fenced JSON list
"""

from __future__ import annotations

import re

from .call_values import OfferedTools, Parsed, ToolCallStyle, json_values, make_tool_call, named_call

_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>(?P<fenced>[^\n<]+?)\s*```(?:json)?\s*"
                            r"|(?P<bare>[^<\n]+?)<｜tool▁sep｜>\s*)")
_KIMI_K2_CALL = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?(?P<name>[^:<\s]+)(?::\d+)?\s*"
                           r"<\|tool_call_argument_begin\|>")
_SOLAR_CALL = re.compile(r"<\|tool_call:begin\|>[^<]*<\|tool_call:name\|>(?P<name>[^<]+)<\|tool_call:args\|>")

#: (opening, closing) markers around a JSON list of calls, or around JSON call objects
JSON_CALL_BLOCKS = (("<TOOLCALL>", "</TOOLCALL>"), ("<tool_calls>", "</tool_calls>"),
                    ("<|START_ACTION|>", "<|END_ACTION|>"), ("<|tools_prefix|>", "<|tools_suffix|>"),
                    ("<|function_call|>", ""), ("function call<|role_sep|>", ""), ("Action:\n```json", "```"))


def _headed_calls(text: str, offered: OfferedTools, section: str, head: re.Pattern[str],
                  name_groups: tuple[str, ...] = ("name",)) -> Parsed | None:
    """Calls that each begin with ``head`` (naming the tool) right before their JSON arguments; the text before
    ``section`` (or the first call) is the content."""
    calls, first = [], None
    for match in head.finditer(text):
        name = next((match.group(g) for g in name_groups if match.group(g)), None)
        values = json_values(text[match.end():])
        if name is not None and name.strip() in offered and values and values[0][1] == 0:
            calls.append(make_tool_call(name.strip(), values[0][0]))
            first = match.start() if first is None else first
    if first is None:
        return None
    at = text.find(section)
    return text[:at if 0 <= at < first else first].strip(), calls


def parse_deepseek(text: str, offered: OfferedTools) -> Parsed | None:
    if "<｜tool▁call▁begin｜>" not in text:
        return None
    return _headed_calls(text, offered, "<｜tool▁calls▁begin｜>", _DEEPSEEK_CALL, ("fenced", "bare"))


def parse_kimi_k2(text: str, offered: OfferedTools) -> Parsed | None:
    if "<|tool_call_begin|>" not in text:
        return None
    return _headed_calls(text, offered, "<|tool_calls_section_begin|>", _KIMI_K2_CALL)


def parse_solar(text: str, offered: OfferedTools) -> Parsed | None:
    if "<|tool_call:begin|>" not in text:
        return None
    return _headed_calls(text, offered, "<|tool_calls|>", _SOLAR_CALL)


def parse_json_blocks(text: str, offered: OfferedTools) -> Parsed | None:
    """The first block of :data:`JSON_CALL_BLOCKS` that holds calls of offered tools."""
    for opening, closing in JSON_CALL_BLOCKS:
        at = text.find(opening)
        if at < 0:
            continue
        body = text[at + len(opening):]
        end = body.find(closing) if closing else -1
        body = body[:end] if end >= 0 else body
        calls = []
        for value, _, _ in json_values(body):
            for item in value if isinstance(value, list) else [value]:
                call = named_call(item, offered, keyed=True)
                if call is not None:
                    calls.append(call)
        if calls:
            return text[:at].strip(), calls
    return None


STYLES = (
    ToolCallStyle("deepseek", parse_deepseek, ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"),
                  ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                   "<｜tool▁calls▁end｜>")),
    ToolCallStyle("kimi-k2", parse_kimi_k2, ("<|tool_calls_section_begin|>", "<|tool_call_begin|>"),
                  ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                   "<|tool_call_end|>", "<|tool_calls_section_end|>")),
    ToolCallStyle("solar-open", parse_solar, ("<|tool_calls|>", "<|tool_call:begin|>"),
                  ("<|tool_calls|>", "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>",
                   "<|tool_call:end|>")),
    ToolCallStyle("json-blocks", parse_json_blocks, tuple(opening for opening, _ in JSON_CALL_BLOCKS),
                  ("<TOOLCALL>", "</TOOLCALL>", "<|START_ACTION|>", "<|END_ACTION|>", "<|tools_prefix|>",
                   "<|tools_suffix|>", "<|function_call|>", "<|role_sep|>")),
)

__all__ = ["JSON_CALL_BLOCKS", "STYLES", "parse_deepseek", "parse_json_blocks", "parse_kimi_k2", "parse_solar"]
