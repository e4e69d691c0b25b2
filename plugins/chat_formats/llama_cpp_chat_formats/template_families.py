"""The model families llama.cpp handles with a parser of its own rather than its generic one, recognised by
their template's source as llama.cpp recognises them (``common_chat_try_specialized_template``,
common/chat.cpp), in its order: the first family that claims a template is its family.

What a family's handler does differently is kept where it applies: the messages it hands its template
(:mod:`.family_messages`) and how it continues an assistant message (:mod:`.continuation`).
"""

from __future__ import annotations

from typing import Callable, Literal

Family = Literal["ministral-3", "gpt-oss", "muse-glimmer", "functionary-v3.2", "kimi-k2", "kimi-k3", "ling-3",
                 "cohere2-moe", "lfm2", "gigachat-3", "minimax-m3", "deepseek-v3.2", "gemma-4", "minicpm-5",
                 "qwen3-coder"]


def _has(*texts: str) -> Callable[[str], bool]:
    return lambda source: all(text in source for text in texts)


def _ministral_3(source: str) -> bool:  # Mistral Small 3.2 has [CALL_ID], Ministral 3 and Devstral not
    return _has("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")(source) and "[CALL_ID]" not in source


def _lfm2(source: str) -> bool:  # LFM2's tool list tokens, or LFM2.5's plain "List of tools"
    return _has("<|tool_list_start|>", "<|tool_list_end|>")(source) or \
        ("List of tools: [" in source and "<|tool_list_start|>" not in source)


def _gigachat_3(source: str) -> bool:
    return _has("<|role_sep|>", "<|message_sep|>")(source) and "<|function_call|>" not in source


def _deepseek_v3_2(source: str) -> bool:  # V3.2 and V4: the DSML tool-call markup
    return _has("dsml_token", "DSML")(source) and ("function_calls" in source or "tool_calls" in source)


def _qwen3_coder(source: str) -> bool:  # also Nemotron 3 Nano, Qwen3.5, StepFun 3.5 (newlines between tags)
    return _has("<tool_call>", "<function=", "<parameter=")(source) and \
        "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source


_FAMILIES: tuple[tuple[Family, Callable[[str], bool]], ...] = (
    ("ministral-3", _ministral_3),
    ("gpt-oss", _has("<|channel|>")),
    ("muse-glimmer", _has("<atem:function_calls>", "<|eom|>")),
    ("functionary-v3.2", _has(">>>all", ">>>${recipient}")),
    ("kimi-k2", _has("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),
    ("kimi-k3", _has("<|open|>", "<|close|>", "<|end_of_msg|>")),
    ("ling-3", _has("<role>ASSISTANT</role>", "<arg_key>")),
    ("cohere2-moe", _has("<|START_TEXT|>", "<|START_ACTION|>")),
    ("lfm2", _lfm2),
    ("gigachat-3", _gigachat_3),
    ("minimax-m3", _has("]<]minimax[>[", "<tool_call>", "<invoke name=")),
    ("deepseek-v3.2", _deepseek_v3_2),
    ("gemma-4", _has("'<|tool_call>call:'")),
    ("minicpm-5", _has("Tool usage guidelines:", '<function name="', '<param name="')),
    ("qwen3-coder", _qwen3_coder),
)


def family_of(source: str) -> Family | None:
    """The family whose llama.cpp parser handles a template with this source; None for the generic one."""
    for family, claims in _FAMILIES:
        if claims(source):
            return family
    return None
