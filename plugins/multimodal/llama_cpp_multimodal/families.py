"""The model families of the seed's multimodal handlers: their layouts, end strings and options.

Each class is :class:`MTMDChatHandler` with a family's defaults.  A model whose GGUF carries a template
that renders media is rendered with that template (the family's options reach it as template
variables); ``CHAT_FORMAT`` is the family's layout for the files that carry none.  The layouts put the
marker where the family's image placeholder goes; mtmd itself writes the projector's begin/end tokens
around the chunk (``<start_of_image>``, ``<|vision_start|>``...), so templates never spell them.

Options that change the text rather than the template live here in Python: ``add_vision_id`` numbers
pictures (``Picture 1: ``), ``keep_past_thinking``/``preserve_thinking`` keep or drop the reasoning of
earlier replies, ``Qwen3ASRChatHandler`` keeps only the audio of user turns.

The Jinja environment trims the first newline after a block tag (``trim_blocks``), as model templates
expect: a newline the layout needs right after ``{% ... %}`` is written inside an expression instead.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from .handler import MTMDChatHandler
from .media import MediaInput


def _chatml(*, bos: str = "", user_media_first: bool = True, generation: str = "") -> str:
    """A ChatML layout (``<|im_start|>role\\n...<|im_end|>``); ``generation`` follows the assistant header."""
    user = ("{% if m.media %}{{ m.media }}\n{% endif %}{{ m.text }}" if user_media_first else "{{ m.content }}")
    return (
        bos + "{% for m in messages %}"
        "{% if m.role == 'user' %}<|im_start|>user\n" + user + "<|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n" + generation + "{% endif %}"
    )


# the generation prompt of the thinking switches: open a reasoning block, or close an empty one
_THINK_SWITCH = "{% if enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}"

_VICUNA = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}{{ m.content }}\n\n"
    "{% elif m.role == 'user' %}USER: {% if m.media %}{{ m.media }}\n{% endif %}{{ m.text }}\n"
    "{% elif m.role == 'assistant' %}ASSISTANT: {{ m.content }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def _without_reasoning(text: str) -> str:
    """A reply without its reasoning: what follows its last ``</think>``, as the family templates cut it.  A
    reply generated after a prompt that opened ``<think>`` has no ``<think>`` of its own, only the close."""
    return text.rsplit("</think>", 1)[-1].lstrip() if "</think>" in text else text


class _DropsPastThinking(MTMDChatHandler):
    """Families whose earlier replies go back without their reasoning unless asked to keep it (the option
    named ``KEEP_THINKING``, from the constructor or per request), as the family templates do."""

    KEEP_THINKING = "keep_past_thinking"
    keep_past_thinking = False

    def past_replies(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The replies that lose their reasoning: those before the last user message (the replies of a tool
        loop after the last question keep theirs, which the model is still working from)."""
        last_question = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        return [m for m in messages[:last_question] if m.get("role") == "assistant"]

    def prepare(self, messages: list[dict[str, Any]], variables: Mapping[str, Any] | None = None,
                ) -> tuple[list[dict[str, Any]], list[MediaInput]]:
        variables = variables if variables is not None else self.template_variables({})
        prepared, media = super().prepare(messages, variables)
        if not variables.get(self.KEEP_THINKING, getattr(self, self.KEEP_THINKING, False)):
            for reply in self.past_replies(prepared):
                for field in ("content", "text"):
                    if isinstance(reply.get(field), str):
                        reply[field] = _without_reasoning(reply[field])
        return prepared, media


class _NumbersPictures(MTMDChatHandler):
    """Families that can write ``Picture N: `` before each image (``add_vision_id``)."""

    add_vision_id = True

    def media_text(self, item: MediaInput, kinds_seen: Mapping[str, int], variables: Mapping[str, Any]) -> str:
        if variables.get("add_vision_id", self.add_vision_id) and item.kind == "image":
            return f"Picture {kinds_seen.get('image', 0) + 1}: {self.marker}"
        return self.marker


def _options(handler: MTMDChatHandler, **values: Any) -> None:
    """Keep each option on the instance and in the template variables (a model's own template reads them,
    and a request's ``chat_template_kwargs`` override them)."""
    for name, value in values.items():
        setattr(handler, name, value)
        handler.extra_template_arguments.setdefault(name, value)


class _ThinkingSwitch(MTMDChatHandler):
    """Families with ``enable_thinking`` (on by default): a template variable their layouts read."""

    def __init__(self, *args: Any, enable_thinking: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _options(self, enable_thinking=bool(enable_thinking))


class Llava15ChatHandler(MTMDChatHandler):
    """LLaVA 1.5 (Vicuna layout): ``USER: <image>\\n{text}\\nASSISTANT:``."""

    CHAT_FORMAT = _VICUNA
    prefers_model_template = True


class ObsidianChatHandler(MTMDChatHandler):
    """Obsidian (ChatML with ``###`` separators), image first in the user turn."""

    CHAT_FORMAT = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'user' and m.media %}{{ m.media }}\n{% endif %}"
        "{{ m.text if m.role == 'user' else m.content }}\n###\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    STOP = ("###",)
    prefers_model_template = True


class Llava16ChatHandler(Llava15ChatHandler):
    """LLaVA 1.6 (the Vicuna layout of 1.5; mtmd tiles the image for it)."""


class MoondreamChatHandler(MTMDChatHandler):
    """Moondream 2: ``<image>\\n\\nQuestion: {text}\\n\\nAnswer:``."""

    CHAT_FORMAT = (
        "{% for m in messages %}"
        "{% if m.role == 'user' %}{% if m.media %}{{ m.media }}\n\n{% endif %}Question: {{ m.text }}\n\n"
        "{% elif m.role == 'assistant' %}Answer: {{ m.content }}\n\n"
        "{% elif m.role == 'system' %}{{ m.content }}\n\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}Answer:{% endif %}"
    )
    STOP = ("<END>", "\n\nQuestion:")
    prefers_model_template = True


class NanoLlavaChatHandler(MTMDChatHandler):
    """nanoLLaVA (ChatML, image first)."""

    CHAT_FORMAT = _chatml()
    STOP = ("<|im_end|>",)
    prefers_model_template = True


class Llama3VisionAlphaChatHandler(MTMDChatHandler):
    """llama-3-vision-alpha (the Llama 3 headers, image first)."""

    CHAT_FORMAT = (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{% if m.role == 'user' %}{% if m.media %}{{ m.media }}\n{% endif %}{{ m.text }}"
        "{% else %}{{ m.content }}{% endif %}<|eot_id|>"
        "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    )
    STOP = ("<|eot_id|>",)
    prefers_model_template = True


class MiniCPMv26ChatHandler(MTMDChatHandler):
    """MiniCPM-V 2.6 and 4.0 (ChatML, images first; mtmd writes ``<image>``/``<slice>`` around them)."""

    CHAT_FORMAT = _chatml()
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True


class MiniCPMv45ChatHandler(_ThinkingSwitch, _DropsPastThinking):
    """MiniCPM-V 4.5: ``enable_thinking`` opens a reasoning block (or closes an empty one)."""

    CHAT_FORMAT = _chatml(generation=_THINK_SWITCH)
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True


class MiniCPMV46ChatHandler(MiniCPMv45ChatHandler):
    """MiniCPM-V 4.6 (the 4.5 layout and switch)."""


class Gemma3ChatHandler(MTMDChatHandler):
    """Gemma 3: ``<start_of_turn>user ... <end_of_turn>``; the system message opens the first user turn."""

    CHAT_FORMAT = (
        "{{ bos_token }}{% set ns = namespace(system='') %}"
        "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = ns.system + m.content + '\n\n' %}"
        "{% else %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
        "{% if m.role == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}"
        "{{ m.content | trim }}<end_of_turn>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    )
    STOP = ("<end_of_turn>", "<eos>")
    prefers_model_template = True


class Gemma4ChatHandler(_ThinkingSwitch):
    """Gemma 4 (``<|turn>role ... <turn|>``), images and audio.  ``enable_thinking`` puts ``<|think|>`` at the
    top of the system turn; off, the reply starts after an empty thought channel, as the template of the
    models that reason (31B, 26B-A4B) writes it."""

    CHAT_FORMAT = (
        "{{ bos_token }}{% set ns = namespace(system='') %}"
        "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = ns.system + m.content %}{% endif %}"
        "{% endfor %}"
        "{% if enable_thinking or ns.system %}<|turn>system\n{% if enable_thinking %}<|think|>\n{% endif %}"
        "{{ ns.system | trim }}<turn|>\n{% endif %}"
        "{% for m in messages %}{% if m.role != 'system' %}"
        "<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n{{ m.content | trim }}<turn|>\n"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|turn>model\n{% if not enable_thinking %}<|channel>thought\n<channel|>"
        "{% endif %}{% endif %}"
    )
    STOP = ("<eos>", "<turn|>", "<|tool_response>")
    prefers_model_template = True


class GLM41VChatHandler(_DropsPastThinking):
    """GLM-4.1V-Thinking: ``[gMASK]<sop><|user|>\\n...<|assistant|>\\n`` and a reasoning block.  With
    ``enable_thinking`` false (4.6V's switch, or a template variable) each user turn ends with ``/nothink``
    and the reply starts after an empty reasoning block, as GLM's templates write it."""

    CHAT_FORMAT = (
        "[gMASK]<sop>{% set nothink = enable_thinking is defined and not enable_thinking %}"
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}"
        "{% if nothink and m.role == 'user' and not m.content.endswith('/nothink') %}/nothink{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% if nothink %}<think></think>\n{% endif %}"
        "{% endif %}"
    )
    STOP = ("<|user|>", "<|endoftext|>", "<|observation|>")
    prefers_model_template = True


class GLM46VChatHandler(_ThinkingSwitch, GLM41VChatHandler):
    """GLM-4.6V: the 4.1V layout with ``enable_thinking`` (off: ``/nothink`` and an empty reasoning block)."""


class GraniteDoclingChatHandler(MTMDChatHandler):
    """Granite Docling (``<|start_of_role|>`` turns); ``controls`` go as JSON on the assistant's role."""

    CHAT_FORMAT = (
        "{% for m in messages %}<|start_of_role|>{{ m.role }}<|end_of_role|>"
        "{% if m.role == 'user' %}{{ m.media }}{{ m.text }}{% else %}{{ m.content }}{% endif %}<|end_of_text|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant"
        "{% if controls %} {{ controls | tojson }}{% endif %}<|end_of_role|>{% endif %}"
    )
    STOP = ("<|end_of_text|>",)
    prefers_model_template = True

    def __init__(self, *args: Any, controls: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if controls is not None and not isinstance(controls, dict):
            raise ValueError(f"controls must be a dict, got {type(controls).__name__}")
        _options(self, controls=dict(controls or {}))


class LFM2VLChatHandler(MTMDChatHandler):
    """LFM2-VL (ChatML after ``<|startoftext|>``); ``image_min_tokens``/``image_max_tokens`` (64/256 are
    the recommended values) bound the tokens of an image."""

    CHAT_FORMAT = _chatml(bos="<|startoftext|>", user_media_first=False)
    STOP = ("<|im_end|>",)
    prefers_model_template = True


class LFM25VLChatHandler(LFM2VLChatHandler, _DropsPastThinking):
    """LFM2.5-VL: the LFM2-VL layout; earlier replies lose their reasoning unless ``keep_past_thinking``.
    An ``image_min_tokens`` above 256 is more than the projector's tiles allow: it falls back to -1."""

    def __init__(self, *args: Any, keep_past_thinking: bool = False, **kwargs: Any) -> None:
        minimum = kwargs.get("image_min_tokens", -1)
        if isinstance(minimum, int) and minimum > 256:  # a non-integer is the base class's ValueError
            warnings.warn(f"LFM2.5-VL: image_min_tokens={kwargs['image_min_tokens']} is above 256; using the "
                          "projector's default (-1)", UserWarning, stacklevel=2)
            kwargs["image_min_tokens"] = -1
        super().__init__(*args, **kwargs)
        _options(self, keep_past_thinking=bool(keep_past_thinking))

    def past_replies(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every reply but the latest: LFM2.5's template keeps the reasoning of the last assistant message."""
        return [m for m in messages if m.get("role") == "assistant"][:-1]


class PaddleOCRChatHandler(MTMDChatHandler):
    """PaddleOCR-VL: ``User: <image>{text}\\nAssistant: ``; an earlier reply ends with the EOS ``</s>``."""

    CHAT_FORMAT = (
        "<|begin_of_sentence|>{% for m in messages %}"
        "{% if m.role == 'user' %}User: {{ m.media }}{{ m.text }}\n"
        "{% elif m.role == 'assistant' %}Assistant: {{ m.content }}</s>"
        "{% else %}{{ m.content }}\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}"
    )
    STOP = ("<|end_of_sentence|>", "</s>")
    prefers_model_template = True


class Qwen25VLChatHandler(MTMDChatHandler):
    """Qwen2.5-VL (and MinerU2.5): ChatML, media where the user put them."""

    CHAT_FORMAT = _chatml(user_media_first=False)
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True


class Qwen3ASRChatHandler(MTMDChatHandler):
    """Qwen3-ASR: speech to text.  The system messages are the instructions (the context), in the one system
    turn the model always gets, empty without them; a user turn is its audio only (its text is not read, as
    the model expects); images are refused."""

    CHAT_FORMAT = (
        "{% set ns = namespace(system='') %}"
        "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = ns.system + m.content %}{% endif %}"
        "{% endfor %}<|im_start|>system\n{{ ns.system }}<|im_end|>\n"
        "{% for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True

    def message_fields(self, message: Mapping[str, Any], parts: list[str | MediaInput], media: list[MediaInput],
                       kinds_seen: dict[str, int], variables: Mapping[str, Any]) -> dict[str, str]:
        for part in parts:
            if isinstance(part, MediaInput) and part.kind != "audio":
                raise ValueError(f"{type(self).__name__} takes audio only; {part.source} is an {part.kind}")
        if message.get("role") == "user":
            parts = [p for p in parts if not isinstance(p, str)]
        return super().message_fields(message, parts, media, kinds_seen, variables)


class Qwen3VLChatHandler(_NumbersPictures):
    """Qwen3-VL: ChatML; ``add_vision_id`` writes ``Picture N: `` before images; ``force_reasoning`` opens a
    reasoning block (the Thinking models)."""

    CHAT_FORMAT = _chatml(user_media_first=False, generation="{% if force_reasoning %}<think>\n{% endif %}")
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True

    def __init__(self, *args: Any, force_reasoning: bool = False, add_vision_id: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _options(self, force_reasoning=bool(force_reasoning), add_vision_id=bool(add_vision_id))


class Qwen35ChatHandler(_ThinkingSwitch, _NumbersPictures, _DropsPastThinking):
    """Qwen3.5 and 3.6: ChatML; ``enable_thinking`` (reasoning block or an empty one), ``add_vision_id``,
    ``preserve_thinking`` (earlier replies keep their reasoning)."""

    CHAT_FORMAT = _chatml(user_media_first=False, generation=_THINK_SWITCH)
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True

    KEEP_THINKING = "preserve_thinking"

    def __init__(self, *args: Any, add_vision_id: bool = True, preserve_thinking: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _options(self, add_vision_id=bool(add_vision_id), preserve_thinking=bool(preserve_thinking))


class Step3VLChatHandler(_ThinkingSwitch, _DropsPastThinking):
    """Step3-VL-10B: ChatML (its decoder is Qwen3-8B; ``<|BOT|>``/``<|EOT|>`` are the 321B Step3's, not in
    this vocabulary), media where the user put them; ``enable_thinking`` opens a reasoning block (off: an
    empty one is written), as its template does."""

    CHAT_FORMAT = _chatml(user_media_first=False,
                          generation="{% if enable_thinking %}<think>{% else %}<think>\n\n</think>\n{% endif %}")
    STOP = ("<|im_end|>", "<|endoftext|>")
    prefers_model_template = True


# the seed's other spellings
NanollavaChatHandler = NanoLlavaChatHandler
Llama3VisionAlpha = Llama3VisionAlphaChatHandler
MiniCPMv46ChatHandler = MiniCPMV46ChatHandler

#: chat_format name -> handler class (the seed README's names; ``Llama(mmproj_path=..., chat_format=name)``)
FAMILIES: dict[str, type[MTMDChatHandler]] = {
    "llava-1-5": Llava15ChatHandler,
    "obsidian": ObsidianChatHandler,
    "llava-1-6": Llava16ChatHandler,
    "moondream2": MoondreamChatHandler,
    "moondream": MoondreamChatHandler,
    "nanollava": NanoLlavaChatHandler,
    "llama-3-vision-alpha": Llama3VisionAlphaChatHandler,
    "minicpm-v-2.6": MiniCPMv26ChatHandler,
    "minicpm-v-4.0": MiniCPMv26ChatHandler,
    "minicpm-v-4.5": MiniCPMv45ChatHandler,
    "minicpm-v-4.6": MiniCPMV46ChatHandler,
    "gemma3": Gemma3ChatHandler,
    "gemma4": Gemma4ChatHandler,
    "glm4.1v": GLM41VChatHandler,
    "glm4.6v": GLM46VChatHandler,
    "granite-docling": GraniteDoclingChatHandler,
    "lfm2-vl": LFM2VLChatHandler,
    "lfm2.5-vl": LFM25VLChatHandler,
    "paddleocr": PaddleOCRChatHandler,
    "qwen2.5-vl": Qwen25VLChatHandler,
    "qwen3-asr": Qwen3ASRChatHandler,
    "qwen3-vl": Qwen3VLChatHandler,
    "qwen3.5": Qwen35ChatHandler,
    "qwen3.6": Qwen35ChatHandler,
    "step3-vl": Step3VLChatHandler,
}

__all__ = sorted({cls.__name__ for cls in FAMILIES.values()}
                 | {"NanollavaChatHandler", "Llama3VisionAlpha", "MiniCPMv46ChatHandler"})
