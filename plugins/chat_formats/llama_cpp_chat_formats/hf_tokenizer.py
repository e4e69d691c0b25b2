"""Chat formats from Hugging Face tokenizer configurations (the seed's ``hf_*`` helpers).

``tokenizer_config.json`` carries the chat template of a model whose GGUF
may lack one; it is rendered in the same sandbox as GGUF templates.  The
``hf_autotokenizer_*`` helpers render with ``transformers`` itself, for
templates that need its exact behaviour.
"""

from __future__ import annotations

from typing import Any, Callable

from llama_cpp.llama_chat_format import ChatFormatterResponse

from .handler import formatter_handler
from .jinja import Jinja2ChatFormatter


def _token(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or an ``{"content": ...}`` object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: dict[str, Any],
                                          add_generation_prompt: bool = True) -> Jinja2ChatFormatter:
    """The formatter of a ``tokenizer_config.json`` (its default template when it lists several)."""
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        by_name = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = by_name.get("default")
    if not isinstance(template, str) or not template:
        raise ValueError("the tokenizer config has no chat_template (a string, or a list with a 'default' entry)")
    return Jinja2ChatFormatter(template, eos_token=_token(tokenizer_config.get("eos_token")),
                               bos_token=_token(tokenizer_config.get("bos_token")),
                               add_generation_prompt=add_generation_prompt)


def hf_tokenizer_config_to_chat_completion_handler(tokenizer_config: dict[str, Any],
                                                   add_generation_prompt: bool = True) -> Callable[..., Any]:
    return formatter_handler(hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt))


def hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path: str) -> Callable[..., ChatFormatterResponse]:
    """A formatter rendering with ``transformers.AutoTokenizer.apply_chat_template`` (needs ``transformers``)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ImportError("hf_autotokenizer_to_chat_formatter needs transformers: pip install transformers") from exc
    tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path)

    def format_autotokenizer(*, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                             **kwargs: Any) -> ChatFormatterResponse:
        variables = {k: v for k, v in kwargs.items() if v is not None}
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                               **variables)
        bos = tokenizer.bos_token or ""
        return ChatFormatterResponse(prompt=prompt, stop=tokenizer.eos_token or None,
                                     added_special=bool(bos) and prompt.startswith(bos))

    return format_autotokenizer


def hf_autotokenizer_to_chat_completion_handler(pretrained_model_name_or_path: str) -> Callable[..., Any]:
    return formatter_handler(hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path))
