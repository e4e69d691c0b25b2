"""Tool calls whose arguments are written one by one between tags, each value as text.

* GLM 4.5-4.7, Ling 3.0, Laguna, Spark: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>``,
  and Hunyuan 3's the same with ``:opensource`` in every tag
* MiniMax-M2: ``<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>...</invoke>``; DeepSeek
  V3.2 and V4 the same tags behind ``｜DSML｜`` (``string="true"`` on a text value), muse-glimmer's behind ``atem:``
* Seed-OSS: Qwen3-Coder's ``<function=NAME><parameter=K>V</parameter></function>`` inside ``<seed:tool_call>``
* MiniCPM 5: ``<function name="NAME"><param name="K">V</param></function>``
* Kimi K3: ``<|open|>call tool="NAME" index="1"<|sep|><|open|>argument key="K" type="string"<|sep|>V<|close|>argument<|sep|>
  ...<|close|>call<|sep|>`` in a ``tools`` section (the type says how to read the value)
* MiniMax-M3: ``<tool_call><invoke name="NAME"><K>V</K>...</invoke></tool_call>``, every tag behind ``]<]minimax[>[``

Values are read by the tool's parameter schema (:meth:`OfferedTools.argument`).
"""

from __future__ import annotations

import re
from typing import Any

from .call_values import OfferedTools, Parsed, ToolCallStyle, make_tool_call, scalar


def _calls_in(text: str, offered: OfferedTools, call: re.Pattern[str], argument: re.Pattern[str],
              opener: str) -> Parsed | None:
    """Each match of ``call`` (groups: the tool's name, its body) with its body's ``argument`` matches (groups:
    key, value, and optionally ``string``, "true" or "false", which says how to read the value); the content
    is the text before ``opener`` (or the first call)."""
    calls, first = [], None
    for match in call.finditer(text):
        name = match.group("name").strip()
        if name not in offered:
            continue
        arguments: dict[str, Any] = {}
        for arg in argument.finditer(match.group("body")):
            key, value = arg.group("key").strip(), arg.group("value")
            string, kind = arg.groupdict().get("string"), arg.groupdict().get("type")
            if kind is not None:
                string = "true" if kind == "string" else "false"
            arguments[key] = (value if string == "true" else scalar(value) if string == "false"
                              else offered.argument(name, key, value))
        calls.append(make_tool_call(name, arguments))
        first = match.start() if first is None else first
    if first is None:
        return None
    at = text.find(opener)
    return text[:at if 0 <= at < first else first].strip(), calls


def _glm(suffix: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    s = re.escape(suffix)
    return (re.compile(rf"<tool_call{s}>(?P<name>[^<\n]+?)\s*(?:<tool_sep{s}>)?\s*(?P<body>(?:<arg_key{s}>.*?)?)"
                       rf"</tool_call{s}>", re.S),
            re.compile(rf"<arg_key{s}>(?P<key>.*?)</arg_key{s}>\s*<arg_value{s}>(?P<value>.*?)</arg_value{s}>", re.S))


_GLM = _glm("")
_HUNYUAN = _glm(":opensource")


def _invoke(prefix: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    p = re.escape(prefix)
    return (re.compile(rf'<{p}invoke name="(?P<name>[^"]+)">(?P<body>.*?)</{p}invoke>', re.S),
            re.compile(rf'<{p}parameter name="(?P<key>[^"]+)"(?: string="(?P<string>true|false)")?>\n?(?P<value>.*?)'
                       rf'\n?</{p}parameter>', re.S))


_INVOKE_PREFIXES = {"<minimax:tool_call>": "", "<｜DSML｜": "｜DSML｜", "<atem:function_calls>": "atem:"}
_INVOKES = {opener: _invoke(prefix) for opener, prefix in _INVOKE_PREFIXES.items()}
_SEED = (re.compile(r"<function=(?P<name>[^>\s]+)>(?P<body>.*?)</function>", re.S),
         re.compile(r"<parameter=(?P<key>[^>\s]+)>\n?(?P<value>.*?)\n?</parameter>", re.S))
_MINICPM = (re.compile(r'<function name="(?P<name>[^"]+)">(?P<body>.*?)</function>', re.S),
            re.compile(r'<param name="(?P<key>[^"]+)">(?P<value>.*?)</param>', re.S))


_KIMI_K3 = (re.compile(r'<\|open\|>call tool="(?P<name>[^"]+)"[^<]*<\|sep\|>(?P<body>.*?)<\|close\|>call<\|sep\|>', re.S),
            re.compile(r'<\|open\|>argument key="(?P<key>[^"]+)"(?: type="(?P<type>[^"]*)")?[^<]*<\|sep\|>(?P<value>.*?)'
                       r"<\|close\|>argument<\|sep\|>", re.S))
_MINIMAX_M3_SEPARATOR = "]<]minimax[>["
_MINIMAX_M3 = (re.compile(r'<invoke name="(?P<name>[^"]+)">(?P<body>.*?)</invoke>', re.S),
               re.compile(r"<(?P<key>[^/>\s]+)>(?P<value>.*?)</(?P=key)>", re.S))


def parse_glm(text: str, offered: OfferedTools) -> Parsed | None:
    if "<tool_call>" in text:  # (a call's name must be an offered tool's: a JSON call body is not one)
        return _calls_in(text, offered, *_GLM, "<tool_call>")
    if "<tool_call:opensource>" in text:
        return _calls_in(text, offered, *_HUNYUAN, "<tool_calls:opensource>")
    return None


def parse_invoke(text: str, offered: OfferedTools) -> Parsed | None:
    for opener, (call, argument) in _INVOKES.items():
        if opener in text:
            parsed = _calls_in(text, offered, call, argument, opener)
            if parsed:
                return parsed
    return None


def parse_seed(text: str, offered: OfferedTools) -> Parsed | None:
    if "<seed:tool_call>" not in text:
        return None
    return _calls_in(text, offered, *_SEED, "<seed:tool_call>")


def parse_minicpm(text: str, offered: OfferedTools) -> Parsed | None:
    if '<function name="' not in text:
        return None
    return _calls_in(text, offered, *_MINICPM, '<function name="')


def parse_kimi_k3(text: str, offered: OfferedTools) -> Parsed | None:
    if "<|open|>call tool=" not in text:
        return None
    return _calls_in(text, offered, *_KIMI_K3, "<|open|>tools<|sep|>")


def parse_minimax_m3(text: str, offered: OfferedTools) -> Parsed | None:
    """MiniMax-M3: the calls read with the separators taken out of the block (the content before it keeps them)."""
    opener = _MINIMAX_M3_SEPARATOR + "<tool_call>"
    at = text.find(opener)
    if at < 0:
        return None
    parsed = _calls_in(text[at:].replace(_MINIMAX_M3_SEPARATOR, ""), offered, *_MINIMAX_M3, "<tool_call>")
    return (text[:at].strip(), parsed[1]) if parsed else None


_MARKS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
STYLES = (
    ToolCallStyle("glm", parse_glm, ("<tool_call>", "<tool_call:opensource>", "<tool_calls:opensource>"),
                  (*_MARKS, *(m.replace(">", ":opensource>") for m in _MARKS), "<tool_call:opensource>",
                   "</tool_call:opensource>", "<tool_calls:opensource>", "</tool_calls:opensource>",
                   "<tool_sep:opensource>")),
    ToolCallStyle("invoke", parse_invoke, tuple(_INVOKE_PREFIXES), ("<minimax:tool_call>", "</minimax:tool_call>",
                                                                     "｜DSML｜")),
    ToolCallStyle("seed-oss", parse_seed, ("<seed:tool_call>",), ("<seed:tool_call>", "</seed:tool_call>")),
    ToolCallStyle("minicpm-5", parse_minicpm, ('<function name="',)),
    ToolCallStyle("kimi-k3", parse_kimi_k3, ("<|open|>tools<|sep|>", "<|open|>call tool="), ("<|open|>", "<|close|>",
                                                                                           "<|sep|>")),
    ToolCallStyle("minimax-m3", parse_minimax_m3, (_MINIMAX_M3_SEPARATOR + "<tool_call>",), (_MINIMAX_M3_SEPARATOR,)),
)

__all__ = ["STYLES", "parse_glm", "parse_invoke", "parse_kimi_k3", "parse_minicpm", "parse_minimax_m3", "parse_seed"]
