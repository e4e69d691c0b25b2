"""The reasoning families of llama_cpp, as a plugin.

Each family is a :class:`llama_cpp.plugins.ReasoningFamily`: the markers of its thinking and a
``detect`` that recognises its models from the chat template (what llama.cpp's chat parsers key on) or
the vocabulary (a model trained on the markers has them as tokens).  They are asked in ``order``: the
families with markers of their own first, ``<think>`` last, since other families' templates may mention
it in passing.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.plugins import ReasoningFamily
from llama_cpp.reasoning import TemplateFacts


def is_gpt_oss(facts: TemplateFacts) -> bool:
    """gpt-oss's harmony format: its templates, and only theirs, write ``<|channel|>``."""
    return facts.mentions("<|channel|>")


def is_gemma4(facts: TemplateFacts) -> bool:
    """Gemma 4 thinks in a ``thought`` channel: ``<|channel>thought`` ... ``<channel|>``."""
    return facts.mentions("<|channel>thought") or (facts.is_token("<|channel>") and facts.is_token("<channel|>"))


def is_mistral(facts: TemplateFacts) -> bool:
    """Magistral and Ministral 3 Reasoning: ``[THINK]`` ... ``[/THINK]``."""
    return facts.mentions("[THINK]") or (facts.is_token("[THINK]") and facts.is_token("[/THINK]"))


def is_seed_oss(facts: TemplateFacts) -> bool:
    """ByteDance Seed-OSS: ``<seed:think>`` ... ``</seed:think>``."""
    return facts.mentions("<seed:think>") or (facts.is_token("<seed:think>") and facts.is_token("</seed:think>"))


def is_minimax_m3(facts: TemplateFacts) -> bool:
    """MiniMax-M3: ``<mm:think>`` ... ``</mm:think>``."""
    return facts.mentions("<mm:think>") or (facts.is_token("<mm:think>") and facts.is_token("</mm:think>"))


def is_cohere2_moe(facts: TemplateFacts) -> bool:
    """Cohere2 MoE (North Code): ``<|START_THINKING|>`` ... ``<|END_THINKING|>``, then the answer between
    ``<|START_TEXT|>`` and ``<|END_TEXT|>``; its templates, and only theirs, write both ``<|START_TEXT|>`` and
    ``<|START_ACTION|>`` (llama.cpp's rule)."""
    return facts.mentions("<|START_TEXT|>", "<|START_ACTION|>")


def is_command_r7b(facts: TemplateFacts) -> bool:
    """Command R7B and Command A: ``<|START_THINKING|>`` ... ``<|END_THINKING|>``, then the answer between
    ``<|START_RESPONSE|>`` and ``<|END_RESPONSE|>``."""
    return facts.mentions("<|START_THINKING|>", "<|START_RESPONSE|>")


def is_kimi_k3(facts: TemplateFacts) -> bool:
    """Kimi K3's tagged turns: ``<|open|>think<|sep|>`` ... ``<|close|>think<|sep|>``, then the answer in a
    ``response`` section; its templates write ``<|open|>``, ``<|close|>`` and ``<|end_of_msg|>`` (llama.cpp's
    rule)."""
    return facts.mentions("<|open|>", "<|close|>", "<|end_of_msg|>")


def is_apriel(facts: TemplateFacts) -> bool:
    """Apriel 1.6: the assistant's turn is its thinking until ``[BEGIN FINAL RESPONSE]``."""
    return facts.mentions("<|begin_assistant|>", "[BEGIN FINAL RESPONSE]")


def is_think(facts: TemplateFacts) -> bool:
    """DeepSeek-R1 (and its distills), Qwen3, QwQ, SmolLM3...: a ``<think>`` block; and Kimi K2, whose
    templates do not write it (llama.cpp's Kimi K2 parser, keyed on its tool-call section markers, reads it)."""
    return (facts.mentions("<think>") or facts.mentions("</think>")
            or facts.mentions("<|tool_calls_section_begin|>", "<|tool_call_begin|>")
            or (facts.is_token("<think>") and facts.is_token("</think>")))


@hookimpl
def llama_cpp_reasoning_families() -> list[ReasoningFamily]:
    return [
        ReasoningFamily(name="gpt-oss", start="<|channel|>analysis<|message|>", end="<|end|>",
                        content_start="<|start|>assistant<|channel|>final<|message|>", detect=is_gpt_oss, order=10,
                        description="gpt-oss: the analysis channel, then the final one"),
        ReasoningFamily(name="gemma4", start="<|channel>thought", end="<channel|>", detect=is_gemma4, order=20,
                        description="Gemma 4: the thought channel"),
        ReasoningFamily(name="mistral", start="[THINK]", end="[/THINK]", detect=is_mistral, order=30,
                        description="Magistral, Ministral 3 Reasoning: [THINK] ... [/THINK]"),
        ReasoningFamily(name="seed-oss", start="<seed:think>", end="</seed:think>", end_space="\n",
                        detect=is_seed_oss, order=40, description="ByteDance Seed-OSS: <seed:think> ... </seed:think>"),
        ReasoningFamily(name="minimax-m3", start="<mm:think>", end="</mm:think>", detect=is_minimax_m3, order=50,
                        description="MiniMax-M3: <mm:think> ... </mm:think>"),
        ReasoningFamily(name="cohere2-moe", start="<|START_THINKING|>", end="<|END_THINKING|>",
                        content_start="<|START_TEXT|>", content_end="<|END_TEXT|>", detect=is_cohere2_moe, order=60,
                        description="Cohere2 MoE: <|START_THINKING|> ..., the answer in <|START_TEXT|> ..."),
        ReasoningFamily(name="command-r7b", start="<|START_THINKING|>", end="<|END_THINKING|>",
                        content_start="<|START_RESPONSE|>", content_end="<|END_RESPONSE|>", detect=is_command_r7b,
                        order=70, description="Command R7B, Command A: <|START_THINKING|> ..., the answer in "
                                              "<|START_RESPONSE|> ..."),
        ReasoningFamily(name="kimi-k3", start="<|open|>think<|sep|>", end="<|close|>think<|sep|>",
                        content_start="<|open|>response<|sep|>", content_end="<|close|>response<|sep|>",
                        detect=is_kimi_k3, order=80, description="Kimi K3: the think section, then the response"),
        ReasoningFamily(name="apriel", start="<|begin_assistant|>", end="[BEGIN FINAL RESPONSE]",
                        start_preamble="Here are my reasoning steps:\n", detect=is_apriel, order=90,
                        description="Apriel 1.6: the turn thinks until [BEGIN FINAL RESPONSE]"),
        ReasoningFamily(name="think", start="<think>", end="</think>", detect=is_think, order=100,
                        description="DeepSeek-R1, Qwen3, QwQ, SmolLM3...: <think> ... </think>"),
    ]


__all__ = ["is_apriel", "is_cohere2_moe", "is_command_r7b", "is_gemma4", "is_gpt_oss", "is_kimi_k3", "is_minimax_m3", "is_mistral",
           "is_seed_oss", "is_think"]
