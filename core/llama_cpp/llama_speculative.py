"""Speculative decoding: the seed's names, the configuration, and the contract engines implement.

An engine *proposes* draft tokens for one sequence; the generation engine
(:class:`llama_cpp.engine.speculative.SpeculativeStep`) decodes ``[last,
draft...]`` in the tick's one batch, keeps the prefix the sequence's own
sampler agrees with, and rolls the rest back.  So every engine is lossless by
construction: a bad proposer only costs speed.

The vendor contract is :class:`LlamaSpecEngine` (``attach`` once, then per
sequence ``begin`` / ``draft`` / ``accept`` / ``rollback``, and ``close``).
Engines are registered through the ``llama_cpp_speculative_engines`` hook
and chosen by name: ``Llama(speculative={"engine": "ngram-map-k", ...})``.
The built-in engines (llama.cpp's ``common_speculative`` for every
:class:`SpeculativeType`, prompt lookup) come from the ``llama-cpp-speculative``
plugin; their classes are importable from here, as in the seed.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

import numpy as np

from .engine.step import DecodedBatch
from .plugins import SpeculativeEngine, get_host, seed_exports

if TYPE_CHECKING:
    from .engine.model import Model

__all__ = [
    "DecodedBatch",
    "DraftRequest",
    "LlamaDraftModel",
    "LlamaSpecEngine",
    "SpecConfig",
    "SpecTarget",
    "SpeculativeType",
    "create_native_spec_engine",
    "create_spec_engine",
    "speculative_output_limits",
]


class SpeculativeType(enum.IntEnum):
    """llama.cpp's ``common_speculative_type``, with the same values."""

    NONE = 0
    DRAFT_SIMPLE = 1
    DRAFT_EAGLE3 = 2
    DRAFT_MTP = 3
    DRAFT_DFLASH = 4
    DRAFT_DSPARK = 5
    NGRAM_SIMPLE = 6
    NGRAM_MAP_K = 7
    NGRAM_MAP_K4V = 8
    NGRAM_MOD = 9
    NGRAM_CACHE = 10
    COUNT = 11

    def is_draft(self) -> bool:
        """Whether it drafts with a model (a separate one, or the target's own MTP layers)."""
        return SpeculativeType.DRAFT_SIMPLE <= self <= SpeculativeType.DRAFT_DSPARK

    def is_ngram(self) -> bool:
        return SpeculativeType.NGRAM_SIMPLE <= self <= SpeculativeType.NGRAM_CACHE

    def is_eagle3(self) -> bool:
        return self == SpeculativeType.DRAFT_EAGLE3

    def is_mtp(self) -> bool:
        return self == SpeculativeType.DRAFT_MTP

    def is_dflash(self) -> bool:
        return self == SpeculativeType.DRAFT_DFLASH

    def is_dspark(self) -> bool:
        return self == SpeculativeType.DRAFT_DSPARK

    def is_none(self) -> bool:
        return self == SpeculativeType.NONE

    def to_str(self) -> str:
        """llama.cpp's name (``--spec-type``): ``"draft-mtp"``, ``"ngram-map-k4v"``..."""
        return _NAMES[self]

    def __str__(self) -> str:
        return self.to_str()

    @classmethod
    def from_str(cls, name: str) -> SpeculativeType:
        """The type named ``name`` (case and ``_``/``-`` do not matter; short aliases accepted)."""
        if isinstance(name, SpeculativeType):
            return name
        if not isinstance(name, str):
            raise ValueError(f"a speculative type is named by a string, got {name!r}")
        key = name.strip().lower().replace("_", "-")
        key = _ALIASES.get(key, key)
        for member, member_name in _NAMES.items():
            if member_name == key and member != SpeculativeType.COUNT:
                return member
        valid = sorted(set(_NAMES.values()) - {"count"} | set(_ALIASES))
        raise ValueError(f"unknown speculative type {name!r}; valid names: {', '.join(valid)}")


_NAMES = {
    SpeculativeType.NONE: "none",
    SpeculativeType.DRAFT_SIMPLE: "draft-simple",
    SpeculativeType.DRAFT_EAGLE3: "draft-eagle3",
    SpeculativeType.DRAFT_MTP: "draft-mtp",
    SpeculativeType.DRAFT_DFLASH: "draft-dflash",
    SpeculativeType.DRAFT_DSPARK: "draft-dspark",
    SpeculativeType.NGRAM_SIMPLE: "ngram-simple",
    SpeculativeType.NGRAM_MAP_K: "ngram-map-k",
    SpeculativeType.NGRAM_MAP_K4V: "ngram-map-k4v",
    SpeculativeType.NGRAM_MOD: "ngram-mod",
    SpeculativeType.NGRAM_CACHE: "ngram-cache",
    SpeculativeType.COUNT: "count",
}
_ALIASES = {
    "simple": "draft-simple",
    "draft": "draft-simple",
    "eagle3": "draft-eagle3",
    "mtp": "draft-mtp",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "ngram-k": "ngram-map-k",
    "ngram-k4v": "ngram-map-k4v",
}

# the types that draft with a separate GGUF (MTP may use the target's own NextN layers instead)
_NEEDS_DRAFT_PATH = (SpeculativeType.DRAFT_SIMPLE, SpeculativeType.DRAFT_EAGLE3, SpeculativeType.DRAFT_DFLASH,
                     SpeculativeType.DRAFT_DSPARK)


def speculative_output_limits(n_batch: int, n_seq_max: int, n_draft: int) -> tuple[int, int]:
    """``(n_outputs_max, n_outputs_max_per_seq)`` for drafts of up to ``n_draft`` tokens: every sequence
    may want logits on ``[last, draft...]`` in one decode (llama.cpp's common_speculative_get_output_limits)."""
    per_seq = 1 + max(0, int(n_draft))
    return min(n_batch, n_seq_max * per_seq), min(n_batch, per_seq)


def _ranged(name: str, value: Any, lo: float | None = None, hi: float | None = None, *, integer: bool = True) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"SpecConfig.{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"SpecConfig.{name} must be {bounds}, got {value!r}")


@dataclasses.dataclass
class SpecConfig:
    """The configuration of llama.cpp's speculative decoding, field for field (``--spec-*`` flags).

    ``validate()`` checks every field and says which one is wrong; the
    engine calls it.  Build one from a plain dict with :meth:`from_dict`,
    which also refuses unknown keys.
    """

    spec_type: SpeculativeType | str | int = SpeculativeType.NONE
    # draft models (draft-simple, EAGLE3, MTP, DFlash, DSpark)
    draft_n_max: int = 3
    draft_n_min: int = 0
    draft_p_split: float = 0.1  # llama.cpp keeps it for tree drafting; no type uses it yet
    draft_p_min: float = 0.0
    draft_model_path: str | None = None
    draft_n_gpu_layers: int | str = "auto"
    draft_n_threads: int | None = None
    draft_n_threads_batch: int | None = None
    draft_cpu_moe: bool = False
    draft_n_cpu_moe: int = 0
    draft_tensor_buft_overrides: Sequence[str] | None = None
    draft_type_k: int | None = None
    draft_type_v: int | None = None
    draft_devices: list[str] = dataclasses.field(default_factory=list)
    draft_backend_sampling: bool = True
    draft_model_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # n-gram drafters
    ngram_size_n: int = 12
    ngram_size_m: int = 48
    ngram_min_hits: int = 1
    ngram_max_entries_per_key: int | None = None
    ngram_mod_n_match: int = 24
    ngram_mod_n_max: int = 64
    ngram_mod_n_min: int = 48
    lookup_cache_dynamic: str | None = None
    lookup_cache_static: str | None = None

    def __post_init__(self) -> None:
        self.spec_type = self.speculative_type

    @property
    def speculative_type(self) -> SpeculativeType:
        """``spec_type`` as the enum (it may be given, or set later, as a name or a number)."""
        value = self.spec_type
        if isinstance(value, SpeculativeType):
            return value
        return SpeculativeType.from_str(value) if isinstance(value, str) else _type_from_int(value)

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> SpecConfig:
        """A config from keyword options; an unknown key is a ValueError that lists the valid ones."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise ValueError(f"unknown speculative option(s) {', '.join(map(repr, unknown))}; "
                             f"valid options: {', '.join(sorted(fields))}")
        return cls(**options)

    def enabled(self) -> bool:
        return not self.speculative_type.is_none()

    def resolved_draft_n_gpu_layers(self) -> int:
        """llama.cpp's value: ``"auto"`` is -1, ``"all"`` is -2, an integer is itself."""
        value = self.draft_n_gpu_layers
        if value == "auto":
            return -1
        if value == "all":
            return -2
        return int(value)

    def max_draft_tokens(self) -> int:
        """The longest draft this configuration proposes (it sizes the outputs of a decode)."""
        t = self.speculative_type
        if t.is_draft():
            return self.draft_n_max
        if t in (SpeculativeType.NGRAM_SIMPLE, SpeculativeType.NGRAM_MAP_K, SpeculativeType.NGRAM_MAP_K4V):
            return self.ngram_size_m
        if t == SpeculativeType.NGRAM_MOD:
            return self.ngram_mod_n_max
        if t == SpeculativeType.NGRAM_CACHE:
            return 8  # fixed in llama.cpp's lookup decoding
        return 0

    def needs_target_mtp(self) -> bool:
        """MTP without a draft file drafts with the target's own NextN layers (loaded with ``load_mtp``)."""
        return self.speculative_type.is_mtp() and not self.draft_model_path

    def validate(self) -> SpecConfig:
        """Check every field; ValueError naming the first wrong one.  Returns self."""
        t = self.speculative_type
        if t == SpeculativeType.COUNT:
            raise ValueError("SpecConfig.spec_type: COUNT is not a speculative type")
        _ranged("draft_n_max", self.draft_n_max, 1, 1024)
        _ranged("draft_n_min", self.draft_n_min, 0, self.draft_n_max)
        _ranged("draft_p_split", self.draft_p_split, 0.0, 1.0, integer=False)
        _ranged("draft_p_min", self.draft_p_min, 0.0, 1.0, integer=False)
        if self.draft_n_gpu_layers not in ("auto", "all"):
            _ranged("draft_n_gpu_layers", self.draft_n_gpu_layers, -2)
        for name in ("draft_n_threads", "draft_n_threads_batch"):
            if getattr(self, name) is not None:
                _ranged(name, getattr(self, name), 1)
        _ranged("draft_n_cpu_moe", self.draft_n_cpu_moe, 0)
        for name in ("draft_type_k", "draft_type_v"):
            if getattr(self, name) is not None:
                _ranged(name, getattr(self, name), 0)
        if self.draft_devices:
            raise ValueError("SpecConfig.draft_devices: choosing devices for the draft model is not supported; "
                             "leave it empty (the draft uses the target's devices)")
        if self.draft_tensor_buft_overrides:
            raise ValueError("SpecConfig.draft_tensor_buft_overrides: only draft_cpu_moe / draft_n_cpu_moe "
                             "are supported as buffer overrides of the draft model")
        if not isinstance(self.draft_model_kwargs, Mapping):
            raise ValueError(f"SpecConfig.draft_model_kwargs must be a dict, got {self.draft_model_kwargs!r}")
        from llama_cpp_native import ffi

        known = {name for name, _ in ffi.typeof("struct llama_model_params").fields}
        for key in self.draft_model_kwargs:
            if key not in known:
                raise ValueError(f"SpecConfig.draft_model_kwargs: {key!r} is not a llama_model_params field; "
                                 f"valid fields: {', '.join(sorted(known))}")
        _ranged("ngram_size_n", self.ngram_size_n, 1, 1024)
        _ranged("ngram_size_m", self.ngram_size_m, 1, 1024)
        _ranged("ngram_min_hits", self.ngram_min_hits, 1, 65535)
        if self.ngram_max_entries_per_key not in (None, 4):
            raise ValueError("SpecConfig.ngram_max_entries_per_key: llama.cpp's ngram-map-k4v keeps exactly 4 "
                             f"continuations per key; use None or 4, got {self.ngram_max_entries_per_key!r}")
        _ranged("ngram_mod_n_match", self.ngram_mod_n_match, 1, 1024)
        _ranged("ngram_mod_n_max", self.ngram_mod_n_max, 1, 1024)
        _ranged("ngram_mod_n_min", self.ngram_mod_n_min, 0, self.ngram_mod_n_max)
        for name in ("lookup_cache_static", "lookup_cache_dynamic"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"SpecConfig.{name}: {str(path)!r} is not a file")
        if t in _NEEDS_DRAFT_PATH and not self.draft_model_path:
            raise ValueError(f"SpecConfig.draft_model_path is required for spec_type {t.to_str()!r}")
        if self.draft_model_path is not None:
            if not t.is_draft():
                raise ValueError(f"SpecConfig.draft_model_path is only used by draft types, not {t.to_str()!r}")
            if not Path(self.draft_model_path).is_file():
                raise ValueError(f"SpecConfig.draft_model_path: {str(self.draft_model_path)!r} is not a file")
        return self


def _type_from_int(value: Any) -> SpeculativeType:
    try:
        return SpeculativeType(int(value))
    except (TypeError, ValueError):
        raise ValueError(f"SpecConfig.spec_type: {value!r} is not a speculative type") from None


class SpecTarget(NamedTuple):
    """What an engine attaches to: the target's model and context (native pointers) and their sizes."""

    model: Model
    ctx: Any  # llama_context *
    n_seq: int
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_threads_batch: int
    verbose: bool


class DraftRequest(NamedTuple):
    """One sequence's request for a draft in :meth:`LlamaSpecEngine.draft_many` (the arguments of ``draft``)."""

    seq_id: int
    input_ids: np.ndarray
    n_past: int
    id_last: int
    n_max: int


class LlamaSpecEngine(abc.ABC):
    """The contract of a speculative engine (what a vendor implements).

    The generation engine calls, for each sequence ``seq_id`` it serves:

    - ``begin(prompt_tokens, seq_id)`` when a request starts generating on it,
      with every token in the target's memory for that sequence;
    - ``draft(input_ids, n_past=, id_last=, n_max=, seq_id=)`` before a
      decode: up to ``n_max`` tokens expected to follow ``id_last``
      (``input_ids`` are the ``n_past`` tokens in memory, a view valid
      during the call: copy what you keep; an empty array means no draft
      this time).  The tick asks every sequence at once
      through ``draft_many``, which calls ``draft`` for each unless the
      engine drafts them together (a draft model decodes them in one batch);
    - ``accept(n_accepted, seq_id)`` after verification: the first
      ``n_accepted`` drafted tokens were kept;
    - ``rollback(n_tokens, seq_id)`` whenever the target's memory of that
      sequence is cut back to its first ``n_tokens`` (rejected drafts, a
      reused prefix, a context shift); an engine with its own draft memory
      cuts it the same way.

    ``attach(target)`` is called once before all of that (engines that load
    a draft model do it there); ``process(batch)`` after every target decode
    (engines that read the target's hidden states); ``close()`` frees what
    the engine holds, once.  ``draft`` may raise: the request it drafts for
    ends with that error and the engine stays usable for the others.
    """

    def attach(self, target: SpecTarget) -> None:  # noqa: B027 - optional hook
        """Bind to the target model and context (once, before any sequence begins)."""

    def max_draft_tokens(self) -> int:
        """The longest draft this engine proposes: the decode's outputs are sized for it."""
        return 16

    def needs_target_mtp(self) -> bool:
        """True if the target must be loaded with its MTP (NextN) layers."""
        return False

    def begin(self, prompt_tokens: Sequence[int], seq_id: int = 0) -> None:  # noqa: B027 - optional hook
        """A request starts generating on ``seq_id``; ``prompt_tokens`` are in the target's memory."""

    def process(self, batch: DecodedBatch, seq_id: int = 0) -> None:  # noqa: B027 - optional hook
        """The target just decoded ``batch`` (all sequences' rows, prompt chunks included)."""

    @abc.abstractmethod
    def draft(self, input_ids: np.ndarray, /, *, n_past: int, id_last: int, n_max: int,
              seq_id: int = 0) -> np.ndarray:
        """Up to ``n_max`` tokens to follow ``id_last`` (``input_ids[:n_past]`` are in memory)."""

    def draft_many(self, requests: Sequence[DraftRequest]) -> list[np.ndarray]:
        """Drafts for several sequences of one tick, in order.  Override it to draft them together; an
        exception then ends every request of the call (the default ends only the one that raised)."""
        return [self.draft(r.input_ids, n_past=r.n_past, id_last=r.id_last, n_max=r.n_max, seq_id=r.seq_id)
                for r in requests]

    def accept(self, n_accepted: int, seq_id: int = 0) -> None:  # noqa: B027 - optional hook
        """The first ``n_accepted`` tokens of the last draft for ``seq_id`` were kept."""

    def rollback(self, n_tokens: int, seq_id: int = 0) -> None:  # noqa: B027 - optional hook
        """The target's memory of ``seq_id`` now holds only its first ``n_tokens`` tokens."""

    def truncate(self, pos: int, seq_id: int = 0) -> None:
        """The seed's name of :meth:`rollback`."""
        self.rollback(pos, seq_id)

    def clear(self) -> None:  # noqa: B027 - optional hook
        """Forget every sequence (the target's memory was cleared)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free what the engine holds (idempotent)."""

    # The seed's checkpoint API.  In the seed an engine saved and restored the target's state around a
    # verification; here the generation engine rolls the target back itself (suffix removal, or
    # llama.cpp's n_rs_seq states on recurrent targets), so there is never a target checkpoint to
    # take.  The methods stay so that code written against the seed keeps working.
    @property
    def supports_native_target_rollback(self) -> bool:
        """Always True: the target is rolled back natively by the generation engine."""
        return True

    def checkpoint(self, seq_id: int = 0) -> None:
        """No target checkpoint is needed (None)."""
        return None

    def take_verification_checkpoint(self, seq_id: int = 0) -> None:
        """No target checkpoint is needed (None)."""
        return None

    def restore(self, checkpoint: Any, seq_id: int = 0) -> None:
        """Accepts only the None that :meth:`checkpoint` returns."""
        if checkpoint is not None:
            raise ValueError("this engine takes no target checkpoints: the generation engine rolls the target "
                             "back itself, so there is nothing to restore")

    def rollback_verified(self, checkpoint: Any, n_accepted: int, seq_id: int = 0) -> None:
        """The seed's rollback after verification: done by the generation engine (:meth:`rollback` is
        called with the new length)."""
        self.restore(checkpoint, seq_id)

    def reset_checkpoint_stats(self) -> None:  # noqa: B027 - nothing is counted
        """Nothing to reset: no checkpoints are taken."""

    def checkpoint_stats(self) -> dict[str, float]:
        """The checkpoint counters of ``last_speculative_stats``: zero, no checkpoints are taken."""
        return {name: 0 for name in ("checkpoint_captures", "checkpoint_restores", "checkpoint_verification_reuses",
                                     "checkpoint_native_captures", "checkpoint_native_restores",
                                     "checkpoint_device_captures", "checkpoint_device_restores",
                                     "checkpoint_native_verification_rollbacks", "checkpoint_buffer_bytes",
                                     "checkpoint_capture_seconds", "checkpoint_restore_seconds")}


class LlamaDraftModel(abc.ABC):
    """The seed's stateless draft model: ``draft_model(input_ids)`` returns the tokens expected next.

    ``Llama(draft_model=...)`` wraps it into a :class:`LlamaSpecEngine`;
    new code implements that contract instead (it is per sequence and is
    told what was accepted).
    """

    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        """Draft tokens to follow ``input_ids`` (all the tokens so far, the last one included)."""


class DraftModelEngine(LlamaSpecEngine):
    """A :class:`LlamaDraftModel` (or any callable of that shape) driven through the engine contract."""

    def __init__(self, draft_model: Any, max_tokens: int = 16) -> None:
        if not callable(draft_model):
            raise ValueError(f"draft_model must be callable (a LlamaDraftModel), got {draft_model!r}")
        self.draft_model = draft_model
        self._max = max_tokens

    def max_draft_tokens(self) -> int:
        return self._max

    def draft(self, input_ids: np.ndarray, /, *, n_past: int, id_last: int, n_max: int,
              seq_id: int = 0) -> np.ndarray:
        ids = np.append(np.asarray(input_ids[:n_past], dtype=np.intc), np.intc(id_last))
        return np.asarray(self.draft_model(ids), dtype=np.intc)[:n_max]


def create_spec_engine(config: SpecConfig | Mapping[str, Any]) -> LlamaSpecEngine:
    """The engine a configuration names, from the registered plugins (attached later by the Llama)."""
    if isinstance(config, Mapping):
        config = SpecConfig.from_dict(config)
    config.validate()
    if not config.enabled():
        raise ValueError("SpecConfig.spec_type is NONE: nothing to create")
    record = get_host().choose(SpeculativeEngine, config.speculative_type.to_str())
    return record.factory(config=config)


def create_native_spec_engine(config: SpecConfig, *, target_model: Model, target_context: Any,
                              model_params: Any = None, context_params: Any = None,
                              verbose: bool = False) -> LlamaSpecEngine:
    """The seed's factory for engines bound to a target at once (MTP and the draft-model types).

    ``target_model`` is a :class:`llama_cpp.engine.Model` or a raw ``llama_model *`` (not owned: the
    caller frees it, after the engine); ``target_context`` a context object or a ``llama_context *``.
    ``model_params`` and ``context_params`` are accepted for the seed's signature: the draft's own
    parameters come from the config and the target context.
    """
    from llama_cpp_native import lib

    from ._handles import SharedHandle, as_pointer
    from .engine.model import Model

    engine = create_spec_engine(config)
    ctx = as_pointer(getattr(target_context, "ptr", target_context), "struct llama_context *")
    if not isinstance(target_model, Model):
        target_model = Model(SharedHandle(as_pointer(target_model, "struct llama_model *"), lambda _ptr: None,
                                          "target model"))
    engine.attach(SpecTarget(
        model=target_model, ctx=ctx, n_seq=lib.llama_n_seq_max(ctx), n_ctx=lib.llama_n_ctx(ctx),
        n_batch=lib.llama_n_batch(ctx), n_ubatch=lib.llama_n_ubatch(ctx),
        n_threads=lib.llama_n_threads(ctx), n_threads_batch=lib.llama_n_threads_batch(ctx), verbose=verbose))
    return engine


# Seed names implemented by plugins (``LlamaNGramMapDecoding``, ``LlamaMTPDecoding``...).
__getattr__ = seed_exports(__name__, "__llama_speculative_exports__", "llama-cpp-speculative")
