"""llama-cpp-python's intermediate wrappers (``LlamaModel``, ``LlamaContext``, ``LlamaBatch``, ``LlamaSampler``)
over the low-level API, for code and tests written against them.

They are what they were there: thin owners of one native pointer each, over
the ctypes functions of :mod:`llama_cpp.llama_cpp`, with the handles as ints in
``.model``, ``.vocab``, ``.ctx``, ``.memory``, ``.batch`` and ``.sampler``.
``Llama`` does not use them (its engine owns its pointers through
``llama_cpp._handles``); use ``Llama`` unless you need the C API's own steps.

Each frees its pointer exactly once: ``close()`` may be called any number of
times, and runs at garbage collection too.  Closing a model first closes the
contexts made from it, since a context must not outlive its model.
"""

from __future__ import annotations

import abc
import ctypes
import os
from typing import Any, Sequence

from llama_cpp_native import lib

from . import llama_cpp as C
from ._handles import SharedHandle, as_pointer
from ._logger import capture_messages
from .engine.model import Model
from .sampling import chain_failure
# the seed's _internals also holds its sampling objects and the decode-abort exception; here they live
# in llama_cpp.sampling_context and llama_cpp.llama, and code that imports them from here finds them
from .llama import LlamaDecodeAbort  # noqa: F401
from .sampling_context import (CommonSamplerType, CustomSampler, LlamaSamplingContext,  # noqa: F401
                               LlamaSamplingParams)


def _text(call: Any, *args: Any) -> str:
    """The string a ``(..., char *buf, size_t size)`` function writes, with the buffer grown to fit."""
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = call(*args, buf, size)
        if needed < size:
            return buf.value.decode("utf-8", errors="replace")
        size = needed + 1


class _Owner(abc.ABC):
    """One native pointer in ``self.<_field>``, freed by ``_free`` once, then ``None``."""

    _field = ""

    @abc.abstractmethod
    def _free(self, handle: Any) -> None:
        """Free ``handle`` (each owner's own llama.cpp call)."""

    def close(self) -> None:
        handle = getattr(self, self._field, None)
        if handle is not None:
            setattr(self, self._field, None)
            self._free(handle)

    def __del__(self) -> None:
        self.close()


class LlamaModel(_Owner):
    """A loaded ``llama_model`` (``.model``) and its vocabulary (``.vocab``)."""

    _field = "model"

    def __init__(self, *, path_model: str, params: Any, verbose: bool = True) -> None:
        self.path_model, self.params, self.verbose = path_model, params, verbose
        self.model: int | None = None
        self._contexts: list[LlamaContext] = []
        if not os.path.exists(path_model):
            raise ValueError(f"Model path does not exist: {path_model}")
        with capture_messages(quiet=not verbose) as log:
            model = C.llama_model_load_from_file(path_model.encode("utf-8"), params)
        if not model:
            raise ValueError(f"Failed to load model from file: {path_model}: {log.reason('no reason was logged')}")
        self.model = model
        self.vocab: int = C.llama_model_get_vocab(model)
        # a view of the model for the engine's tokenizer functions; it frees nothing (this object does)
        self._tokens = Model(SharedHandle(as_pointer(model, "struct llama_model *"), lambda _ptr: None, "model"))

    def _free(self, handle: Any) -> None:
        for context in self._contexts:
            context.close()
        C.llama_model_free(handle)

    @staticmethod
    def default_params() -> Any:
        return C.llama_model_default_params()

    def vocab_type(self) -> int:
        return C.llama_vocab_type(self.vocab)

    def n_vocab(self) -> int:
        return C.llama_vocab_n_tokens(self.vocab)

    def n_ctx_train(self) -> int:
        return C.llama_model_n_ctx_train(self.model)

    def n_embd(self) -> int:
        return C.llama_model_n_embd(self.model)

    def rope_freq_scale_train(self) -> float:
        return C.llama_model_rope_freq_scale_train(self.model)

    def desc(self) -> str:
        return _text(C.llama_model_desc, self.model)

    def size(self) -> int:
        return C.llama_model_size(self.model)

    def n_params(self) -> int:
        return C.llama_model_n_params(self.model)

    def token_get_text(self, token: int) -> str:
        return C.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace")

    def token_get_score(self, token: int) -> float:
        return C.llama_vocab_get_score(self.vocab, token)

    def token_get_attr(self, token: int) -> int:
        return C.llama_vocab_get_attr(self.vocab, token)

    def token_bos(self) -> int:
        return C.llama_vocab_bos(self.vocab)

    def token_eos(self) -> int:
        return C.llama_vocab_eos(self.vocab)

    def token_eot(self) -> int:
        return C.llama_vocab_eot(self.vocab)

    def token_cls(self) -> int:
        return C.llama_vocab_bos(self.vocab)  # llama.h: llama_vocab_cls is deprecated in favour of bos

    def token_sep(self) -> int:
        return C.llama_vocab_sep(self.vocab)

    def token_nl(self) -> int:
        return C.llama_vocab_nl(self.vocab)

    def token_prefix(self) -> int:
        return C.llama_vocab_fim_pre(self.vocab)

    def token_middle(self) -> int:
        return C.llama_vocab_fim_mid(self.vocab)

    def token_suffix(self) -> int:
        return C.llama_vocab_fim_suf(self.vocab)

    def add_bos_token(self) -> bool:
        return C.llama_vocab_get_add_bos(self.vocab)

    def add_eos_token(self) -> bool:
        return C.llama_vocab_get_add_eos(self.vocab)

    # the engine's own tokenizer calls, over this model's pointer (one rule for the BOS space, not two)
    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        return self._tokens.tokenize(text, add_bos, special)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        return self._tokens.piece(token, special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """The tokens' text; the space a SentencePiece vocabulary puts before the first word after BOS
        comes off, as in llama-cpp-python (and ``Llama.detokenize``)."""
        return self._tokens.detokenize(list(tokens), special)

    def model_chat_template(self, name: str | None = None) -> str | None:
        """The chat template the GGUF carries under ``name`` (None: the default one); None if it has none."""
        template = C.llama_model_chat_template(self.model, name.encode() if name is not None else None)
        return template.decode("utf-8", errors="replace") if template is not None else None

    def metadata(self) -> dict[str, str]:
        return {_text(C.llama_model_meta_key_by_index, self.model, i): _text(C.llama_model_meta_val_str_by_index,
                                                                              self.model, i)
                for i in range(C.llama_model_meta_count(self.model))}


class LlamaContext(_Owner):
    """A ``llama_context`` (``.ctx``) on a :class:`LlamaModel`, with its memory (``.memory``)."""

    _field = "ctx"

    def __init__(self, *, model: LlamaModel, params: Any, verbose: bool = True) -> None:
        self.model, self.params, self.verbose = model, params, verbose
        self.ctx: int | None = None
        with capture_messages(quiet=not verbose) as log:
            ctx = C.llama_init_from_model(model.model, params)
        if not ctx:
            raise ValueError(f"Failed to create llama_context: {log.reason('no reason was logged')}")
        self.ctx = ctx
        self.memory: int | None = C.llama_get_memory(ctx)  # None: an encoder without memory
        model._contexts.append(self)

    def _free(self, handle: Any) -> None:
        self.memory = None
        C.llama_free(handle)

    @staticmethod
    def default_params() -> Any:
        return C.llama_context_default_params()

    def n_ctx(self) -> int:
        return C.llama_n_ctx(self.ctx)

    def pooling_type(self) -> int:
        return C.llama_pooling_type(self.ctx)

    def kv_cache_clear(self) -> None:
        if self.memory is not None:
            C.llama_memory_clear(self.memory, True)

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return self.memory is not None and C.llama_memory_seq_rm(self.memory, seq_id, p0, p1)

    def kv_cache_seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int, p1: int) -> None:
        C.llama_memory_seq_cp(self.memory, seq_id_src, seq_id_dst, p0, p1)

    def kv_cache_seq_keep(self, seq_id: int) -> None:
        C.llama_memory_seq_keep(self.memory, seq_id)

    def kv_cache_seq_shift(self, seq_id: int, p0: int, p1: int, shift: int) -> None:
        C.llama_memory_seq_add(self.memory, seq_id, p0, p1, shift)

    def get_state_size(self) -> int:
        return C.llama_state_get_size(self.ctx)

    def decode(self, batch: LlamaBatch) -> None:
        rc = C.llama_decode(self.ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def encode(self, batch: LlamaBatch) -> None:
        rc = C.llama_encode(self.ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_encode returned {rc}")

    def set_n_threads(self, n_threads: int, n_threads_batch: int) -> None:
        C.llama_set_n_threads(self.ctx, n_threads, n_threads_batch)

    def get_logits(self) -> Any:
        return C.llama_get_logits(self.ctx)

    def get_logits_ith(self, i: int) -> Any:
        return C.llama_get_logits_ith(self.ctx, i)

    def get_embeddings(self) -> Any:
        return C.llama_get_embeddings(self.ctx)

    def get_embeddings_ith(self, i: int) -> Any:
        return C.llama_get_embeddings_ith(self.ctx, i)

    def get_embeddings_seq(self, seq_id: int) -> Any:
        return C.llama_get_embeddings_seq(self.ctx, seq_id)

    def reset_timings(self) -> None:
        C.llama_perf_context_reset(self.ctx)

    def print_timings(self) -> None:
        C.llama_perf_context_print(self.ctx)


class LlamaBatch(_Owner):
    """A ``llama_batch`` (``.batch``, the ctypes Structure) for up to ``n_tokens`` rows: of token ids, or with
    ``embd > 0`` of input embeddings of ``embd`` floats (llama.cpp reads one or the other, never both)."""

    _field = "batch"

    def __init__(self, *, n_tokens: int, embd: int, n_seq_max: int, verbose: bool = True) -> None:
        self._n_tokens, self.embd, self.n_seq_max, self.verbose = n_tokens, embd, n_seq_max, verbose
        self.batch: Any = C.llama_batch_init(n_tokens, embd, n_seq_max)

    def _free(self, handle: Any) -> None:
        C.llama_batch_free(handle)

    def n_tokens(self) -> int:
        return self.batch.n_tokens

    def reset(self) -> None:
        self.batch.n_tokens = 0

    def set_batch(self, batch: Sequence[int], n_past: int, logits_all: bool) -> None:
        """``batch`` at positions ``n_past``... of sequence 0; logits for every row or only the last."""
        self.reset()
        self._add(batch, n_past, 0, logits_all)

    def add_sequence(self, batch: Sequence[int], seq_id: int, logits_all: bool) -> None:
        """``batch`` at positions 0... of ``seq_id``, after the rows already there."""
        self._add(batch, 0, seq_id, logits_all)

    def add_token(self, token: int, pos: int, seq_ids: Sequence[int], logits: bool) -> None:
        """One token row at ``pos``, in every sequence of ``seq_ids``."""
        self._row(pos, seq_ids, logits, token=token)

    def add_embedding(self, embedding: Sequence[float], pos: int, seq_ids: Sequence[int], logits: bool) -> None:
        """One row of ``embd`` input floats at ``pos``, in every sequence of ``seq_ids``."""
        self._row(pos, seq_ids, logits, embedding=embedding)

    def add_embeddings(self, embeddings: Sequence[Sequence[float]], first_pos: int, seq_id: int,
                       logits_all: bool) -> None:
        """Rows of input embeddings at ``first_pos``... of ``seq_id``; logits for every row or the last."""
        self._check_room(len(embeddings))
        for i, embedding in enumerate(embeddings):
            self.add_embedding(embedding, first_pos + i, [seq_id], logits_all or i == len(embeddings) - 1)

    def _add(self, tokens: Sequence[int], first_pos: int, seq_id: int, logits_all: bool) -> None:
        self._check_room(len(tokens))
        for i, token in enumerate(tokens):
            self._row(first_pos + i, [seq_id], logits_all or i == len(tokens) - 1, token=token)

    def _check_room(self, n: int) -> None:
        """Rows are added all or none: a call that would overflow changes nothing."""
        if self.batch.n_tokens + n > self._n_tokens:
            raise ValueError(f"{self.batch.n_tokens + n} rows do not fit a batch of {self._n_tokens}")

    def _row(self, pos: int, seq_ids: Sequence[int], logits: bool, *, token: int | None = None,
             embedding: Sequence[float] | None = None) -> None:
        b, row = self.batch, self.batch.n_tokens
        if (embedding is None) != (self.embd == 0):
            raise ValueError("this batch holds input embeddings: add_embedding(s)" if self.embd else
                             "this batch holds token ids: add_token/add_sequence/set_batch (embd=0)")
        if not 1 <= len(seq_ids) <= self.n_seq_max:
            raise ValueError(f"a row belongs to 1 to n_seq_max={self.n_seq_max} sequences, not {len(seq_ids)}")
        self._check_room(1)
        if embedding is not None:
            if len(embedding) != self.embd:
                raise ValueError(f"an embedding row has embd={self.embd} floats, not {len(embedding)}")
            ctypes.memmove(ctypes.addressof(b.embd.contents) + 4 * row * self.embd,
                           (ctypes.c_float * self.embd)(*embedding), 4 * self.embd)
        else:
            b.token[row] = token
        b.pos[row], b.n_seq_id[row], b.logits[row] = pos, len(seq_ids), logits
        for i, seq_id in enumerate(seq_ids):
            b.seq_id[row][i] = seq_id
        b.n_tokens = row + 1


class LlamaSampler(_Owner):
    """A sampler chain (``.sampler``) built step by step with the ``add_*`` methods."""

    _field = "sampler"

    def __init__(self) -> None:
        self.sampler: Any = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())

    def _free(self, handle: Any) -> None:
        C.llama_sampler_free(handle)  # the chain frees the samplers added to it

    def _add(self, sampler: Any) -> None:
        C.llama_sampler_chain_add(self.sampler, sampler)

    def add_greedy(self) -> None:
        self._add(C.llama_sampler_init_greedy())

    def add_dist(self, seed: int) -> None:
        self._add(C.llama_sampler_init_dist(seed))

    def add_top_k(self, k: int) -> None:
        self._add(C.llama_sampler_init_top_k(k))

    def add_top_p(self, p: float, min_keep: int = 1) -> None:
        self._add(C.llama_sampler_init_top_p(p, min_keep))

    def add_min_p(self, p: float, min_keep: int = 1) -> None:
        self._add(C.llama_sampler_init_min_p(p, min_keep))

    def add_typical(self, p: float, min_keep: int = 1) -> None:
        self._add(C.llama_sampler_init_typical(p, min_keep))

    def add_temp(self, temp: float) -> None:
        self._add(C.llama_sampler_init_temp(temp))

    def add_temp_ext(self, t: float, delta: float, exponent: float) -> None:
        self._add(C.llama_sampler_init_temp_ext(t, delta, exponent))

    def add_xtc(self, p: float, t: float, min_keep: int, seed: int) -> None:
        self._add(C.llama_sampler_init_xtc(p, t, min_keep, seed))

    def add_top_n_sigma(self, n: float) -> None:
        self._add(C.llama_sampler_init_top_n_sigma(n))

    def add_mirostat(self, n_vocab: int, seed: int, tau: float, eta: float, m: int) -> None:
        self._add(C.llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m))

    def add_mirostat_v2(self, seed: int, tau: float, eta: float) -> None:
        self._add(C.llama_sampler_init_mirostat_v2(seed, tau, eta))

    def add_grammar(self, model: LlamaModel, grammar: Any) -> None:
        """``grammar``: a :class:`llama_cpp.LlamaGrammar` (its GBNF text and root rule)."""
        self._add(C.llama_sampler_init_grammar(model.vocab, grammar.grammar.encode(), grammar.root.encode()))

    def add_penalties(self, penalty_last_n: int, penalty_repeat: float, penalty_freq: float,
                      penalty_present: float) -> None:
        self._add(C.llama_sampler_init_penalties(penalty_last_n, penalty_repeat, penalty_freq, penalty_present))

    def add_logit_bias(self, n_vocab: int, logit_bias: dict[int, float]) -> None:
        entries = (C.llama_logit_bias * len(logit_bias))(*(C.llama_logit_bias(int(t), float(b))
                                                          for t, b in logit_bias.items()))
        self._add(C.llama_sampler_init_logit_bias(n_vocab, len(logit_bias), entries))

    def add_infill(self, model: LlamaModel) -> None:
        self._add(C.llama_sampler_init_infill(model.vocab))

    def get_seed(self) -> int:
        return C.llama_sampler_get_seed(self.sampler)

    def sample(self, ctx: LlamaContext, idx: int = -1) -> int:
        """``llama_sampler_sample``, except that a chain that leaves no token (a grammar after a -inf logit
        bias that excludes all it allows) is a ValueError where llama.cpp's grammar would end the process."""
        token = int(lib.llama_cpp_native_sample(as_pointer(self.sampler, "struct llama_sampler *"),
                                                as_pointer(ctx.ctx, "struct llama_context *"), idx))
        if token < 0:
            raise chain_failure(token, f"output {idx}")
        return token

    def accept(self, token: int) -> None:
        C.llama_sampler_accept(self.sampler, token)

    def reset(self) -> None:
        C.llama_sampler_reset(self.sampler)
