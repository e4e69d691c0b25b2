"""Which chat handler a ``Llama`` is built with: a named template of the GGUF (``chat_template_name``), or
the multimodal handler that ``mmproj_path`` asks for.  The constructor decides these before the model loads
(a wrong projector fails fast), so they live apart from the chat methods that use the handler."""

from __future__ import annotations

from typing import Any, Mapping

from .llama_chat_format import chat_template_names
from .plugins import MultimodalHandler, get_host

GGUF_TEMPLATE_FORMAT = "chat_template"


def named_template_format(metadata: Mapping[str, str], name: str, chat_format: str | None) -> str:
    """The chat format that renders the GGUF's template ``name`` (``Llama(chat_template_name=...)``)."""
    if chat_format is not None:
        raise ValueError(f"chat_template_name={name!r} and chat_format={chat_format!r} both choose the chat "
                         "format; pass one of them")
    names = chat_template_names(metadata)
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"chat_template_name={name!r}: the model has no chat template of that name; "
                         f"it has: {', '.join(names) or 'none'}")
    return f"{GGUF_TEMPLATE_FORMAT}.{name}"


def multimodal_handler(mmproj_path: str, chat_format: str | None, chat_template_name: str | None,
                       options: Mapping[str, Any], verbose: bool) -> Any:
    """The handler ``Llama(model, mmproj_path=...)`` makes: the multimodal handler registered as
    ``chat_format`` (a family: ``qwen2.5-vl``, ``gemma3``...), else ``generic``, which renders the model's
    own template (``chat_template_name`` picks a named one; ``chat_format`` in ``options`` is an explicit
    Jinja template).  ``options`` are ``chat_handler_kwargs``."""
    records = get_host().records(MultimodalHandler)
    if not records:
        raise ValueError("mmproj_path needs a multimodal handler plugin, and none is installed "
                         "(pip install llama-cpp-multimodal)")
    if chat_format is not None and chat_format not in records:
        raise ValueError(f"chat_format={chat_format!r} with mmproj_path: not a multimodal handler; valid names: "
                         f"{', '.join(sorted(records))} (or leave chat_format out to use the model's template)")
    kwargs = {"verbose": verbose, **options, "mmproj_path": str(mmproj_path)}
    if chat_format is None or chat_format == "generic":
        return records["generic"].factory(chat_template_name=chat_template_name, **kwargs)
    if chat_template_name is not None:
        raise ValueError(f"chat_template_name picks one of the model's templates; the {chat_format!r} handler "
                         "renders with its own (leave chat_format out to use the model's templates)")
    return records[chat_format].factory(**kwargs)
