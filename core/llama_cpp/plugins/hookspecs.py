"""The hooks a ``llama_cpp`` plugin implements.

A plugin is a module (or object) with functions decorated by
``llama_cpp.hookimpl``, exposed through an entry point in the ``llama_cpp``
group::

    # pyproject.toml of a plugin distribution
    [project.entry-points.llama_cpp]
    my_plugin = "my_plugin"

Registration hooks return records (:mod:`llama_cpp.plugins.records`); the
registry collects them, rejects duplicate names, and lets users choose one by
name.  Every hook below is optional.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pluggy

from .records import (CacheStrategy, ChatFormat, MultimodalHandler, ReasoningFamily, SamplerStage, SchedulingPolicy,
                      SpeculativeEngine)

PROJECT = "llama_cpp"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def llama_cpp_sampler_stages() -> Iterable[SamplerStage]:
    """Stages of the native sampler chain.

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_sampler_stages():
            def build(ctx):
                k = ctx.params.extra.get("my_top_k", 5)
                return [ctx.lib.llama_sampler_init_top_k(k)]
            return [SamplerStage(name="my_top_k", build=build, order=35, default=False)]
    """


@hookspec
def llama_cpp_chat_formats() -> Iterable[ChatFormat]:
    """Chat formats, chosen with ``Llama(chat_format=name)``.

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_chat_formats():
            return [ChatFormat(name="my-format", handler=my_handler)]
    """


@hookspec(firstresult=True)
def llama_cpp_chat_format_from_metadata(metadata: Mapping[str, str]) -> str | None:
    """Claim a chat format for a model from its GGUF metadata (first answer wins).

    How a plugin for a new model family makes ``Llama(model_path)`` pick its
    format without the user naming it.

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_chat_format_from_metadata(metadata):
            if metadata.get("general.architecture") == "my-arch":
                return "my-format"
            return None
    """


@hookspec
def llama_cpp_multimodal_handlers() -> Iterable[MultimodalHandler]:
    """Multimodal chat handlers, by name (``Llama(mmproj_path=..., chat_format=name)``).

    ``factory(mmproj_path=..., verbose=..., **chat_handler_kwargs)`` returns
    a chat handler.  It renders the conversation and completes a
    :class:`llama_cpp.engine.media.MediaPrompt`: text tokens and media chunks
    (:class:`~llama_cpp.engine.media.MediaChunk`: ``n_pos`` positions, a key,
    and ``evaluate``, called when the sequence's prefill reaches the chunk;
    docs/engine.md).  ``close()`` frees what it holds; ``release(llama)``, if
    it has one, is called by ``Llama.close()`` for a handler it did not make.
    The multimodal plugin's ``MTMDChatHandler`` is the base to subclass
    (docs/multimodal.md).

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_multimodal_handlers():
            return [MultimodalHandler(name="my-vlm", factory=MyVLMChatHandler)]
    """


@hookspec
def llama_cpp_speculative_engines() -> Iterable[SpeculativeEngine]:
    """Speculative decoding engines, chosen with ``Llama(speculative={"engine": name, **options})``.

    The factory is called with the options and returns a
    :class:`llama_cpp.llama_speculative.LlamaSpecEngine`: per sequence it
    is told ``begin`` (a request starts), asked to ``draft`` tokens after the
    last one, told how many were ``accept``-ed and when the sequence's memory
    is cut back (``rollback``).  The engine verifies every draft with the
    sequence's own sampler in the tick's one decode, so any engine is
    lossless (docs/speculative.md).

    Example::

        class EchoEngine(LlamaSpecEngine):
            def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):
                return np.asarray([id_last] * n_max, dtype=np.intc)  # "the last token again"

        @llama_cpp.hookimpl
        def llama_cpp_speculative_engines():
            return [SpeculativeEngine(name="echo", factory=EchoEngine)]
    """


@hookspec
def llama_cpp_cache_strategies() -> Iterable[CacheStrategy]:
    """Prompt cache strategies, chosen with ``Llama(cache={"strategy": name})``.

    A cache stores and restores one sequence at a time
    (:class:`llama_cpp.engine.SequenceSnapshot`: its tokens, adapters and
    llama.cpp's state of that sequence), so one cache serves every sequence
    of the engine (docs/engine.md).

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_cache_strategies():
            return [CacheStrategy(name="my-cache", factory=MyCache)]
    """


@hookspec
def llama_cpp_scheduling_policies() -> Iterable[SchedulingPolicy]:
    """Scheduling policies, chosen with ``Llama(scheduling={"policy": name, **options})``.

    The factory is called with the options and returns a
    :class:`llama_cpp.engine.policy.Policy`: whenever admission is due it
    ``select``-s the waiting ticket that takes a free sequence, and when none
    is free it may name a running ticket to ``preempt`` (the engine snapshots
    that sequence and resumes it later, unchanged; docs/scheduling.md).

    Example::

        class ShortestPromptFirst(Policy):
            name = "shortest-prompt-first"

            def select(self, waiting, running):
                return min(waiting, key=lambda t: (t.n_prompt, t.arrival))

        @llama_cpp.hookimpl
        def llama_cpp_scheduling_policies():
            return [SchedulingPolicy(name="shortest-prompt-first", factory=ShortestPromptFirst)]
    """


@hookspec
def llama_cpp_reasoning_families() -> Iterable[ReasoningFamily]:
    """Families of reasoning models: the markers of their thinking, and how to recognise a model of theirs.

    ``create_chat_completion(reasoning_format="auto")`` (and the server's ``reasoning_format``) asks every
    family, in ``order``, whether the model is theirs (``detect`` gets the chat template and a vocabulary
    lookup, :class:`llama_cpp.reasoning.TemplateFacts`); the first that is splits the thinking of each reply
    into ``message.reasoning_content`` (``delta.reasoning_content`` when streamed).  How a plugin teaches the
    library a new model family's thinking markers.

    Example::

        @llama_cpp.hookimpl
        def llama_cpp_reasoning_families():
            return [ReasoningFamily(name="my-family", start="<reason>", end="</reason>",
                                    detect=lambda facts: "<reason>" in facts.template)]
    """
