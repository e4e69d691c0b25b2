"""The chat formats of llama_cpp, as a plugin.

Registers ``chat_template`` (the model's own Jinja templates, sandboxed),
the named formats of llama-cpp-python (``chatml``, ``llama-3``...) and the
function-calling handlers ``chatml-function-calling``, ``functionary``,
``functionary-v1`` and ``functionary-v2``.  Also exports, for
``llama_cpp.llama_chat_format``, the seed's public names:
``Jinja2ChatFormatter``, ``chat_formatter_to_chat_completion_handler`` and the
``format_*`` functions; and ``complete_chat``, the render-then-complete path
(structured output, tools, streaming) for other plugins' handlers.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.plugins import ChatFormat

from .formats import NAMED_FORMATS
from .function_calling import format_chatml_function_calling
from .functionary import DIALECTS, functionary_handler
from .gguf_template import gguf_template_handler
from .handler import complete_chat  # noqa: F401 (for handlers built on it: the multimodal plugin)
from .handler import formatter_handler as chat_formatter_to_chat_completion_handler
from .hf_tokenizer import (hf_autotokenizer_to_chat_completion_handler,  # noqa: F401 (exported)
                           hf_autotokenizer_to_chat_formatter, hf_tokenizer_config_to_chat_completion_handler,
                           hf_tokenizer_config_to_chat_formatter)
from .jinja import Jinja2ChatFormatter, TemplateError  # noqa: F401 (exported for llama_chat_format)

__llama_chat_format_exports__ = frozenset({
    "Jinja2ChatFormatter", "chat_formatter_to_chat_completion_handler", "TemplateError",
    "format_chatml_function_calling", "hf_autotokenizer_to_chat_formatter",
    "hf_autotokenizer_to_chat_completion_handler", "hf_tokenizer_config_to_chat_formatter",
    "hf_tokenizer_config_to_chat_completion_handler",
    *(f"format_{name.replace('-', '_')}" for name in NAMED_FORMATS),
})
globals().update({f"format_{name.replace('-', '_')}": fn for name, fn in NAMED_FORMATS.items()})


@hookimpl
def llama_cpp_chat_formats() -> list[ChatFormat]:
    formats = [ChatFormat("chat_template", gguf_template_handler,
                          description="the model's own Jinja templates (tokenizer.chat_template[.<name>])")]
    formats += [ChatFormat(name, chat_formatter_to_chat_completion_handler(fn), description=f"the {name} format")
                for name, fn in NAMED_FORMATS.items()]
    formats.append(ChatFormat("chatml-function-calling",
                              chat_formatter_to_chat_completion_handler(format_chatml_function_calling),
                              description="tool use for any ChatML model (tools described in the system message)"))
    formats += [ChatFormat(name, functionary_handler(name), description=f"MeetKai {name} (function calling)")
                for name in DIALECTS]
    return formats
