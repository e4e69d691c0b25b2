"""The named, typed records that plugins return from the registration hooks.

A record is what the registry stores and what users choose by name
(``chat_format="chatml"``, ``speculative={"engine": "ngram-k"}``...).  The
core owns these contracts; plugins only fill them in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import attrs

if TYPE_CHECKING:  # the contracts the factories build (their modules import this one at run time)
    from ..engine.policy import Policy
    from ..llama_cache import PromptCache
    from ..llama_chat_format import LlamaChatCompletionHandler
    from ..llama_speculative import LlamaSpecEngine
    from ..reasoning import TemplateFacts
    from ..sampling import ChainContext, SamplingParams


def _valid_name(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a non-empty name, got {value!r}")


@attrs.frozen
class SamplerStage:
    """One stage of the native sampler chain.

    ``build(ctx)`` returns the native ``llama_sampler *`` objects to append
    (the chain takes ownership), or an empty list when the stage is inactive
    for these parameters (``top_k <= 0``...).  ``order`` places the stage in
    the default chain (lower runs first); ``default=False`` stages run only
    when a call names them in ``extra_samplers`` (or lists them in
    ``samplers``).  ``final`` stages select the token: exactly one runs, the
    first whose ``build`` returns samplers.

    ``keeps_top(params)``, for a stage whose samplers keep the n highest
    logits and drop every other token (a top-k), is that n.  A chain that
    begins with such a stage (after at most the logit bias) is handed only
    the tokens that can be among the n best instead of the whole vocabulary:
    it chooses the same token, for a fraction of the cost of a candidate
    array of the vocabulary per token.
    """

    name: str = attrs.field(validator=_valid_name)
    build: Callable[[ChainContext], Iterable[Any]]  # native llama_sampler * objects (cffi pointers)
    order: float = 0.0
    default: bool = True
    final: bool = False
    description: str = ""
    keeps_top: Callable[[SamplingParams], int] | None = None


@attrs.frozen
class ChatFormat:
    """A chat format: ``handler`` is called like llama-cpp-python's chat handlers."""

    name: str = attrs.field(validator=_valid_name)
    handler: Callable[..., Any]
    description: str = ""


@attrs.frozen
class MultimodalHandler:
    """A multimodal chat handler class (``chat_handler=...``) chosen by name: ``factory(clip_model_path=...,
    **options)`` returns a chat handler (llama-cpp-python's handler protocol)."""

    name: str = attrs.field(validator=_valid_name)
    factory: Callable[..., LlamaChatCompletionHandler]
    description: str = ""


@attrs.frozen
class SpeculativeEngine:
    """A speculative decoding engine: ``factory(**options)`` returns a
    :class:`llama_cpp.llama_speculative.LlamaSpecEngine`."""

    name: str = attrs.field(validator=_valid_name)
    factory: Callable[..., LlamaSpecEngine]
    description: str = ""


@attrs.frozen
class CacheStrategy:
    """A prompt cache: ``factory(**options)`` returns a cache: the seed's protocol (``in``, ``[]``), and a
    ``lookup`` if it has one (:class:`llama_cpp.llama_cache.BaseLlamaCache`)."""

    name: str = attrs.field(validator=_valid_name)
    factory: Callable[..., PromptCache]
    description: str = ""
    options: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SchedulingPolicy:
    """A scheduling policy: ``factory(**options)`` returns a :class:`llama_cpp.engine.policy.Policy`
    (which waiting request takes a free sequence, which running one is preempted)."""

    name: str = attrs.field(validator=_valid_name)
    factory: Callable[..., Policy]
    description: str = ""


@attrs.frozen
class ReasoningFamily:
    """How one family of reasoning models marks its thinking in a reply, and how to recognise the family.

    A reply of such a model begins with a block of thinking between ``start`` and ``end`` (``<think>`` and
    ``</think>``; gpt-oss's ``<|channel|>analysis<|message|>`` and ``<|end|>``), then its answer, which some
    families introduce with ``content_start`` (gpt-oss's ``<|start|>assistant<|channel|>final<|message|>``,
    dropped from the answer) and some close with ``content_end`` (Cohere2 MoE's ``<|END_TEXT|>``: the
    answer ends there, as llama.cpp's parsers of these formats allow only closing markers after it).
    ``detect(facts)`` says from the model's chat template and vocabulary
    (:class:`llama_cpp.reasoning.TemplateFacts`) whether the model is one of the family; the families are
    asked in ``order`` (lower first) and the first that answers yes splits the model's replies
    (``reasoning_format``, docs/chat.md).  A template that ends its generation prompt with ``start`` opens
    the block itself: the reply then begins inside it.
    """

    name: str = attrs.field(validator=_valid_name)
    start: str = attrs.field(validator=attrs.validators.min_len(1))
    end: str = attrs.field(validator=attrs.validators.min_len(1))
    detect: Callable[[TemplateFacts], bool]
    content_start: str = ""
    content_end: str = ""
    order: float = 0.0
    description: str = ""
    #: the whitespace the template writes after ``start`` / ``end`` (dropped with the marker as far as a reply
    #: repeats it); None: read from the template's source, which shows it unless the marker is a variable
    start_space: str | None = None
    end_space: str | None = None
    #: what a generation prompt that opens the block writes after ``start`` (Apriel 1.6's ``<|begin_assistant|>``
    #: then "Here are my reasoning steps:"): the reply then begins inside the block, and the preamble is
    #: thinking, as llama-server counts it
    start_preamble: str = ""


RECORD_TYPES = (SamplerStage, ChatFormat, MultimodalHandler, SpeculativeEngine, CacheStrategy, SchedulingPolicy,
                ReasoningFamily)
