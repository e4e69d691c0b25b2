"""Reasoning content: which ``reasoning_format`` a chat asks for, and which family's markers the model uses.

Reasoning models (DeepSeek-R1 distills, Qwen3, gpt-oss, Gemma 4, Magistral) begin a reply with their
thinking between markers.  OpenAI-style clients show it apart when it comes as ``reasoning_content``, as
llama-server, vLLM and Ollama send it.  ``reasoning_format`` takes llama-server's names:

* ``none``: nothing is split, the thinking stays in ``content`` with its markers;
* ``deepseek``, ``auto``: the first reasoning block goes to ``reasoning_content``, without its markers;
* ``deepseek-legacy``: the same at the pinned llama.cpp (its server sets ``reasoning_in_content`` for a
  stream but no parser reads it any more), so the same here.

The markers come from the reasoning families the plugins register
(:class:`llama_cpp.plugins.ReasoningFamily`, hook ``llama_cpp_reasoning_families``): each family is asked,
with the model's chat template and a vocabulary lookup (:class:`TemplateFacts`), whether the model is
theirs.  The core knows no family; the built-in ones are the reasoning plugin's.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

import attrs

from .reasoning_split import Markers, partial_tail

if TYPE_CHECKING:
    from .plugins.records import ReasoningFamily

REASONING_FORMATS = ("none", "deepseek", "deepseek-legacy", "auto")


# the template variables a chat request sets from its own fields, which chat_template_kwargs cannot set
REQUEST_VARIABLES = ("messages", "add_generation_prompt", "tools", "tool_choice", "functions", "function_call")


def template_variables(kwargs: dict[str, Any], reasoning_effort: str | None = None) -> dict[str, Any]:
    """The template's variables as llama-server hands them over, with OpenAI's ``reasoning_effort``
    among them: ``"none"`` turns thinking off (``enable_thinking`` false), any other level is the
    template's ``reasoning_effort`` and ``reasoning_strength`` (gpt-oss's templates read the one, others
    the other).  llama.cpp's ``preserve_reasoning`` switch (true by default in llama-server) becomes
    the names templates read it by: ``preserve_thinking``, and ``clear_thinking``,
    ``truncate_history_thinking``, ``drop_thinking`` (GLM 4.7, Nemotron 3, LFM2.5 keep or drop the
    thinking of earlier turns by them).  A name the caller set itself is kept."""
    if reasoning_effort is not None and not isinstance(reasoning_effort, str):
        raise ValueError(f"reasoning_effort must be a string, got {reasoning_effort!r}")
    for name in kwargs:
        if name in REQUEST_VARIABLES:
            raise ValueError(f"chat_template_kwargs: {name!r} is the request's own ({', '.join(REQUEST_VARIABLES)} "
                             "come from its fields), not a template variable to set")
    out = dict(kwargs)
    if reasoning_effort == "none":
        out["enable_thinking"] = False
        out.pop("reasoning_effort", None)
    elif reasoning_effort:
        out["reasoning_effort"] = reasoning_effort
    effort = out.get("reasoning_effort")
    if isinstance(effort, str) and effort:
        out.setdefault("reasoning_strength", effort)
    preserve = out.get("preserve_reasoning")
    if isinstance(preserve, bool):
        out.setdefault("preserve_thinking", preserve)
        for name in ("clear_thinking", "truncate_history_thinking", "drop_thinking"):
            out.setdefault(name, not preserve)
    return out


def check_reasoning_format(value: object, name: str = "reasoning_format") -> str:
    """``value`` if it is one of llama-server's reasoning formats; a ValueError naming them otherwise."""
    if not isinstance(value, str) or value not in REASONING_FORMATS:
        allowed = ", ".join(repr(f) for f in REASONING_FORMATS)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


@attrs.frozen
class TemplateFacts:
    """What a family's ``detect`` is told about a model: its chat template's source (``""`` without one)
    and ``is_token(text)``, whether ``text`` is one token of its vocabulary (a special token such as
    ``<think>`` or ``[THINK]``, which a model trained on the markers has)."""

    template: str
    is_token: Callable[[str], bool] = attrs.field(default=lambda text: False, repr=False)

    def mentions(self, *texts: str) -> bool:
        """Whether the template's source contains every one of ``texts``."""
        return all(text in self.template for text in texts)


def template_facts(llama: Any, template: str | None = None) -> TemplateFacts:
    """The facts of ``llama``'s model: ``template`` (default: its GGUF ``tokenizer.chat_template``) and a
    lookup that tokenizes a text with special tokens parsed and asks whether it came out as one token."""
    if template is None:
        template = str(llama.metadata.get("tokenizer.chat_template") or "")

    def is_token(text: str) -> bool:
        try:
            return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) == 1
        except Exception:  # noqa: BLE001 - a vocabulary that cannot tokenize the text does not hold it
            return False

    return TemplateFacts(template=template, is_token=is_token)


def families() -> list[ReasoningFamily]:
    """Every registered reasoning family, in the order they are asked (``order``, then name)."""
    from .plugins import get_host
    from .plugins.records import ReasoningFamily

    return sorted(get_host().records(ReasoningFamily).values(), key=lambda f: (f.order, f.name))


def detect_family(facts: TemplateFacts) -> ReasoningFamily | None:
    """The first family whose ``detect`` claims a model with these facts; None if none does."""
    for family in families():
        if family.detect(facts):
            return family
    return None


_detected: weakref.WeakKeyDictionary[Any, dict[str, ReasoningFamily | None]] = weakref.WeakKeyDictionary()


def model_family(llama: Any, template: str | None = None) -> ReasoningFamily | None:
    """:func:`detect_family` for ``llama``'s model (and ``template``, default its own), asked once per model
    and template: the answer depends on nothing else."""
    facts = template_facts(llama, template)
    per_model = _detected.setdefault(llama, {})
    if facts.template not in per_model:
        per_model[facts.template] = detect_family(facts)
    return per_model[facts.template]


def opens_in_prompt(prompt: str, family: ReasoningFamily, continued: str = "") -> bool:
    """Whether a rendered prompt ends inside an opened block (the template wrote ``start`` last, or ``start``
    and the family's ``start_preamble``: Qwen3's and DeepSeek-R1's thinking templates, Apriel 1.6's; or a
    continued message's thinking, ``continued``, follows it), so that the reply begins with thinking and no
    ``start``."""
    if continued and prompt.endswith(continued):
        prompt = prompt[:-len(continued)]
    prompt = prompt.rstrip()
    preamble = family.start_preamble.strip()
    if preamble and prompt.endswith(preamble):
        prompt = prompt[:-len(preamble)].rstrip()
    return prompt.endswith(family.start.strip())


_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r"}


def space_after(template: str, marker: str) -> str:
    """The most whitespace the template writes right after ``marker`` (a Jinja string's ``\\n`` escapes
    read as the newlines they render): what a reply may repeat after the marker, dropped with it."""
    best, at = "", template.find(marker)
    while at >= 0:
        i, space = at + len(marker), []
        while i < len(template):
            if template[i] in " \t\r\n":
                space.append(template[i])
                i += 1
            elif template[i:i + 2] in _ESCAPES:
                space.append(_ESCAPES[template[i:i + 2]])
                i += 2
            else:
                break
        if len(space) > len(best):
            best = "".join(space)
        at = template.find(marker, at + 1)
    return best


def _trailing_space(marker: str) -> str:
    return marker[len(marker.rstrip()):]


def markers_for(family: ReasoningFamily, template: str, prompt: str | None, continued: str = "",
                written: tuple[str, str] | None = None) -> Markers:
    """The markers of a reply of ``family``'s model to ``prompt`` (None when the handler cannot show its
    prompt: then the block is taken to open in the reply).  ``continued`` is the thinking of an assistant
    message the prompt continues: where the prompt ends with it inside an opened block, the reply goes on
    thinking (and that thinking, the caller's, is not the reply's).  ``written`` is the template's (start,
    end) as llama.cpp's parser for it knows them, whitespace included (``ChatFormatterResponse
    .thinking_markers``): the whitespace it puts after a marker is dropped with it, and a block the prompt
    opens begins after the start's; without it, the whitespace is read from the template's source."""
    opened = prompt is not None and opens_in_prompt(prompt, family, continued)
    start_space = space_after(template, family.start) if family.start_space is None else family.start_space
    end_space = space_after(template, family.end) if family.end_space is None else family.end_space
    written_start = ""
    if written is not None and written[0].strip() == family.start.strip():
        written_start = start_space = _trailing_space(written[0])
    if written is not None and written[1].strip() == family.end.strip():
        end_space = _trailing_space(written[1])
    opened_with = ""
    if opened and prompt is not None and not (continued and prompt.endswith(continued)):
        opened_with = prompt[prompt.rfind(family.start.strip()) + len(family.start.strip()):]
        opened_with = opened_with[len(written_start):] if opened_with.startswith(written_start) else opened_with
    written_of_answer = partial_tail(prompt or "", family.content_start)  # gpt-oss's prompt ends "<|start|>assistant"
    return Markers(start=family.start, end=family.end, content_start=family.content_start,
                   content_end=family.content_end, leading_content_start=family.content_start[written_of_answer:],
                   start_space=start_space, end_space=end_space, opened=opened, opened_with=opened_with)


__all__ = ["REASONING_FORMATS", "Markers", "TemplateFacts", "check_reasoning_format", "detect_family", "families",
           "markers_for", "model_family", "opens_in_prompt", "space_after", "template_facts", "template_variables"]
