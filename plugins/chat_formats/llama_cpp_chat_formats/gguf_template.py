"""The ``chat_template`` format: the model's own Jinja templates from its GGUF metadata.

``tokenizer.chat_template`` is the default; ``tokenizer.chat_template.<name>``
are named alternatives (``tool_use``, ``rag``...), chosen with
``chat_format="chat_template.<name>"``.  Each Llama instance compiles its
templates once, on first use.
"""

from __future__ import annotations

import weakref
from typing import Any

from llama_cpp.llama_chat_format import ChatFormatterResponse, chat_template_names

from .handler import complete_chat, render_chat
from .jinja import Jinja2ChatFormatter, TemplateError

_formatters: "weakref.WeakKeyDictionary[Any, dict[str, Jinja2ChatFormatter]]" = weakref.WeakKeyDictionary()


def _token_text(llama: Any, token: int) -> str:
    if token < 0:
        return ""
    return llama.detokenize([token], special=True).decode("utf-8", "replace")


def model_formatter(llama: Any, template: str) -> Jinja2ChatFormatter:
    """A formatter of ``template`` (Jinja text) with the special tokens of ``llama``'s model, as the model's
    own template gets them."""
    specials = {"eot_token": llama.token_eot(), "sep_token": llama.token_sep(), "nl_token": llama.token_nl(),
                "pad_token": llama.token_pad(), "mask_token": llama.token_mask()}
    return Jinja2ChatFormatter(
        template, eos_token=_token_text(llama, llama.token_eos()), bos_token=_token_text(llama, llama.token_bos()),
        stop_token_ids=[t for t in (llama.token_eos(), llama.token_eot()) if t >= 0],
        special_tokens_map={k: _token_text(llama, v) for k, v in specials.items()},
    )


def formatter_for(llama: Any, name: str = "default") -> Jinja2ChatFormatter:
    """The (cached) formatter of the GGUF template ``name`` of ``llama``'s model."""
    per_model = _formatters.setdefault(llama, {})
    if name not in per_model:
        key = "tokenizer.chat_template" if name == "default" else f"tokenizer.chat_template.{name}"
        template = llama.metadata.get(key)
        if template is None:
            known = chat_template_names(llama.metadata)
            raise TemplateError(f"the model has no chat template {name!r}; it has: {', '.join(known) or 'none'}")
        per_model[name] = model_formatter(llama, template)
    return per_model[name]


class GgufTemplateHandler:
    """The ``chat_template`` format's handler: the model's template ``chat_template_name`` renders, then the
    completion runs; :meth:`render_chat_prompt` renders alone (the core's ``ChatPromptRenderer``)."""

    def __call__(self, *, llama: Any, messages: list[dict[str, Any]], chat_template_name: str = "default",
                 **request: Any) -> Any:
        return complete_chat(llama, formatter_for(llama, chat_template_name), messages, request)

    def render_chat_prompt(self, *, llama: Any, messages: list[dict[str, Any]], chat_template_name: str = "default",
                           **request: Any) -> ChatFormatterResponse:
        return render_chat(formatter_for(llama, chat_template_name), messages, request)


gguf_template_handler = GgufTemplateHandler()


class ChatTemplateHandler:
    """A chat handler of a Jinja template given as text, in place of the model's own (llama-server's
    ``--chat-template``): rendered with the special tokens of the model it is called with (which a
    formatter made before the model loads cannot know), compiled once per model."""

    def __init__(self, template: str) -> None:
        if not isinstance(template, str) or not template.strip():
            raise ValueError("a chat template must be a non-empty Jinja text")
        self.template = template
        self._formatters: "weakref.WeakKeyDictionary[Any, Jinja2ChatFormatter]" = weakref.WeakKeyDictionary()

    def formatter(self, llama: Any) -> Jinja2ChatFormatter:
        found = self._formatters.get(llama)
        if found is None:
            found = self._formatters[llama] = model_formatter(llama, self.template)
        return found

    def __call__(self, *, llama: Any, messages: list[dict[str, Any]], **request: Any) -> Any:
        return complete_chat(llama, self.formatter(llama), messages, request)

    def render_chat_prompt(self, *, llama: Any, messages: list[dict[str, Any]],
                           **request: Any) -> ChatFormatterResponse:
        return render_chat(self.formatter(llama), messages, request)
