"""``GenericMTMDChatHandler``: what ``Llama(model, mmproj_path=...)`` makes, the model's own template.

For a model file without a template, the projector names the family: a ``gemma3`` projector gets Gemma 3's
layout and end strings, a ``qwen2vl_merger`` one ChatML, and so on (:data:`PROJECTOR_FAMILIES`); a
projector of no known family gets the plain ``USER:``/``ASSISTANT:`` layout.
"""

from __future__ import annotations

from typing import Any

from .families import (GLM41VChatHandler, Gemma3ChatHandler, Gemma4ChatHandler, LFM2VLChatHandler,
                       Llava15ChatHandler, MiniCPMv26ChatHandler, MiniCPMV46ChatHandler, PaddleOCRChatHandler,
                       Qwen25VLChatHandler, Qwen3VLChatHandler, Step3VLChatHandler)
from .handler import MTMDChatHandler

#: ``clip.projector_type`` -> the family whose layout a model without a template gets
PROJECTOR_FAMILIES: dict[str, type[MTMDChatHandler]] = {
    "mlp": Llava15ChatHandler, "ldp": Llava15ChatHandler, "ldpv2": Llava15ChatHandler,
    "resampler": MiniCPMv26ChatHandler, "minicpmv4_6": MiniCPMV46ChatHandler,
    "qwen2vl_merger": Qwen25VLChatHandler, "qwen2.5vl_merger": Qwen25VLChatHandler,
    "qwen2a": Qwen25VLChatHandler, "qwen2.5o": Qwen25VLChatHandler, "qwen3a": Qwen25VLChatHandler,
    "qwen3vl_merger": Qwen3VLChatHandler, "step3vl": Step3VLChatHandler,
    "gemma3": Gemma3ChatHandler, "gemma4v": Gemma4ChatHandler, "gemma4a": Gemma4ChatHandler,
    "gemma4uv": Gemma4ChatHandler, "gemma4ua": Gemma4ChatHandler,
    "lfm2": LFM2VLChatHandler, "paddleocr": PaddleOCRChatHandler, "glm4v": GLM41VChatHandler,
}


class GenericMTMDChatHandler(MTMDChatHandler):
    """The handler ``Llama(model, mmproj_path=...)`` makes: the model's own chat template.

    Template resolution: ``chat_format`` (an explicit Jinja template), else the GGUF's template named
    ``chat_template_name``, else its default ``tokenizer.chat_template``, else the layout of the family
    the projector belongs to (:data:`PROJECTOR_FAMILIES`), else the generic ``USER:``/``ASSISTANT:`` one.
    The family's end strings are added to a request's ``stop`` whichever template renders.
    """

    prefers_model_template = True

    def __init__(self, chat_format: str | None = None, mmproj_path: str | None = None, verbose: bool = True,
                 chat_template_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(mmproj_path=mmproj_path, verbose=verbose, **kwargs)
        if chat_format is not None and not isinstance(chat_format, str):
            raise ValueError(f"chat_format must be a Jinja template string, got {type(chat_format).__name__}")
        self.chat_format = chat_format
        self.chat_template_name = chat_template_name
        self.family = PROJECTOR_FAMILIES.get(self.projector.projector_type)
        if self.family is not None:
            self.STOP = self.family.STOP

    def template_for(self, llama: Any) -> str:
        if self.chat_template_override is not None:
            return self.chat_template_override
        if self.chat_format is not None:
            return self.chat_format
        if self.chat_template_name is not None and self.chat_template_name != "default":
            key = f"tokenizer.chat_template.{self.chat_template_name}"
            if key not in llama.metadata:
                names = sorted(k.rsplit(".", 1)[-1] for k in llama.metadata if k.startswith("tokenizer.chat_template."))
                if "tokenizer.chat_template" in llama.metadata:
                    names.insert(0, "default")
                raise ValueError(f"chat_template_name={self.chat_template_name!r}: the model has no such template; "
                                 f"it has: {', '.join(names) or 'none'}")
            return llama.metadata[key]
        own = llama.metadata.get("tokenizer.chat_template")
        if own:
            return own
        return self.family.CHAT_FORMAT if self.family is not None else self.CHAT_FORMAT
