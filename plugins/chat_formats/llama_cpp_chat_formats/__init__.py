"""The chat formats of llama_cpp, as a plugin.

Registers ``chat_template`` (the model's own Jinja templates, sandboxed),
the named formats of llama-cpp-python (``chatml``, ``llama-3``...) and the
function-calling handlers ``chatml-function-calling``, ``functionary``,
``functionary-v1`` and ``functionary-v2``.  Also exports, for
``llama_cpp.llama_chat_format``, the seed's public names under its spellings:
``Jinja2ChatFormatter``, ``chat_formatter_to_chat_completion_handler``, the
``format_*`` functions (``format_llama2``, ``format_chatml``...), the handlers
``chatml_function_calling``, ``functionary_chat_handler`` and
``functionary_v1_v2_chat_handler``, the template constants (``CHATML_*``...)
and ``guess_chat_format_from_gguf_metadata``, with ``ChatTemplateHandler`` (a
Jinja template given as text, llama-server's ``--chat-template``); and ``complete_chat``, the
render-then-complete path (structured output, tools, streaming) for other
plugins' handlers, and ``render_chat``, its rendering alone.
"""

from __future__ import annotations

import re

from llama_cpp import hookimpl
from llama_cpp.plugins import ChatFormat

from . import seed_templates
from .formats import NAMED_FORMATS
from .function_calling import format_chatml_function_calling
from .functionary import DIALECTS, functionary_handler
from .gguf_template import ChatTemplateHandler, gguf_template_handler  # noqa: F401 (ChatTemplateHandler: exported)
from .handler import complete_chat, render_chat  # noqa: F401 (for handlers built on them: the multimodal plugin)
from .handler import formatter_handler as chat_formatter_to_chat_completion_handler
from .hf_tokenizer import (hf_autotokenizer_to_chat_completion_handler,  # noqa: F401 (exported)
                           hf_autotokenizer_to_chat_formatter, hf_tokenizer_config_to_chat_completion_handler,
                           hf_tokenizer_config_to_chat_formatter)
from .jinja import Jinja2ChatFormatter, TemplateError  # noqa: F401 (exported for llama_chat_format)
from .seed_templates import guess_chat_format_from_gguf_metadata  # noqa: F401 (exported)


def _seed_function_name(name: str) -> str:
    """The seed's name for a format's function: ``llama-2`` is ``format_llama2``, ``open-orca`` is
    ``format_open_orca``."""
    return "format_" + re.sub(r"-(?=\d)", "", name).replace("-", "_")


# one handler object per registered name, the same one llama_chat_format exports under the seed's names
_HANDLERS = {
    "chatml-function-calling": chat_formatter_to_chat_completion_handler(format_chatml_function_calling),
    **{name: functionary_handler(name) for name in DIALECTS},
}
chatml_function_calling = _HANDLERS["chatml-function-calling"]
functionary_chat_handler = _HANDLERS["functionary"]
# v2 is the seed's handler for both: the dialect is the one whose special tokens the vocabulary has
functionary_v1_v2_chat_handler = _HANDLERS["functionary-v2"]
_TEMPLATE_CONSTANTS = [name for name in vars(seed_templates) if name.isupper()]
globals().update({name: getattr(seed_templates, name) for name in _TEMPLATE_CONSTANTS})
globals().update({_seed_function_name(name): fn for name, fn in NAMED_FORMATS.items()})

__llama_chat_format_exports__ = frozenset({
    "Jinja2ChatFormatter", "chat_formatter_to_chat_completion_handler", "TemplateError", "ChatTemplateHandler",
    "format_chatml_function_calling", "hf_autotokenizer_to_chat_formatter",
    "hf_autotokenizer_to_chat_completion_handler", "hf_tokenizer_config_to_chat_formatter",
    "hf_tokenizer_config_to_chat_completion_handler", "guess_chat_format_from_gguf_metadata",
    "chatml_function_calling", "functionary_chat_handler", "functionary_v1_v2_chat_handler",
    *_TEMPLATE_CONSTANTS, *(_seed_function_name(name) for name in NAMED_FORMATS),
})


@hookimpl
def llama_cpp_chat_formats() -> list[ChatFormat]:
    formats = [ChatFormat("chat_template", gguf_template_handler,
                          description="the model's own Jinja templates (tokenizer.chat_template[.<name>])")]
    formats += [ChatFormat(name, chat_formatter_to_chat_completion_handler(fn), description=f"the {name} format")
                for name, fn in NAMED_FORMATS.items()]
    formats.append(ChatFormat("chatml-function-calling", _HANDLERS["chatml-function-calling"],
                              description="tool use for any ChatML model (tools described in the system message)"))
    formats += [ChatFormat(name, _HANDLERS[name], description=f"MeetKai {name} (function calling)")
                for name in DIALECTS]
    return formats
