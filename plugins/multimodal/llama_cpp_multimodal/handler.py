"""The multimodal chat handlers: ``MTMDChatHandler`` and ``GenericMTMDChatHandler``.

A handler is called like every chat handler (``handler(llama=..., messages=..., **request)``).  It reads
the media parts of the messages under its :class:`MediaPolicy`, renders the conversation with a chat
template in which each media part is the mtmd context's marker, tokenizes the result with mtmd into a
:class:`~llama_cpp.engine.media.MediaPrompt`, and completes it through the same path as text chats
(``complete_chat``: stop strings, grammars, ``response_format``, tools, streaming, adapters).  The engine
evaluates each media chunk when its sequence's prefill reaches it, and keeps it in the ledger under the
hash of its bytes, so an image sent again in the next turn is not encoded again.

What the seed's handlers did and these do not (docs/multimodal.md): no system message is injected, the
user's ``stop`` is kept (the family's end strings are added to it), the ledger is never reset, media are
keyed by content rather than URL, images reach mtmd as the bytes they were sent as, BOS follows the
vocabulary, a media tag typed by a user is text, and LoRA, control vectors and ``assistant_prefill``
apply.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import Any, Iterator, Mapping

import attrs

from llama_cpp.llama_chat_format import ChatFormatterResponse
from llama_cpp.native import Closing, hub_download
from llama_cpp_chat_formats import Jinja2ChatFormatter, complete_chat, render_chat

from .context import MtmdContext
from .markers import DEFAULT_MARKER, escape_marker, new_marker
from .media import MediaInput, parse_content
from .policy import MediaPolicy
from .projector import read_projector

#: The library trusts the code that calls it (local files allowed, as in the seed's examples); a server
#: facing untrusted users passes ``MediaPolicy()`` or stricter (local files and private networks off).
LIBRARY_POLICY = MediaPolicy(allow_local_files=True)

#: The seed's list of tags that its handlers turned into media markers.  Here they stay text: only the
#: handler's own marker stands for media (a user who types ``<image>`` gets the text ``<image>``).
KNOWN_MEDIA_TAGS = ("<|image_pad|>", "<|audio_pad|>", "<|video_pad|>", "<|image|>", "<|audio|>", "<|video|>",
                    "<image>", "<audio>", "<video>", "[IMG]", "<|media_pad|>", "<|kimi_k25_video_placeholder|>")

# A plain USER:/ASSISTANT: layout for models without a template of their own (DeepSeek-OCR and the like).
GENERIC_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}USER: {{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}ASSISTANT: {{ message['content'] }}{{ eos_token }}\n"
    "{% elif message['role'] == 'tool' %}TOOL: {{ message['content'] }}\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


# a template that mentions media renders media parts; one that does not is a text model's template
_MEDIA_WORDS = re.compile(r"image|audio|vision|media", re.IGNORECASE)


def _escaped(value: Any, marker: str) -> Any:
    """Every string in a message (text, names, tool calls and results) with the marker broken."""
    if isinstance(value, str):
        return escape_marker(value, marker)
    if isinstance(value, Mapping):
        return {k: _escaped(v, marker) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v, marker) for v in value]
    return value


@attrs.frozen(eq=False)
class FamilyFormatter:
    """A family's template (``jinja``) with the family's end strings (``stops``) added to what it renders.
    ``template`` is the template's source, as a ``Jinja2ChatFormatter``'s: what a continued message's turn
    is recognised by (``llama_cpp_chat_formats.continuation``)."""

    jinja: Jinja2ChatFormatter
    stops: tuple[str, ...]

    @property
    def template(self) -> str:
        return self.jinja.template

    def __call__(self, **kwargs: Any) -> ChatFormatterResponse:
        response = self.jinja(**kwargs)
        response.stop = [*(response.stop or []), *(s for s in self.stops if s not in (response.stop or []))]
        return response


class MTMDChatHandler(Closing):
    """A chat handler for a model with a multimodal projector (``mmproj``), over llama.cpp's mtmd.

    Subclasses (the families, :mod:`.families`) set class attributes: ``CHAT_FORMAT`` (the template used
    when the model's own does not render media, or always when ``prefers_model_template`` is False),
    ``STOP`` (end strings added to the user's), ``TEMPLATE_VARIABLES`` (defaults of the template switches,
    ``enable_thinking``...), and may override :meth:`media_text` (what stands for one media part),
    :meth:`message_fields` and :meth:`assistant_text`.

    A template sees each message with ``content`` as one string (media parts replaced by the marker),
    plus ``text`` and ``media``, the same split in two, for layouts that put images before the text.
    """

    CHAT_FORMAT: str = GENERIC_TEMPLATE
    #: the seed's injected system message; kept as a name, never injected (docs/multimodal.md)
    DEFAULT_SYSTEM_MESSAGE: str | None = None
    STOP: tuple[str, ...] = ()
    TEMPLATE_VARIABLES: Mapping[str, Any] = {}
    prefers_model_template = False

    def __init__(self, mmproj_path: str | None = None, verbose: bool = True, use_gpu: bool = True,
                 image_min_tokens: int = -1, image_max_tokens: int = -1, chat_template_override: str | None = None,
                 batch_max_tokens: int = 1024, extra_template_arguments: Mapping[str, Any] | None = None, *,
                 clip_model_path: str | None = None, media_policy: MediaPolicy | None = None,
                 warmup: bool = True) -> None:
        if mmproj_path is None:
            mmproj_path = clip_model_path
        elif clip_model_path is not None and clip_model_path != mmproj_path:
            raise ValueError("mmproj_path and clip_model_path (its deprecated name) name different files")
        if mmproj_path is None:
            raise ValueError(f"{type(self).__name__} needs mmproj_path, the multimodal projector GGUF")
        for name, value in (("image_min_tokens", image_min_tokens), ("image_max_tokens", image_max_tokens),
                            ("batch_max_tokens", batch_max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if image_min_tokens < -1 or image_max_tokens < -1:
            raise ValueError("image_min_tokens and image_max_tokens must be -1 (the projector's default) or more")
        if image_max_tokens != -1 and image_min_tokens != -1 and image_max_tokens < image_min_tokens:
            raise ValueError(f"image_max_tokens ({image_max_tokens}) is below image_min_tokens ({image_min_tokens})")
        if batch_max_tokens < 1:
            raise ValueError(f"batch_max_tokens must be at least 1, got {batch_max_tokens}")
        if media_policy is not None and not isinstance(media_policy, MediaPolicy):
            raise TypeError(f"media_policy must be a MediaPolicy, got {type(media_policy).__name__}")
        self.projector = read_projector(mmproj_path)
        if self.projector.unsupported_reason is not None:  # would abort the process once mtmd encodes with it
            raise ValueError(f"mmproj {str(mmproj_path)!r} is not supported: {self.projector.unsupported_reason}")
        self.mmproj_path = str(mmproj_path)
        self.clip_model_path = self.mmproj_path
        self.verbose = verbose
        self.use_gpu = use_gpu
        self.image_min_tokens = image_min_tokens
        self.image_max_tokens = image_max_tokens
        self.batch_max_tokens = batch_max_tokens
        self.chat_template_override = chat_template_override
        self.extra_template_arguments = dict(extra_template_arguments or {})
        self.media_policy = media_policy or LIBRARY_POLICY
        self.warmup = warmup
        self.marker = new_marker()
        self._contexts: dict[int, MtmdContext] = {}  # by id of the engine Model each one refers to
        self._formatters: weakref.WeakKeyDictionary[Any, dict[str, FamilyFormatter]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._closed = False

    # -- what the seed's handlers offer -----------------------------------------------------------
    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None, local_dir: str | None = None,
                        local_dir_use_symlinks: bool | str = "auto", cache_dir: str | None = None,
                        **kwargs: Any) -> MTMDChatHandler:
        """A handler over the mmproj file of ``repo_id`` matching the glob ``filename``, downloaded from the
        Hugging Face Hub (``pip install huggingface_hub``) as ``Llama.from_pretrained`` does."""
        if not filename:
            raise ValueError("from_pretrained needs the mmproj file's name (a glob such as '*mmproj*.gguf')")
        path = hub_download(repo_id, filename, local_dir=local_dir, local_dir_use_symlinks=local_dir_use_symlinks,
                            cache_dir=cache_dir)[0]
        return cls(mmproj_path=path, **kwargs)

    def is_support_vision(self) -> bool:
        return self.projector.vision

    def is_support_audio(self) -> bool:
        return self.projector.audio

    def is_support_video(self) -> bool:
        """Video is not read by this handler (mtmd's video input needs ffmpeg at run time)."""
        return False

    # -- lifecycle -----------------------------------------------------------------------------------
    def context_for(self, llama: Any) -> MtmdContext:
        """The mtmd context of ``llama``'s model, created on first use (one per model)."""
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        model = llama.scheduler.model
        with self._lock:
            context = self._contexts.get(id(model))
            if context is None or context.closed:
                context = MtmdContext(
                    self.projector, model, n_threads=llama.context_params.n_threads, use_gpu=self.use_gpu,
                    marker=self.marker, image_min_tokens=self.image_min_tokens,
                    image_max_tokens=self.image_max_tokens, batch_max_tokens=self.batch_max_tokens,
                    warmup=self.warmup, verbose=self.verbose)
                self._contexts[id(model)] = context
            return context

    def release(self, llama: Any) -> None:
        """Free the mtmd context made for ``llama``'s model (``Llama.close`` calls this before it frees the
        model; the handler stays usable with other Llama instances)."""
        try:
            model = llama.scheduler.model
        except RuntimeError:  # closed already, or vocab_only: no context was made for it
            return
        with self._lock:
            context = self._contexts.pop(id(model), None)
        if context is not None:
            context.close()

    def close(self) -> None:
        """Free every mtmd context of this handler (idempotent); calls afterwards raise RuntimeError."""
        self._closed = True
        with self._lock:
            contexts, self._contexts = list(self._contexts.values()), {}
        for context in contexts:
            context.close()

    # -- rendering ----------------------------------------------------------------------------------
    def template_for(self, llama: Any) -> str:
        """The Jinja template this handler renders with for ``llama``'s model: ``chat_template_override``,
        else the model's own template where it knows media (a family handler) , else ``CHAT_FORMAT``."""
        if self.chat_template_override is not None:
            return self.chat_template_override
        template = llama.metadata.get("tokenizer.chat_template")
        if self.prefers_model_template and template and _MEDIA_WORDS.search(template):
            return template
        return self.CHAT_FORMAT

    def template_variables(self, request_variables: Mapping[str, Any]) -> dict[str, Any]:
        """The template's extra variables: the family's defaults, the constructor's
        ``extra_template_arguments``, then the request's ``chat_template_kwargs``."""
        return {**self.TEMPLATE_VARIABLES, **self.extra_template_arguments, **request_variables}

    def media_text(self, item: MediaInput, kinds_seen: Mapping[str, int], variables: Mapping[str, Any]) -> str:
        """What stands for one media part in the rendered text: the marker, where mtmd puts the chunk and
        the family's begin/end tokens around it.  ``kinds_seen`` counts the earlier parts of each kind in
        the conversation (``add_vision_id`` numbers pictures with it); ``variables`` are the request's
        template variables (:meth:`template_variables`), where options applied in Python are read too."""
        return self.marker

    def message_fields(self, message: Mapping[str, Any], parts: list[str | MediaInput], media: list[MediaInput],
                       kinds_seen: dict[str, int], variables: Mapping[str, Any]) -> dict[str, str]:
        """The template's view of a message with content parts: ``content`` (text and media in the order
        given), ``text`` (its text parts) and ``media`` (its media parts); each media part is appended to
        ``media`` in the order its marker appears in ``content``, and in ``media`` (a template renders one
        or the other)."""
        content, texts, markers = [], [], []
        for part in parts:
            if isinstance(part, str):
                text = escape_marker(part, self.marker)
                content.append(text)
                texts.append(text)
                continue
            shown = self.media_text(part, kinds_seen, variables)
            kinds_seen[part.kind] = kinds_seen.get(part.kind, 0) + 1
            media.append(part)
            content.append(shown)
            markers.append(shown)
        return {"content": "".join(content), "text": "".join(texts), "media": "".join(markers)}

    def assistant_text(self, text: str) -> str:
        """An assistant reply as the template gets it (unchanged here; the families that drop the reasoning of
        earlier replies do it in ``prepare``, where they see which replies came before the last question)."""
        return text

    def prepare(self, messages: list[dict[str, Any]], variables: Mapping[str, Any] | None = None,
                ) -> tuple[list[dict[str, Any]], list[MediaInput]]:
        """The messages as the template sees them (string contents, markers for media) and the media in
        marker order, under the request's template ``variables``; a part that cannot be read is a
        ValueError naming the message and the part."""
        variables = variables if variables is not None else self.template_variables({})
        if not isinstance(messages, list):
            raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
        prepared: list[dict[str, Any]] = []
        media: list[MediaInput] = []
        kinds_seen: dict[str, int] = {}
        takes = [kind for kind, taken in (("image", self.projector.vision), ("audio", self.projector.audio)) if taken]
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise ValueError(f"messages[{index}] is a {type(message).__name__}, not a message dict")
            content = message.get("content")
            where = f"messages[{index}] ({message.get('role', '?')})"
            try:
                parts = parse_content(content, self.media_policy, takes) if isinstance(content, list) else None
            except ValueError as exc:
                raise type(exc)(f"{where}: {exc}") from exc
            if parts is not None:  # a later error (mtmd cannot decode it) names the message and the part
                parts = [attrs.evolve(p, source=f"{where}: content part {j}, {p.source}")
                         if isinstance(p, MediaInput) else p for j, p in enumerate(parts)]
            fields = {k: _escaped(v, self.marker) for k, v in message.items() if k != "content"}
            if parts is None:
                text = _escaped(content, self.marker)
                fields.update(content=text, text=text if isinstance(text, str) else "", media="")
            else:
                fields.update(self.message_fields(message, parts, media, kinds_seen, variables))
            if fields.get("role") == "assistant" and isinstance(fields.get("content"), str):
                fields["content"] = self.assistant_text(fields["content"])
                fields["text"] = self.assistant_text(fields["text"])
            prepared.append(fields)
        return prepared, media

    def formatter(self, llama: Any) -> FamilyFormatter:
        """The formatter that renders for ``llama``: its template, BOS/EOS text, and the family's stops; made
        once per model and template (the template compiles once, and what is learnt of it stays)."""
        template = self.template_for(llama)
        per_template = self._formatters.setdefault(llama, {})  # two threads making one each is harmless
        formatter = per_template.get(template)
        if formatter is None:
            def text_of(token: int) -> str:
                return llama.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

            jinja = Jinja2ChatFormatter(template, eos_token=text_of(llama.token_eos()),
                                        bos_token=text_of(llama.token_bos()))
            formatter = per_template[template] = FamilyFormatter(jinja, tuple(self.STOP))
        return formatter

    def render(self, llama: Any, messages: list[dict[str, Any]], **variables: Any) -> tuple[str, list[MediaInput]]:
        """The prompt text this handler makes of ``messages`` (markers included) and its media, without
        tokenizing or generating: what the family tests read."""
        merged = self.template_variables(variables)
        conversation, media = self.prepare(messages, merged)
        response = self.formatter(llama)(messages=conversation, add_generation_prompt=True, **merged)
        return response.prompt, media

    def render_chat_prompt(self, *, llama: Any, messages: list[dict[str, Any]],
                           **request: Any) -> ChatFormatterResponse:
        """The core's ``ChatPromptRenderer``: the prompt :meth:`__call__` generates from, each media part
        as mtmd's default marker (``<__media__>``, as llama-server's ``/apply-template`` writes it) rather
        than this handler's private one."""
        variables = self.template_variables(request.get("chat_template_kwargs") or {})
        conversation, _ = self.prepare(messages, variables)
        request = {**request, "chat_template_kwargs": variables}
        request.pop("chat_template_name", None)
        rendered = render_chat(self.formatter(llama), conversation, request)
        rendered.prompt = rendered.prompt.replace(self.marker, DEFAULT_MARKER)
        return rendered

    # -- the chat handler protocol ----------------------------------------------------------------------
    def __call__(self, *, llama: Any, messages: list[dict[str, Any]],
                 **request: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        variables = self.template_variables(request.get("chat_template_kwargs") or {})
        conversation, media = self.prepare(messages, variables)
        context = self.context_for(llama)
        request["chat_template_kwargs"] = variables
        request.pop("chat_template_name", None)

        def to_prompt(text: str, added_special: bool) -> Any:
            return context.prompt(text, media, add_bos=not added_special)

        return complete_chat(llama, self.formatter(llama), conversation, request, to_prompt=to_prompt)

