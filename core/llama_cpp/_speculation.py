"""How ``Llama(speculative=..., draft_model=...)`` becomes a speculative step in the engine.

Three places of the constructor need it: before the model loads (an MTP
engine needs the target's NextN layers), before the context is created (the
outputs of a decode and the recurrent states kept for rollback are sized for
the longest draft), and after (the engine attaches to the context).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from llama_cpp_native import lib

from . import _compose
from .engine.context import Context
from .engine.model import Model
from .engine.speculative import SpeculativeStep
from .llama_speculative import (DraftModelEngine, LlamaSpecEngine, SpecConfig, SpecTarget, SpeculativeType,
                                create_spec_engine, speculative_output_limits)

# recurrent states kept per sequence of a recurrent target: a draft up to this long rolls back natively,
# a longer one from a checkpoint; each state is a copy of the sequence's recurrent state (llama.cpp gives
# its model drafters draft_n_max states, 3 by default)
_RS_STATES = 8


def resolve(speculative: Any, draft_model: Any) -> LlamaSpecEngine | None:
    """The engine the constructor's arguments describe (None: no speculation)."""
    if speculative is not None and draft_model is not None:
        raise ValueError("pass either speculative= or draft_model= (deprecated), not both")
    if draft_model is not None:
        warnings.warn("draft_model= is deprecated: pass speculative=SpecConfig(...) or a LlamaSpecEngine",
                      DeprecationWarning, stacklevel=3)
        if isinstance(draft_model, LlamaSpecEngine):
            return draft_model
        return DraftModelEngine(draft_model)
    if speculative is None:
        return None
    if isinstance(speculative, LlamaSpecEngine):
        return speculative
    if isinstance(speculative, SpecConfig):
        return create_spec_engine(speculative) if speculative.validate().enabled() else None
    if isinstance(speculative, Mapping):
        if "engine" in speculative:
            engine = _compose.resolve("speculative", {**speculative, "engine": _canonical(speculative["engine"])})
        else:
            config = SpecConfig.from_dict(speculative)
            engine = create_spec_engine(config) if config.validate().enabled() else None
        if engine is not None and not isinstance(engine, LlamaSpecEngine):
            raise ValueError(f"speculative={dict(speculative)!r}: the plugin built {engine!r}, "
                             "which is not a LlamaSpecEngine")
        return engine
    raise ValueError(f"speculative= takes a SpecConfig, a LlamaSpecEngine or a dict naming an engine "
                     f"({{'engine': 'ngram-map-k', ...}}), got {type(speculative).__name__}")


def _canonical(name: Any) -> Any:
    """llama.cpp's name of a speculative type given by an alias (``ngram-k``, ``mtp``...); other names as given."""
    try:
        return SpeculativeType.from_str(name).to_str()
    except ValueError:
        return name


def size_context(engine: LlamaSpecEngine, cparams: Any, *, recurrent: bool) -> None:
    """Outputs for ``[last, draft...]`` of every sequence in one decode; recurrent states for rollback."""
    n_draft = engine.max_draft_tokens()
    total, per_seq = speculative_output_limits(cparams.n_batch, cparams.n_seq_max, n_draft)
    if cparams.n_outputs_max != 0:  # 0 already means n_batch
        cparams.n_outputs_max = max(cparams.n_outputs_max, total)
    if cparams.n_outputs_max_per_seq != 0:
        cparams.n_outputs_max_per_seq = max(cparams.n_outputs_max_per_seq, per_seq)
    if recurrent:
        cparams.n_rs_seq = max(cparams.n_rs_seq, min(n_draft, _RS_STATES))


def make_step(engine: LlamaSpecEngine, model: Model, ctx: Context, cparams: Any, *, recurrent: bool,
              verbose: bool) -> SpeculativeStep:
    """Attach ``engine`` to the context and wrap it in the scheduler's step, drafts capped to what fits
    (``cparams``: the parameters the context was created with)."""
    ptr = ctx.ptr
    engine.attach(SpecTarget(
        model=model, ctx=ptr, n_seq=lib.llama_n_seq_max(ptr), n_ctx=lib.llama_n_ctx(ptr),
        n_batch=lib.llama_n_batch(ptr), n_ubatch=lib.llama_n_ubatch(ptr), n_threads=lib.llama_n_threads(ptr),
        n_threads_batch=lib.llama_n_threads_batch(ptr), verbose=verbose))
    per_seq = cparams.n_outputs_max_per_seq or cparams.n_outputs_max  # 0: the next limit up
    cap = min(engine.max_draft_tokens(), lib.llama_n_batch(ptr) - 1)
    if per_seq > 0:
        cap = min(cap, per_seq - 1)
    # a recurrent target rolls back natively within its n_rs_seq states, from a checkpoint beyond
    rollback_states = lib.llama_n_rs_seq(ptr) if recurrent else None
    return SpeculativeStep(engine, max_draft=cap, name=getattr(engine, "name", "") or type(engine).__name__,
                           ctx=ctx, rollback_states=rollback_states, verbose=verbose)
