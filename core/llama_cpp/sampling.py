"""Sampling parameters and the native sampler chain built from registered stages.

The core knows no sampler: the stages (``top_k``, ``temperature``, ``dist``...)
come from plugins through the ``llama_cpp_sampler_stages`` hook, the built-in
ones from the samplers plugin.  A chain is built once per generation, entirely
of llama.cpp's native samplers, so sampling costs no Python per token.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
from llama_cpp_native import ffi, lib

from . import _logger
from .plugins import SamplerStage, get_host

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
INT32_MAX = 2**31 - 1  # what llama.cpp's int32_t parameters hold
#: How many entries the list parameters may have.  Each entry costs work when the chain is built (a DRY
#: breaker is matched against the whole vocabulary: 1000 of them took 22 s) or per token (a stop string is
#: searched for in every piece), and no real use needs more than a few.
MAX_LIST_ENTRIES = {"dry_seq_breakers": 64, "grammar_triggers": 64, "logit_bias": 4096}
MAX_ENTRY_CHARS = 256  # the longest DRY breaker or trigger word


def _finite_number(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be a finite number, got {value!r}")


def _in_range(lo: float | None = None, hi: float | None = None) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        _finite_number(instance, attribute, value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"{'' if lo is None else lo}..{'' if hi is None else hi}"
            raise ValueError(f"{attribute.name} must be in {bounds}, got {value!r}")

    return check


def _int(lo: int = -INT32_MAX - 1, hi: int = INT32_MAX) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An integer in ``lo..hi`` (by default what a C ``int32_t`` holds: every integer reaches llama.cpp)."""
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{attribute.name} must be an integer, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{attribute.name} must be in {lo}..{hi}, got {value!r}")

    return check


def _strings(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    """A bounded list of non-empty strings (the DRY sequence breakers)."""
    _bounded(attribute.name, value)
    for s in value:
        if not isinstance(s, str) or not s or len(s) > MAX_ENTRY_CHARS:
            raise ValueError(f"{attribute.name} holds non-empty strings of at most {MAX_ENTRY_CHARS} characters, "
                             f"got {s!r:.80}")


def _bounded(name: str, value: Any) -> None:
    limit = MAX_LIST_ENTRIES[name]
    if len(value) > limit:
        raise ValueError(f"{name} has {len(value)} entries; at most {limit} are allowed")


def normalize_seed(seed: Any) -> int:
    """A seed as llama.cpp takes it: 0..4294967295, where a negative seed (down to -2**31, what a C ``int``
    holds) and 4294967295 (``LLAMA_DEFAULT_SEED``) mean a random one."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not -2**31 <= seed <= LLAMA_DEFAULT_SEED:
        raise ValueError(f"seed must be an integer in -2147483648..4294967295 (negative: random), got {seed!r}")
    return LLAMA_DEFAULT_SEED if seed < 0 else seed


def _logit_bias(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"logit_bias must be a mapping of token id to bias, got {type(value).__name__}")
    _bounded("logit_bias", value)
    for token, bias in value.items():
        if isinstance(token, bool) or not isinstance(token, int) and not (isinstance(token, str) and token.isdigit()):
            raise ValueError(f"logit_bias keys must be token ids, got {token!r}")
        # -inf bans a token; NaN or +inf would make every score it touches meaningless
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or bias != bias or bias == float("inf"):
            raise ValueError(f"logit_bias values must be numbers (finite, or -inf to ban a token), got {bias!r} "
                             f"for token {token!r}")


def _tag(attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")


def _grammar(value: Any) -> None:
    if value is not None and not (hasattr(value, "grammar") and hasattr(value, "root")):
        raise ValueError(f"grammar must be a LlamaGrammar (LlamaGrammar.from_string(...)), got {type(value).__name__}")


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _trigger_tuple(value: Iterable[str | int]) -> tuple[str | int, ...]:
    return tuple(value)


def _stage_tuple(value: Iterable[str | SamplerStage] | None) -> tuple[str | SamplerStage, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen(kw_only=True)
class SamplingParams:
    """Every sampling parameter of the seed API, with the seed's defaults, validated."""

    temperature: float = attrs.field(default=0.8, validator=_finite_number)
    top_k: int = attrs.field(default=40, validator=_int())
    top_p: float = attrs.field(default=0.95, validator=_in_range(0.0, 1.0))
    min_p: float = attrs.field(default=0.05, validator=_in_range(0.0, 1.0))
    typical_p: float = attrs.field(default=1.0, validator=_in_range(0.0, 1.0))
    min_keep: int = attrs.field(default=0, validator=_int(0))
    top_n_sigma: float = attrs.field(default=-1.0, validator=_finite_number)
    dynatemp_range: float = attrs.field(default=0.0, validator=_in_range(0.0))
    dynatemp_exponent: float = attrs.field(default=1.0, validator=_finite_number)
    penalty_last_n: int = attrs.field(default=64, validator=_int(-1))
    repeat_penalty: float = attrs.field(default=1.0, validator=_in_range(0.0))
    frequency_penalty: float = attrs.field(default=0.0, validator=_finite_number)
    presence_penalty: float = attrs.field(default=0.0, validator=_finite_number)
    mirostat_mode: int = attrs.field(default=0, validator=attrs.validators.in_([0, 1, 2]))
    mirostat_tau: float = attrs.field(default=5.0, validator=_finite_number)
    mirostat_eta: float = attrs.field(default=0.1, validator=_finite_number)
    xtc_probability: float = attrs.field(default=0.0, validator=_in_range(0.0, 1.0))
    xtc_threshold: float = attrs.field(default=0.1, validator=_in_range(0.0, 1.0))
    adaptive_target: float = attrs.field(default=-1.0, validator=_finite_number)
    adaptive_decay: float = attrs.field(default=0.9, validator=_in_range(0.0, 1.0))
    dry_multiplier: float = attrs.field(default=0.0, validator=_in_range(0.0))
    dry_base: float = attrs.field(default=1.75, validator=_finite_number)
    dry_allowed_length: int = attrs.field(default=2, validator=_int(0))
    dry_penalty_last_n: int = attrs.field(default=64, validator=_int(-1))
    dry_seq_breakers: tuple[str, ...] = attrs.field(default=("\n", ":", '"', "*"), converter=_str_tuple,
                                                    validator=_strings)
    logit_bias: Mapping[int, float] | None = attrs.field(default=None, validator=_logit_bias)
    ignore_eos: bool = False
    grammar: Any = attrs.field(default=None, validator=lambda i, a, v: _grammar(v))
    grammar_lazy: bool = False
    # words (str) or token ids (int) that switch a lazy grammar on
    grammar_triggers: tuple[str | int, ...] = attrs.field(default=(), converter=_trigger_tuple)
    use_infill: bool = False
    reasoning_budget: int = attrs.field(default=-1, validator=_int(-1))
    reasoning_start: str = attrs.field(default="<think>", validator=lambda i, a, v: _tag(a, v))
    reasoning_end: str = attrs.field(default="</think>", validator=lambda i, a, v: _tag(a, v))
    reasoning_budget_message: str | None = None
    reasoning_start_in_prompt: bool = False
    reasoning_start_max_tokens: int | None = attrs.field(default=32, validator=lambda i, a, v: v is None or _int(0)(i, a, v))
    seed: int = attrs.field(default=LLAMA_DEFAULT_SEED, validator=_int(0, LLAMA_DEFAULT_SEED))
    # the filter stages, in order, by name (or a SamplerStage record made for this call)
    samplers: tuple[str | SamplerStage, ...] | None = attrs.field(
        default=None, converter=_stage_tuple
    )
    extra_samplers: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    extra: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def __attrs_post_init__(self) -> None:
        if self.grammar_lazy and self.grammar is None:
            raise ValueError("grammar_lazy needs a grammar")
        if self.grammar_lazy and not self.grammar_triggers:
            raise ValueError("grammar_lazy needs grammar_triggers (words or token ids that start the grammar)")
        _bounded("grammar_triggers", self.grammar_triggers)
        for trigger in self.grammar_triggers:
            if isinstance(trigger, bool) or not isinstance(trigger, (str, int)) or trigger == "" or \
                    isinstance(trigger, str) and len(trigger) > MAX_ENTRY_CHARS:
                raise ValueError(f"grammar_triggers holds words (str, at most {MAX_ENTRY_CHARS} characters) and "
                                 f"token ids (int), got {trigger!r:.80}")


SAMPLING_FIELDS: frozenset[str] = frozenset(f.name for f in attrs.fields(SamplingParams))

#: The seed API's other names for two fields.  ``generate``/``sample`` call the
#: temperature ``temp`` and ``create_*`` call it ``temperature``; the seed's
#: primary name for the presence penalty is ``present_penalty``, with OpenAI's
#: ``presence_penalty`` accepted as well.
SAMPLING_ALIASES: Mapping[str, str] = {"temp": "temperature", "present_penalty": "presence_penalty"}

#: Every sampling keyword a public method takes: the record's fields and their aliases.
SAMPLING_KEYWORDS: frozenset[str] = SAMPLING_FIELDS | frozenset(SAMPLING_ALIASES)


@functools.lru_cache(maxsize=None)
def _signature_defaults(func: Callable[..., Any]) -> Mapping[str, Any]:
    return {name: p.default for name, p in inspect.signature(func).parameters.items()
            if name in SAMPLING_KEYWORDS}


def sampling_arguments(func: Callable[..., Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`SamplingParams` keywords of a call to ``func`` whose arguments are ``values``.

    Public methods spell every sampling keyword out (so that ``help()``, IDEs
    and type checkers know them) and pass their ``locals()`` here.  A keyword
    left at None keeps the record's default.  An alias given a value other
    than its default replaces its field unless the field was given one too;
    the seed's primary ``present_penalty`` replaces ``presence_penalty`` even then.
    """
    defaults = _signature_defaults(func)
    out = {name: values[name] for name in defaults if name in SAMPLING_FIELDS and values[name] is not None}
    for alias, field in SAMPLING_ALIASES.items():
        value = values.get(alias)
        if alias not in defaults or value is None or value == defaults[alias]:
            continue  # the alias was not used
        if alias == "present_penalty" or out.get(field, defaults.get(field)) == defaults.get(field):
            out[field] = value
    return out


def effective_logit_bias(params: SamplingParams, n_vocab: int, eog_tokens: Sequence[int]) -> dict[int, float]:
    """The biases a chain applies: the user's (validated, summed per token) and, with
    ``ignore_eos``, -inf on every end-of-generation token."""
    bias: dict[int, float] = {}
    for token, value in (params.logit_bias or {}).items():
        token = int(token)
        if not 0 <= token < n_vocab:
            raise ValueError(f"logit_bias token id {token} is outside the vocabulary (0..{n_vocab - 1})")
        bias[token] = bias.get(token, 0.0) + float(value)
    if params.ignore_eos:
        for token in eog_tokens:
            bias[token] = float("-inf")
    return bias


def stage_log(message: str) -> None:
    """What a stage tells the user about its work (a reasoning budget's transitions): printed to stderr
    like llama.cpp's own log lines, unless the log level is below info (``Llama(verbose=False)``)."""
    if _logger.get_verbosity() >= 3:
        print(message, file=sys.stderr)


@attrs.frozen
class ChainContext:
    """What a stage's ``build`` sees: the parameters and the model it samples for."""

    params: SamplingParams
    vocab: Any  # const struct llama_vocab *
    n_vocab: int
    n_ctx: int
    eog_tokens: Sequence[int]
    # the tokens before generation (the prompt, or all evaluated tokens): penalty
    # samplers are primed with them, as llama.cpp primes them with the prompt
    history: Sequence[int] = ()
    lib: Any = lib
    ffi: Any = ffi
    # Python objects a stage's native samplers point into (callbacks, arrays):
    # the chain keeps them alive as long as it lives
    keep: list[Any] = attrs.field(factory=list)
    # objects a stage hands to whoever drives the chain, by stage name (the reasoning budget's state
    # machine, whose force() ends the reasoning block now)
    controls: dict[str, Any] = attrs.field(factory=dict)
    # how a stage reports what it does (stage_log: stderr, unless the log level is below info)
    log: Callable[[str], None] = stage_log
    # what the stages' Python callbacks raised inside llama.cpp (``callback``), for the chain to raise
    errors: list[BaseException] = attrs.field(factory=list)

    def callback(self, ctype: str, fn: Callable[..., Any]) -> Any:
        """``ffi.callback(ctype, fn)`` for a native sampler the stage builds, kept alive with the chain.

        An exception cannot cross llama.cpp: what ``fn`` raises (a bug, or Ctrl-C landing in it) is kept,
        the callback returns its C type's zero, and the chain raises it once the sampling call returns,
        so the request ends with that error instead of going on as if the stage had done its work."""
        errors = self.errors

        def keep_error(_type: Any, error: BaseException, _traceback: Any) -> None:
            if not errors:  # the first one is the cause; what follows in the same call is its consequence
                errors.append(error)

        made = self.ffi.callback(ctype, fn, onerror=keep_error)
        self.keep.append(made)
        return made


def _ordered_stages(params: SamplingParams) -> tuple[list[SamplerStage], list[SamplerStage]]:
    host = get_host()
    stages = host.records(SamplerStage)
    filters = {n: s for n, s in stages.items() if not s.final}
    finals = sorted((s for s in stages.values() if s.final), key=lambda s: s.order)
    if params.samplers is not None:
        chosen = [entry if isinstance(entry, SamplerStage) else host.choose(SamplerStage, entry)
                  for entry in params.samplers]
        if any(s.final for s in chosen):
            raise ValueError("samplers lists filter stages only; the final stage follows from temperature/mirostat")
    else:
        chosen = [s for s in filters.values() if s.default]
        for name in params.extra_samplers:
            stage = host.choose(SamplerStage, name)
            if stage not in chosen:
                chosen.append(stage)
        chosen.sort(key=lambda s: s.order)
    return chosen, finals


def _build(stage: SamplerStage, ctx: ChainContext) -> list[Any]:
    """The samplers ``stage`` builds for ``ctx``.  A stage that rejects the request's values by failing on
    them (a string where it wants a number, in ``extra``) is the request's error: a ValueError naming the
    stage, which a server answers with a 400, not a crash of its own."""
    try:
        return list(stage.build(ctx) or ())
    except ValueError:
        raise
    except (TypeError, KeyError, IndexError) as exc:
        raise ValueError(f"sampler stage {stage.name!r} could not use this request's parameters: "
                         f"{type(exc).__name__}: {exc}") from exc


def chain_failure(code: int, where: str) -> Exception:
    """The error of a shim sampling call (``llama_cpp_native_sample``...) that returned ``code`` on ``where``
    (an output of the last decode): -3, the request's own constraints left no token (a ValueError, the
    request's fault); -1, the output has no logits; else a failure of the chain."""
    if code == -3:
        return ValueError(f"the sampler chain left no token to choose on {where}: every token the grammar allows "
                          "was excluded before it (by a logit bias or a logits processor)")
    if code == -1:
        return RuntimeError(f"the last decode has no logits for {where}")
    return RuntimeError(f"the sampler chain failed on {where}")


def _calls_python(kept: Sequence[Any]) -> bool:
    """Whether a chain whose stages keep ``kept`` alive calls back into Python (``ChainContext.callback``'s
    functions, or any other ``ffi.callback``): its native sampling then needs the interpreter, and what the
    callbacks raise is only seen between two native calls."""
    return any(isinstance(item, ffi.CData) and ffi.typeof(item).kind == "function" for item in kept)


class SamplerChain:
    """An owned native ``llama_sampler`` chain.  ``calls_python``: a stage's sampler calls back into Python."""

    __slots__ = ("ptr", "active", "leading_top", "errors", "calls_python", "_keep")

    def __init__(self, ctx: ChainContext) -> None:
        sparams = lib.llama_sampler_chain_default_params()
        sparams.no_perf = True
        self.ptr = lib.llama_sampler_chain_init(sparams)
        self.active: list[str] = []  # the stages that contributed samplers, in chain order
        # n when the chain begins by keeping the n highest logits (SamplerStage.keeps_top), at most after
        # the logit bias, else 0
        self.leading_top = 0
        self.errors = ctx.errors  # what its stages' callbacks raised (ChainContext.callback): raise_stage_error
        self._keep = ctx.keep
        self.calls_python = False
        try:
            filters, finals = _ordered_stages(ctx.params)
            for stage in filters:
                built = _build(stage, ctx)
                for smpl in built:
                    lib.llama_sampler_chain_add(self.ptr, smpl)
                if built:
                    if self.active in ([], ["logit_bias"]) and stage.keeps_top is not None:
                        self.leading_top = max(0, int(stage.keeps_top(ctx.params)))
                    self.active.append(stage.name)
            for stage in finals:
                built = _build(stage, ctx)
                if built:
                    for smpl in built:
                        lib.llama_sampler_chain_add(self.ptr, smpl)
                    self.active.append(stage.name)
                    break
            else:
                raise RuntimeError("no final sampler stage is registered (is the samplers plugin installed?)")
        except BaseException:
            self.close()
            raise
        self.calls_python = _calls_python(ctx.keep)

    @classmethod
    def adopt(cls, ptr: Any, ctx: ChainContext, active: Sequence[str] = (), leading_top: int = 0) -> SamplerChain:
        """The owner of a chain made elsewhere (``llama_sampler_clone`` of one built for ``ctx``), keeping
        ``ctx.keep`` (the Python objects its samplers call back into) alive as long as it lives."""
        if ptr == ffi.NULL:
            raise RuntimeError("llama.cpp could not copy the sampler chain")
        chain = cls.__new__(cls)
        chain.ptr, chain.active, chain.leading_top, chain._keep = ptr, list(active), leading_top, ctx.keep
        chain.errors = ctx.errors
        chain.calls_python = _calls_python(ctx.keep)
        return chain

    @property
    def biased_argmax(self) -> bool:
        """True when the chain is argmax after at most a logit bias: no other stage can change the result."""
        return self.active in (["greedy"], ["logit_bias", "greedy"])

    def sample(self, ctx_ptr: Any, idx: int = -1) -> int:
        """The token the chain chooses from output ``idx`` of the last decode on ``ctx_ptr``, accepted into
        the chain, as ``llama_sampler_sample`` does, except where that would end the process: a chain that
        leaves no token (a grammar after a -inf logit bias that excludes all it allows) is a ValueError."""
        token = int(lib.llama_cpp_native_sample(self.ptr, ctx_ptr, idx))
        if self.errors:
            self.raise_stage_error()
        if token < 0:
            raise chain_failure(token, f"output {idx}")
        return token

    def raise_stage_error(self) -> None:
        """Raise what a stage's Python callback raised during the last native call on the chain, if anything
        (callers check ``errors`` first: the per-token path pays one list test)."""
        if self.errors:
            error = self.errors[0]
            self.errors.clear()
            raise error

    def close(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", None), None  # (none yet when __init__ was interrupted before it)
        if ptr is not None:
            lib.llama_sampler_free(ptr)

    def __del__(self) -> None:
        self.close()
