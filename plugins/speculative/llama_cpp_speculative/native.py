"""llama.cpp's own drafters (``common_speculative``) as a :class:`LlamaSpecEngine`.

The drafting runs in llama.cpp, through the native package's shim (a handful
of C functions over ``common/speculative.h``), exactly as in llama.cpp's
tools; this module is the glue: it creates the draft model and context the
type needs, keeps per sequence how far the shim's history and the draft
context follow the target, and refuses to draft where they do not (a
sequence whose memory was copied from another, or shifted): the output
stays the target's, only slower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from llama_cpp.llama_speculative import (DecodedBatch, DraftRequest, LlamaSpecEngine, SpecConfig, SpecTarget,
                                         SpeculativeType)
from llama_cpp.native import NativeHandle, load_model, moe_cpu_overrides, new_context
from llama_cpp_native import ffi, lib

from .lookup_cache import check_lookup_cache

_BLOCK_DRAFTERS = (SpeculativeType.DRAFT_DFLASH, SpeculativeType.DRAFT_DSPARK)
_COMMON_ERRORS, _COMMON_INFO = 1, 3  # LOG_LEVEL_ERROR, LOG_LEVEL_INFO of common/log.h


def _take_error(error: Any, fallback: str) -> str:
    if error[0] == ffi.NULL:
        return fallback
    message = ffi.string(error[0]).decode("utf-8", "replace")
    lib.llama_cpp_native_free(error[0])
    error[0] = ffi.NULL
    return message


class NativeSpeculativeEngine(LlamaSpecEngine):
    """One :class:`SpeculativeType` of llama.cpp, configured by a :class:`SpecConfig`."""

    def __init__(self, config: SpecConfig) -> None:
        self.config = config.validate()
        self.type = config.speculative_type
        if self.type.is_none():
            raise ValueError("SpecConfig.spec_type is NONE: a native engine needs a speculative type")
        self.name = self.type.to_str()
        self._spec: NativeHandle | None = None
        self._draft_model: NativeHandle | None = None
        self._draft_ctx: NativeHandle | None = None
        self._draft_mem: Any = None
        self._error = ffi.new("char **")
        self._width = max(1, config.max_draft_tokens())  # the longest draft: the width of a draft buffer
        self._hist_len: list[int] = []  # per sequence: tokens in the shim's history
        self._mirrored: list[int] = []  # per sequence: leading target tokens the draft context has seen
        self._drafting: list[bool] = []  # per sequence: drafts allowed in this request
        self._last: list[tuple[int, list[int]]] = []  # per sequence: (id_last, draft) of the last draft call
        self._keep: list[Any] = []  # native strings the params point to

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its configuration (and a subclass's public options): the copy is a fresh engine,
        attached by the Llama it goes into (a pickled Llama loads its model again)."""
        public = {k: v for k, v in vars(self).items() if not k.startswith("_") and k not in ("config", "type", "name")}
        return {"config": self.config, "public": public}

    def __setstate__(self, state: dict[str, Any]) -> None:
        NativeSpeculativeEngine.__init__(self, state["config"])
        vars(self).update(state["public"])

    # -- sizing ---------------------------------------------------------------------------
    def max_draft_tokens(self) -> int:
        return self.config.max_draft_tokens()

    def needs_target_mtp(self) -> bool:
        return self.config.needs_target_mtp()

    # -- lifecycle ------------------------------------------------------------------------
    def attach(self, target: SpecTarget) -> None:
        if self._spec is not None:
            raise RuntimeError(f"this {self.name} engine is already attached to a Llama; create one per Llama")
        # llama.cpp's drafters log through common's own logger: as quiet as the Llama (process-wide)
        lib.llama_cpp_native_common_log_verbosity(_COMMON_INFO if target.verbose else _COMMON_ERRORS)
        try:
            if self.type.is_draft():
                self._open_draft(target)
            self._spec = self._open_spec(target)
        except BaseException:
            self.close()
            raise
        n = target.n_seq
        self._hist_len = [0] * n
        self._mirrored = [0] * n
        self._drafting = [True] * n
        self._last = [(-1, [])] * n

    def _open_draft(self, target: SpecTarget) -> None:
        """The draft model (unless MTP drafts with the target's own layers) and its context."""
        cfg = self.config
        if cfg.draft_model_path:
            mparams = lib.llama_model_default_params()
            mparams.n_gpu_layers = cfg.resolved_draft_n_gpu_layers()
            mparams.load_mtp = self.type.is_mtp()  # an MTP GGUF is all NextN layers
            for key, value in cfg.draft_model_kwargs.items():
                setattr(mparams, key, value)
            overrides = moe_cpu_overrides(cfg.draft_cpu_moe, cfg.draft_n_cpu_moe)
            if overrides is not None:
                mparams.tensor_buft_overrides = overrides.array
            self._draft_model = load_model(Path(cfg.draft_model_path), mparams, quiet=not target.verbose)
            model_ptr = self._draft_model.ptr
            if lib.llama_model_n_embd(model_ptr) != lib.llama_model_n_embd(target.model.ptr) and \
                    not self.type == SpeculativeType.DRAFT_SIMPLE:
                raise ValueError(f"the {self.name} draft {cfg.draft_model_path!r} has n_embd "
                                 f"{lib.llama_model_n_embd(model_ptr)}, the target "
                                 f"{lib.llama_model_n_embd(target.model.ptr)}: they must be equal")
        else:
            model_ptr = target.model.ptr  # MTP: the target's NextN layers
        cp = lib.llama_context_default_params()
        cp.n_ctx = target.n_ctx
        cp.n_batch = target.n_batch
        cp.n_ubatch = target.n_ubatch
        cp.n_seq_max = target.n_seq
        cp.n_threads = cfg.draft_n_threads or target.n_threads
        cp.n_threads_batch = cfg.draft_n_threads_batch or cfg.draft_n_threads or target.n_threads_batch
        cp.embeddings = False
        cp.n_rs_seq = 0
        cp.ctx_other = target.ctx
        if self.type.is_mtp():
            cp.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        cp.n_outputs_max = target.n_seq
        cp.n_outputs_max_per_seq = 1
        if self.type in _BLOCK_DRAFTERS:  # one pass over the whole block: anchor + n_max masks
            per_seq = max(1, cfg.draft_n_max + 1)
            cp.n_outputs_max = target.n_seq * per_seq
            if cfg.draft_backend_sampling:
                cp.n_outputs_max_per_seq = per_seq
        if cfg.draft_type_k is not None:
            cp.type_k = cfg.draft_type_k
        if cfg.draft_type_v is not None:
            cp.type_v = cfg.draft_type_v
        if self._draft_model is not None:
            self._draft_ctx = new_context(self._draft_model, cp, quiet=not target.verbose)
        else:
            self._draft_ctx = NativeHandle(lib.llama_init_from_model(model_ptr, cp), lib.llama_free,
                                           "MTP draft context (was the target loaded with its MTP layers?)")
        self._draft_mem = lib.llama_get_memory(self._draft_ctx.ptr)

    def _open_spec(self, target: SpecTarget) -> NativeHandle:
        cfg = self.config
        params = ffi.new("struct llama_cpp_native_spec_params *")
        params.type = int(self.type)
        params.n_seq = target.n_seq
        params.ctx_tgt = target.ctx
        params.ctx_dft = self._draft_ctx.ptr if self._draft_ctx is not None else ffi.NULL
        params.draft_n_max = cfg.draft_n_max
        params.draft_n_min = cfg.draft_n_min
        params.draft_p_min = cfg.draft_p_min
        params.draft_backend_sampling = cfg.draft_backend_sampling
        params.ngram_size_n = cfg.ngram_size_n
        params.ngram_size_m = cfg.ngram_size_m
        params.ngram_min_hits = cfg.ngram_min_hits
        params.ngram_mod_n_match = cfg.ngram_mod_n_match
        params.ngram_mod_n_max = cfg.ngram_mod_n_max
        params.ngram_mod_n_min = cfg.ngram_mod_n_min
        for name in ("lookup_cache_static", "lookup_cache_dynamic"):
            path = getattr(cfg, name)
            if path is None:
                continue
            check_lookup_cache(path, target.model.n_vocab)  # llama.cpp aborts on a malformed file
            text = ffi.new("char[]", str(path).encode())
            self._keep.append(text)
            setattr(params, name, text)
        ptr = lib.llama_cpp_native_spec_init(params, self._error)
        if ptr == ffi.NULL:
            raise ValueError(f"llama.cpp refused the {self.name} configuration: "
                             f"{_take_error(self._error, 'no reason given')}")
        return NativeHandle(ptr, lib.llama_cpp_native_spec_free, f"{self.name} engine")

    def close(self) -> None:
        # the drafter refers to the draft context, which refers to its model
        for handle in (self._spec, self._draft_ctx, self._draft_model):
            if handle is not None:
                handle.close()
        self._draft_mem = None

    # -- per sequence ---------------------------------------------------------------------
    def _live(self) -> Any:
        if self._spec is None:
            raise RuntimeError(f"the {self.name} engine is not attached to a Llama (or was closed)")
        return self._spec.ptr

    def begin(self, prompt_tokens: Sequence[int], seq_id: int = 0) -> None:
        self._restart(seq_id, prompt_tokens)
        # a draft context must have seen every token the target holds (it was evaluated in this sequence)
        self._drafting[seq_id] = self._draft_ctx is None or self._mirrored[seq_id] >= len(prompt_tokens)

    def _restart(self, seq_id: int, tokens: Sequence[int] | np.ndarray) -> None:
        buf = np.ascontiguousarray(tokens, dtype=np.int32)
        if not lib.llama_cpp_native_spec_begin(self._live(), seq_id, ffi.from_buffer("llama_token[]", buf),
                                               len(buf), self._error):
            raise RuntimeError(_take_error(self._error, "begin failed"))
        self._hist_len[seq_id] = len(buf)

    def process(self, batch: DecodedBatch, seq_id: int = 0) -> None:
        if self._draft_ctx is None:
            return  # the n-gram drafters only read the history
        n = len(batch.tokens)
        seq_ids = np.ascontiguousarray(batch.seq_ids, dtype=np.int32)
        ok = lib.llama_cpp_native_spec_process(
            self._live(), ffi.from_buffer("llama_token[]", np.ascontiguousarray(batch.tokens)),
            ffi.from_buffer("llama_pos[]", np.ascontiguousarray(batch.positions)),
            ffi.from_buffer("int32_t[]", seq_ids), ffi.from_buffer("int8_t[]", np.ascontiguousarray(batch.outputs)),
            n, self._error)
        # the rows of each sequence are contiguous: follow where they continue what the draft has seen
        starts = np.flatnonzero(np.r_[True, seq_ids[1:] != seq_ids[:-1]])
        ends = np.r_[starts[1:], n]
        for start, end in zip(starts, ends):
            seq = int(seq_ids[start])
            if not ok:
                self._drafting[seq] = False
            elif self._mirrored[seq] == int(batch.positions[start]):
                self._mirrored[seq] += int(end - start)
        if not ok:
            raise RuntimeError(_take_error(self._error, "the draft side failed"))

    def draft(self, input_ids: np.ndarray, /, *, n_past: int, id_last: int, n_max: int,
              seq_id: int = 0) -> np.ndarray:
        return self.draft_many([DraftRequest(seq_id, input_ids, n_past, id_last, n_max)])[0]

    def draft_many(self, requests: Sequence[DraftRequest]) -> list[np.ndarray]:
        """Every sequence's draft in one ``common_speculative_draft`` (a draft model decodes them together)."""
        spec = self._live()
        out: list[np.ndarray] = [np.empty(0, dtype=np.intc)] * len(requests)
        asked: list[int] = []
        for i, r in enumerate(requests):
            if not self._drafting[r.seq_id]:
                continue
            if self._draft_ctx is not None and self._mirrored[r.seq_id] < r.n_past:
                self._drafting[r.seq_id] = False  # the draft context missed tokens: no more drafts in this request
                continue
            if self._hist_len[r.seq_id] != r.n_past:  # tokens entered without a draft (sent in, evaluated)
                self._restart(r.seq_id, r.input_ids[:r.n_past])
            asked.append(i)
        if not asked:
            return out
        stride = self._width
        buf = np.empty((len(asked), stride), dtype=np.int32)
        counts = np.zeros(len(asked), dtype=np.int32)
        seq_ids = np.asarray([requests[i].seq_id for i in asked], dtype=np.int32)
        id_last = np.asarray([requests[i].id_last for i in asked], dtype=np.int32)
        n_max = np.asarray([min(requests[i].n_max, stride) for i in asked], dtype=np.int32)
        if not lib.llama_cpp_native_spec_draft_many(
                spec, len(asked), ffi.from_buffer("int32_t[]", seq_ids), ffi.from_buffer("llama_token[]", id_last),
                ffi.from_buffer("int32_t[]", n_max), ffi.from_buffer("llama_token[]", buf), stride,
                ffi.from_buffer("int32_t[]", counts), self._error):
            raise RuntimeError(_take_error(self._error, "drafting failed"))
        for row, i in enumerate(asked):
            r = requests[i]
            drafted = buf[row, :counts[row]].astype(np.intc)
            if self._draft_ctx is not None:  # the draft's own guesses leave its memory before verification
                lib.llama_memory_seq_rm(self._draft_mem, r.seq_id, r.n_past, -1)
                self._mirrored[r.seq_id] = min(self._mirrored[r.seq_id], r.n_past)
            self._last[r.seq_id] = (r.id_last, drafted.tolist())
            out[i] = drafted
        return out

    def accept(self, n_accepted: int, seq_id: int = 0) -> None:
        id_last, drafted = self._last[seq_id]
        kept = np.asarray([id_last, *drafted[:n_accepted]], dtype=np.int32)
        if not lib.llama_cpp_native_spec_accept(self._live(), seq_id, n_accepted,
                                                ffi.from_buffer("llama_token[]", kept), len(kept), self._error):
            raise RuntimeError(_take_error(self._error, "accept failed"))
        self._hist_len[seq_id] += len(kept)
        self._last[seq_id] = (-1, [])

    def rollback(self, n_tokens: int, seq_id: int = 0) -> None:
        if self._spec is None:
            return
        lib.llama_cpp_native_spec_truncate(self._spec.ptr, seq_id, n_tokens)
        self._hist_len[seq_id] = min(self._hist_len[seq_id], n_tokens)
        if self._draft_ctx is not None and self._mirrored[seq_id] > n_tokens:
            if lib.llama_memory_seq_rm(self._draft_mem, seq_id, n_tokens, -1):
                self._mirrored[seq_id] = n_tokens
            else:  # a draft memory that cannot drop a suffix: start this sequence over
                lib.llama_memory_seq_rm(self._draft_mem, seq_id, 0, -1)
                self._mirrored[seq_id] = 0

    def clear(self) -> None:
        for seq_id in range(len(self._hist_len)):
            self.rollback(0, seq_id)


def _config_for(spec_type: SpeculativeType, config: SpecConfig | None, options: dict[str, Any]) -> SpecConfig:
    if config is None:
        return SpecConfig.from_dict({**options, "spec_type": spec_type})
    if options:
        raise ValueError(f"pass either a SpecConfig or options, not both (got {sorted(options)})")
    if config.speculative_type != spec_type:
        raise ValueError(f"the {spec_type.to_str()} engine was given a SpecConfig for "
                         f"{config.speculative_type.to_str()}")
    return config


def native_factory(spec_type: SpeculativeType) -> Any:
    """The registry's factory for one type: ``factory(config=SpecConfig)`` or ``factory(**SpecConfig fields)``."""

    def build(config: SpecConfig | None = None, **options: Any) -> NativeSpeculativeEngine:
        return NativeSpeculativeEngine(_config_for(spec_type, config, options))

    build.__name__ = f"{spec_type.to_str().replace('-', '_')}_engine"
    return build
