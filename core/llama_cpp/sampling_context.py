"""llama-cpp-python's sampling objects: ``CommonSamplerType``, ``LlamaSamplingParams``,
``LlamaSamplingContext`` and ``CustomSampler``.

The seed builds its sampler chain through these (in its ``llama_cpp._internals``), and code written
against it drives sampling by hand with them: a context made from ``LlamaSamplingParams`` and a model,
``sample(ctx, idx)`` after each decode, ``accept(token)`` for the token kept.  Here they are a thin
layer over the engine's own parts, so they sample as ``Llama.generate`` does with the same values: the
chain is built from the registered sampler stages (:class:`llama_cpp.sampling.SamplerChain`), and a
``CustomSampler`` is a native ``llama_sampler`` whose callbacks are Python functions.

As in the seed, the grammar is kept out of the chain: ``sample`` applies it first (``grammar_first``)
or checks the chain's pick against it, and ``accept`` may leave it out.
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Callable, Mapping, Sequence

import attrs
import numpy as np
from llama_cpp_native import ffi, lib

from ._handles import as_pointer
from .plugins import SamplerStage, get_host
from .sampling import LLAMA_DEFAULT_SEED, ChainContext, SamplerChain, SamplingParams

__all__ = ["CommonSamplerType", "CustomSampler", "LlamaSamplingContext", "LlamaSamplingParams"]

_NULL_TOKEN = -1  # LLAMA_TOKEN_NULL


class CommonSamplerType(enum.IntEnum):
    """llama.cpp common's sampler kinds (``common_sampler_type``), as the seed numbers them."""

    NONE = 0
    DRY = 1
    TOP_K = 2
    TOP_P = 3
    MIN_P = 4
    TYPICAL_P = 6
    TEMPERATURE = 7
    XTC = 8
    INFILL = 9
    PENALTIES = 10
    TOP_N_SIGMA = 11
    ADAPTIVE_P = 12
    CUSTOM = 99


#: The sampler stage (llama_cpp.plugins.SamplerStage) each kind runs as, in the place ``samplers`` gives it.
_ORDERED_STAGES = {
    CommonSamplerType.TOP_K: "top_k", CommonSamplerType.TOP_P: "top_p", CommonSamplerType.MIN_P: "min_p",
    CommonSamplerType.TYPICAL_P: "typical_p", CommonSamplerType.TEMPERATURE: "temperature",
    CommonSamplerType.XTC: "xtc", CommonSamplerType.TOP_N_SIGMA: "top_n_sigma",
}
#: Kinds that run in a fixed place before those, when ``samplers`` lists them (as in the seed's chain).
_LEADING_STAGES = ((CommonSamplerType.INFILL, "infill"), (CommonSamplerType.PENALTIES, "penalties"),
                   (CommonSamplerType.DRY, "dry"))


def _default_samplers() -> list[CommonSamplerType]:
    T = CommonSamplerType
    return [T.PENALTIES, T.DRY, T.TOP_N_SIGMA, T.TOP_K, T.TYPICAL_P, T.TOP_P, T.MIN_P, T.XTC, T.TEMPERATURE]


@attrs.define
class LlamaSamplingParams:
    """The seed's sampling parameters, under its field names and with its defaults (``temp``,
    ``penalty_repeat``, ``mirostat``...).  Values are checked when a :class:`LlamaSamplingContext` is
    made from them (a ``ValueError`` names the field).

    ``samplers`` orders the filter stages; ``ADAPTIVE_P`` in it makes adaptive-p the final sampler and
    ``CUSTOM`` marks where ``custom_samplers`` run.  ``logit_bias`` takes the seed's
    ``llama_logit_bias`` entries or a ``{token: bias}`` mapping.  ``n_prev`` is how many accepted tokens
    the context remembers (``prev``).  ``n_probs``, ``no_perf``, ``timing_per_token``,
    ``backend_sampling``, ``user_sampling_config``, ``preserved_tokens`` and ``logit_bias_eog`` are kept
    for code that sets them; sampling does not read them (nor did the seed's).
    """

    seed: int = LLAMA_DEFAULT_SEED
    n_prev: int = 64
    n_probs: int = 0
    min_keep: int = 0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    typical_p: float = 1.0
    temp: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    mirostat: int = 0
    top_n_sigma: float = -1.0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    ignore_eos: bool = False
    no_perf: bool = False
    timing_per_token: bool = False
    backend_sampling: bool = False
    user_sampling_config: int = 0
    dry_sequence_breakers: list[str] = attrs.field(factory=lambda: ["\n", ":", '"', "*"])
    reasoning_budget: int = -1
    reasoning_start: str = "<think>"
    reasoning_end: str = "</think>"
    reasoning_budget_message: str | None = None
    reasoning_start_in_prompt: bool = False
    reasoning_start_max_tokens: int | None = 32
    custom_samplers: list[CustomSampler] = attrs.field(factory=list)
    samplers: list[CommonSamplerType] = attrs.field(factory=_default_samplers)
    grammar: str = ""
    grammar_lazy: bool = False
    grammar_triggers: list[Any] = attrs.field(factory=list)
    preserved_tokens: set[int] = attrs.field(factory=set)
    logit_bias: Any = attrs.field(factory=list)
    logit_bias_eog: Any = attrs.field(factory=list)

    @property
    def has_logit_bias(self) -> bool:
        return len(self.logit_bias) > 0

    def print_params(self) -> str:
        """The parameters as llama.cpp's common_params_sampling::print() lists them (the seed's text)."""
        return (
            f"\trepeat_last_n = {self.penalty_last_n}, repeat_penalty = {self.penalty_repeat:.3f}, "
            f"frequency_penalty = {self.penalty_freq:.3f}, present_penalty = {self.penalty_present:.3f}\n"
            f"\tdry_multiplier = {self.dry_multiplier:.3f}, dry_base = {self.dry_base:.3f}, "
            f"dry_allowed_length = {self.dry_allowed_length}, dry_penalty_last_n = {self.dry_penalty_last_n}\n"
            f"\ttop_k = {self.top_k}, top_p = {self.top_p:.3f}, min_p = {self.min_p:.3f}, "
            f"xtc_probability = {self.xtc_probability:.3f}, xtc_threshold = {self.xtc_threshold:.3f}, "
            f"typical_p = {self.typical_p:.3f}, top_n_sigma = {self.top_n_sigma:.3f}, temp = {self.temp:.3f}\n"
            f"\tmirostat = {self.mirostat}, mirostat_lr = {self.mirostat_eta:.3f}, "
            f"mirostat_ent = {self.mirostat_tau:.3f}, adaptive_target = {self.adaptive_target:.3f}, "
            f"adaptive_decay = {self.adaptive_decay:.3f}\n"
            f"\treasoning_budget = {self.reasoning_budget}, "
            f"reasoning_start = {self.reasoning_start!r}, reasoning_end = {self.reasoning_end!r}\n"
            f"\treasoning_budget_message = {self.reasoning_budget_message!r}, "
            f"reasoning_start_in_prompt = {self.reasoning_start_in_prompt}, "
            f"reasoning_start_max_tokens = {self.reasoning_start_max_tokens}"
        )

    def sampling_params(self, stages: Sequence[str | SamplerStage] | None = None) -> SamplingParams:
        """These values as the engine's validated :class:`~llama_cpp.sampling.SamplingParams` (no grammar:
        the context applies it on its own); ``stages`` overrides the filter stages ``samplers`` gives."""
        kinds = [CommonSamplerType(k) for k in self.samplers]
        return SamplingParams(
            temperature=self.temp, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p, typical_p=self.typical_p,
            min_keep=self.min_keep, top_n_sigma=self.top_n_sigma, dynatemp_range=self.dynatemp_range,
            dynatemp_exponent=self.dynatemp_exponent, penalty_last_n=self.penalty_last_n,
            repeat_penalty=self.penalty_repeat, frequency_penalty=self.penalty_freq,
            presence_penalty=self.penalty_present, mirostat_mode=self.mirostat, mirostat_tau=self.mirostat_tau,
            mirostat_eta=self.mirostat_eta, xtc_probability=self.xtc_probability, xtc_threshold=self.xtc_threshold,
            adaptive_target=self.adaptive_target if CommonSamplerType.ADAPTIVE_P in kinds else -1.0,
            adaptive_decay=self.adaptive_decay, dry_multiplier=self.dry_multiplier, dry_base=self.dry_base,
            dry_allowed_length=self.dry_allowed_length, dry_penalty_last_n=self.dry_penalty_last_n,
            dry_seq_breakers=tuple(self.dry_sequence_breakers), logit_bias=_bias_mapping(self.logit_bias) or None,
            ignore_eos=self.ignore_eos, use_infill=CommonSamplerType.INFILL in kinds,
            reasoning_budget=self.reasoning_budget, reasoning_start=self.reasoning_start,
            reasoning_end=self.reasoning_end, reasoning_budget_message=self.reasoning_budget_message,
            reasoning_start_in_prompt=self.reasoning_start_in_prompt,
            reasoning_start_max_tokens=self.reasoning_start_max_tokens, seed=self.seed,
            samplers=self.stage_names() if stages is None else stages,
        )

    def stage_names(self) -> list[str | SamplerStage]:
        """The chain's filter stages in the seed's order: logit bias; infill, penalties and DRY when
        ``samplers`` lists them; the reasoning budget; then the ``samplers`` in their order, with
        ``custom_samplers`` where ``CUSTOM`` stands."""
        kinds = [CommonSamplerType(k) for k in self.samplers]
        if self.custom_samplers and CommonSamplerType.CUSTOM not in kinds:
            raise ValueError("custom_samplers run where CommonSamplerType.CUSTOM stands in samplers, and samplers "
                             "does not list it")
        customs = list(self.custom_samplers)
        custom = SamplerStage("custom", lambda ctx: [c.new_native(ctx.keep) for c in customs])
        names: list[str | SamplerStage] = ["logit_bias"]
        names += [stage for kind, stage in _LEADING_STAGES if kind in kinds]
        names.append("reasoning_budget")
        for kind in kinds:
            if kind in _ORDERED_STAGES:
                names.append(_ORDERED_STAGES[kind])
            elif kind is CommonSamplerType.CUSTOM:
                names.append(custom)
        return names

    def __repr__(self) -> str:
        return self.print_params()


def _bias_mapping(entries: Any) -> dict[int, float]:
    """``{token: bias}`` from a mapping or from the seed's ``llama_logit_bias`` entries (``.token``, ``.bias``)."""
    if isinstance(entries, Mapping):
        return dict(entries)
    out: dict[int, float] = {}
    for entry in entries:
        out[int(entry.token)] = out.get(int(entry.token), 0.0) + float(entry.bias)
    return out


def _model_pointer(model: Any) -> tuple[Any, int | None]:
    """The ``llama_model *`` of a Llama, its ``_model``, the seed's ``LlamaModel`` (``.model``) or a handle,
    and the context size a Llama has (None for the others)."""
    from .engine.model import Model
    from .llama import Llama

    if isinstance(model, Llama):
        return model._live_model().ptr, (model.n_ctx() if model._ctx is not None else None)
    if isinstance(model, Model):
        return model.ptr, None
    return as_pointer(getattr(model, "model", model), "struct llama_model *"), None


def _context_pointer(ctx: Any) -> Any:
    """The ``llama_context *`` of a Llama, its ``_ctx``, the seed's ``LlamaContext`` (``.ctx``) or a handle."""
    from .engine.context import Context
    from .llama import Llama

    if isinstance(ctx, Llama):
        return ctx._settled_ctx()
    if isinstance(ctx, Context):
        return ctx.ptr
    return as_pointer(getattr(ctx, "ctx", ctx), "struct llama_context *")


_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class LlamaSamplingContext:
    """A native sampler chain built from :class:`LlamaSamplingParams` for ``model``, with the grammar beside it.

    ``model`` is a ``Llama``, its ``_model``, the seed's ``LlamaModel`` or a ``llama_model *`` handle.
    ``penalty_last_n=-1`` penalizes over a Llama's context, or the model's trained context for the
    others (a bare model has no context to go by).  The chain is fresh: penalties see only the tokens
    accepted here.
    """

    def __init__(self, params: LlamaSamplingParams | None = None, model: Any = None) -> None:
        if model is None:
            raise RuntimeError("LlamaSamplingContext: model must not be None")
        self.params = params if params is not None else LlamaSamplingParams()
        self.model = model
        self.sampler_chain: SamplerChain | None = None
        self.grammar_sampler: Any = None
        model_ptr, n_ctx = _model_pointer(model)
        self.vocab = lib.llama_model_get_vocab(model_ptr)
        self.n_vocab: int = lib.llama_vocab_n_tokens(self.vocab)
        p = self.params
        sampling = p.sampling_params()
        eog = [t for t in range(self.n_vocab) if lib.llama_vocab_is_eog(self.vocab, t)] if p.ignore_eos else []
        self._chain_ctx = ChainContext(params=sampling, vocab=self.vocab, n_vocab=self.n_vocab,
                                       n_ctx=n_ctx if n_ctx is not None else lib.llama_model_n_ctx_train(model_ptr),
                                       eog_tokens=eog)
        self.sampler_chain = SamplerChain(self._chain_ctx)
        if p.grammar:
            self.grammar_sampler = self._grammar_sampler()
        self.prev: collections.deque[int] = collections.deque(maxlen=max(p.n_prev, p.penalty_last_n, 32))
        self._candidates = ffi.new("llama_token_data[]", self.n_vocab)
        self._view = np.frombuffer(ffi.buffer(self._candidates), dtype=_TOKEN_DATA)
        self._ids = np.arange(self.n_vocab, dtype=np.int32)
        self._cur_p = ffi.new("llama_token_data_array *")
        self._single = ffi.new("llama_token_data[1]")
        self._single_p = ffi.new("llama_token_data_array *", {"data": self._single, "size": 1, "selected": -1})

    def _grammar_sampler(self) -> Any:
        """The grammar as the grammar stage builds it (validated; lazy with ``grammar_triggers``)."""
        from .llama_grammar import LlamaGrammar

        p = self.params
        params = attrs.evolve(self._chain_ctx.params, grammar=LlamaGrammar.from_string(p.grammar),
                              grammar_lazy=p.grammar_lazy, grammar_triggers=tuple(p.grammar_triggers))
        built = list(get_host().choose(SamplerStage, "grammar").build(attrs.evolve(self._chain_ctx, params=params)))
        return built[0]

    # -- sampling ---------------------------------------------------------------------------
    def sample(self, ctx: Any, idx: int = -1, grammar_first: bool = True) -> int:
        """The token the chain picks from output ``idx`` of the last decode on ``ctx`` (a ``Llama``, its
        ``_ctx``, the seed's ``LlamaContext`` or a handle), without accepting it.

        With a grammar, ``grammar_first`` masks what the grammar refuses before the chain runs;
        otherwise the chain's pick is checked against the grammar, and only a refused pick makes the
        chain run again over the tokens the grammar allows.
        """
        chain = self._live_chain()
        ctx_ptr = _context_pointer(ctx)
        lib.llama_synchronize(ctx_ptr)
        sampled = lib.llama_get_sampled_token_ith(ctx_ptr, idx)
        if sampled != _NULL_TOKEN:  # a backend sampler already chose
            if self.grammar_sampler is not None:
                raise RuntimeError("a token sampled on the backend cannot be checked against the grammar")
            return int(sampled)
        logits = lib.llama_get_logits_ith(ctx_ptr, idx)
        if logits == ffi.NULL:
            raise RuntimeError(f"no logits for output {idx} of the last decode")
        row = np.frombuffer(ffi.buffer(logits, 4 * self.n_vocab), dtype=np.float32)
        cur_p = self._fill(row)
        if self.grammar_sampler is not None and grammar_first:
            lib.llama_sampler_apply(self.grammar_sampler, cur_p)
        self._apply(chain, cur_p)
        token = int(self._view["id"][cur_p.selected])
        if self.grammar_sampler is None or grammar_first:
            return token
        if self._grammar_allows(token):
            return token
        cur_p = self._fill(row)
        lib.llama_sampler_apply(self.grammar_sampler, cur_p)
        self._apply(chain, cur_p)
        return int(self._view["id"][cur_p.selected])

    def _fill(self, row: np.ndarray) -> Any:
        view = self._view
        view["id"] = self._ids
        view["logit"] = row
        view["p"] = 0.0
        cur_p = self._cur_p
        cur_p.data, cur_p.size, cur_p.selected, cur_p.sorted = self._candidates, self.n_vocab, -1, False
        return cur_p

    def _apply(self, chain: SamplerChain, cur_p: Any) -> None:
        lib.llama_sampler_apply(chain.ptr, cur_p)
        for custom in self.params.custom_samplers:
            custom.raise_pending()
        chain.raise_stage_error()
        if not 0 <= cur_p.selected < cur_p.size:
            raise RuntimeError("the sampler chain selected no token (a custom sampler must leave one selectable)")

    def _grammar_allows(self, token: int) -> bool:
        single = self._single_p
        self._single[0].id, self._single[0].logit, self._single[0].p = token, 1.0, 0.0
        single.selected, single.sorted = -1, False
        lib.llama_sampler_apply(self.grammar_sampler, single)
        return bool(self._single[0].logit != float("-inf"))

    def accept(self, token: int, accept_grammar: bool = True) -> None:
        """``token`` was kept: the chain (penalties, mirostat...) and, with ``accept_grammar``, the grammar
        move past it; ``prev`` remembers it.  A token the grammar does not allow here is a ValueError (llama.cpp's
        grammar would end the process on it): what ``sample`` returns when every token the grammar allows was
        excluded (a -inf logit bias, an edited logits row), or a token of the caller's own."""
        chain = self._live_chain()
        if self.grammar_sampler is not None and accept_grammar:
            if not 0 <= token < self.n_vocab:
                raise ValueError(f"token {token} is outside the vocabulary (0..{self.n_vocab - 1})")
            if not self._grammar_allows(token):
                raise ValueError(f"token {token} is not one the grammar allows here (when it was sampled, every "
                                 "token the grammar allows had been excluded: a -inf logit bias, an edited row)")
            lib.llama_sampler_accept(self.grammar_sampler, token)
        lib.llama_sampler_accept(chain.ptr, token)
        chain.raise_stage_error()
        self.prev.append(int(token))

    def reset(self) -> None:
        """Back to the state before the first accepted token (the grammar from its start too)."""
        self.prev.clear()
        if self.grammar_sampler is not None:
            lib.llama_sampler_reset(self.grammar_sampler)
        lib.llama_sampler_reset(self._live_chain().ptr)

    def cp(self) -> LlamaSamplingContext:
        """An independent copy in the same state (``llama_sampler_clone`` of the chain and the grammar).

        Stages with Python state (the reasoning budget, custom samplers) are shared with the copy.
        """
        chain = self._live_chain()
        copy = object.__new__(LlamaSamplingContext)
        copy.__dict__.update(self.__dict__)
        copy.sampler_chain = SamplerChain.adopt(lib.llama_sampler_clone(chain.ptr), self._chain_ctx,
                                                chain.active, chain.leading_top)
        copy.grammar_sampler = (lib.llama_sampler_clone(self.grammar_sampler) if self.grammar_sampler is not None
                                else None)
        copy.prev = collections.deque(self.prev, maxlen=self.prev.maxlen)
        copy._candidates = ffi.new("llama_token_data[]", self.n_vocab)
        copy._view = np.frombuffer(ffi.buffer(copy._candidates), dtype=_TOKEN_DATA)
        copy._cur_p = ffi.new("llama_token_data_array *")
        copy._single = ffi.new("llama_token_data[1]")
        copy._single_p = ffi.new("llama_token_data_array *", {"data": copy._single, "size": 1, "selected": -1})
        return copy

    def force_reasoning_budget(self) -> bool:
        """End the reasoning block that is being counted now (its end is forced next): whether it was.

        False without a reasoning budget, before the block starts, and once it has ended or is ending.
        """
        machine = self._chain_ctx.controls.get("reasoning_budget")
        return bool(machine is not None and machine.force())

    # -- utilities ----------------------------------------------------------------------------
    def last(self) -> int | None:
        """The last accepted token."""
        return self.prev[-1] if self.prev else None

    def prev_str(self, ctx_main: Any, n: int) -> str:
        """The text of the last ``n`` accepted tokens (``ctx_main`` is the seed's argument, not needed)."""
        buf = ffi.new("char[]", 256)
        pieces = []
        for token in list(self.prev)[-n:] if n > 0 else []:
            size = lib.llama_token_to_piece(self.vocab, token, buf, 256, 0, False)
            pieces.append(ffi.buffer(buf, max(size, 0))[:])
        return b"".join(pieces).decode("utf-8", errors="replace")

    def _live_chain(self) -> SamplerChain:
        if self.sampler_chain is None:
            raise RuntimeError("this LlamaSamplingContext is closed")
        return self.sampler_chain

    def close(self) -> None:
        """Free the chain and the grammar (idempotent)."""
        chain, self.sampler_chain = self.sampler_chain, None
        if chain is not None:
            chain.close()
        grammar, self.grammar_sampler = self.grammar_sampler, None
        if grammar is not None:
            lib.llama_sampler_free(grammar)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class CustomSampler:
    """A native ``llama_sampler`` whose work is done by Python functions (the seed's ``CustomSampler``).

    ``apply_func(cur_p)`` gets the candidates as the seed passes them, a ctypes
    ``llama_cpp.llama_token_data_array`` over llama.cpp's own array (``cur_p.data[i].logit``,
    ``cur_p.size``, ``cur_p.selected``); edits go straight to llama.cpp.  ``accept_func(token)``,
    ``reset_func()`` and ``free_func()`` follow the sampler's life; ``clone_func()`` returns the
    ``llama_sampler *`` a clone should be (without it, a clone is another sampler over these functions).

    ``get_sampler()`` is this object's own sampler, freed by ``close()``.  In a
    :class:`LlamaSamplingContext` (``CommonSamplerType.CUSTOM``) each chain gets a sampler of its own
    over the same functions, which the chain frees.  An exception in a callback cannot cross llama.cpp:
    it is kept and raised by the ``LlamaSamplingContext.sample`` that ran the callback.
    """

    def __init__(self, apply_func: Callable[[Any], None], accept_func: Callable[[int], None] | None = None,
                 reset_func: Callable[[], None] | None = None, free_func: Callable[[], None] | None = None,
                 clone_func: Callable[[], Any] | None = None, name: str = "custom") -> None:
        if not callable(apply_func):
            raise TypeError("apply_func must be callable")
        from . import llama_cpp as ctypes_api

        self.apply_func = apply_func
        self.name = name
        self._pending: BaseException | None = None
        array_type = ctypes_api.llama_token_data_array

        def guarded(call: Callable[..., Any], *args: Any) -> Any:
            try:
                return call(*args)
            except BaseException as exc:  # noqa: BLE001 - kept for the Python caller, raised after the C call
                self._pending = self._pending or exc
                return None

        self._name = ffi.new("char[]", name.encode("utf-8"))
        callbacks: dict[str, Any] = {
            "name": ffi.callback("char *(struct llama_sampler *)", lambda _smpl: self._name),
            "apply": ffi.callback("void(struct llama_sampler *, struct llama_token_data_array *)",
                                  lambda _smpl, cur_p: guarded(
                                      apply_func, array_type.from_address(int(ffi.cast("uintptr_t", cur_p))))),
        }
        if accept_func is not None:
            callbacks["accept"] = ffi.callback("void(struct llama_sampler *, int32_t)",
                                               lambda _smpl, token: guarded(accept_func, int(token)))
        if reset_func is not None:
            callbacks["reset"] = ffi.callback("void(struct llama_sampler *)", lambda _smpl: guarded(reset_func))
        if free_func is not None:
            callbacks["free"] = ffi.callback("void(struct llama_sampler *)", lambda _smpl: guarded(free_func))
        if clone_func is not None:
            def clone(_smpl: Any) -> Any:
                made = guarded(clone_func)
                return ffi.NULL if made is None else as_pointer(made, "struct llama_sampler *")

            callbacks["clone"] = ffi.callback("struct llama_sampler *(struct llama_sampler *)", clone)
        self._callbacks = callbacks
        self._iface = ffi.new("struct llama_sampler_i *")  # the backend hooks stay NULL: a CPU sampler
        for field, callback in callbacks.items():
            setattr(self._iface, field, callback)
        self.sampler_p: Any = self.new_native([])

    def new_native(self, keep: list[Any]) -> Any:
        """Another ``llama_sampler *`` over these callbacks, for whoever frees it (a chain); ``keep`` is
        where that owner keeps this object alive while it can call back."""
        smpl = lib.llama_sampler_init(self._iface, ffi.NULL)
        if smpl == ffi.NULL:
            raise RuntimeError("llama_sampler_init failed for a custom sampler")
        keep.append(self)
        return smpl

    def get_sampler(self) -> int:
        """This object's own ``llama_sampler *``, as the low-level API (``llama_cpp.llama_cpp``) takes it."""
        if self.sampler_p is None:
            raise RuntimeError("this CustomSampler is closed")
        return int(ffi.cast("uintptr_t", self.sampler_p))

    def raise_pending(self) -> None:
        """Raise (once) the exception a callback raised, if any."""
        error, self._pending = self._pending, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Free this object's own sampler (idempotent); chains free theirs."""
        smpl, self.sampler_p = self.sampler_p, None
        if smpl is not None:
            lib.llama_sampler_free(smpl)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
