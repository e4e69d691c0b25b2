"""The sampling state of one sequence: its native chain, its Python hooks, and its fast paths (argmax, top-k).

A chain is built per request from the registered sampler stages (the
samplers plugin), so each sequence has its own seed, penalties, grammar and
mirostat state.  Nothing here writes into llama.cpp's logits buffer except a
user's ``logits_processor``, whose edits are what the user asked the chain to
sample from; logprobs and stopping criteria see the row as llama.cpp
computed it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from llama_cpp_native import ffi, lib

from ..processors import LogitsProcessorList, StoppingCriteriaList, as_hook
from ..sampling import ChainContext, SamplerChain, SamplingParams, chain_failure, effective_logit_bias
from .context import Context
from .model import Model


def token_logprob(row: np.ndarray, token: int, top_n: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """log softmax of ``token`` in ``row`` and the ``top_n`` best tokens, without changing the row."""
    peak = float(row.max())
    log_norm = peak + float(np.log(np.exp(row - peak).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if top_n > 0:
        best = np.argpartition(row, -top_n)[-top_n:]
        top = tuple((int(t), float(row[t]) - log_norm) for t in best[np.argsort(-row[best], kind="stable")])
    return float(row[token]) - log_norm, top


class TokenHistory:
    """The tokens of a sequence as a growing numpy array, so hooks get them without an O(n) copy per token."""

    __slots__ = ("buf", "n")

    def __init__(self, tokens: Sequence[int]) -> None:
        self.buf = np.empty(max(64, 2 * len(tokens)), dtype=np.intc)
        self.buf[: len(tokens)] = tokens
        self.n = len(tokens)

    def append(self, token: int) -> None:
        if self.n == len(self.buf):
            self.buf = np.concatenate([self.buf, np.empty_like(self.buf)])
        self.buf[self.n] = token
        self.n += 1

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(token)

    def view(self, extra: int | None = None) -> np.ndarray:
        """The tokens so far (and ``extra`` after them, not kept)."""
        if extra is None:
            return self.buf[: self.n]
        self.append(extra)
        self.n -= 1
        return self.buf[: self.n + 1]


def chain_context(model: Model, n_ctx: int, params: SamplingParams, history: Sequence[int]) -> ChainContext:
    """What the sampler stages build a chain from: the parameters, the vocabulary, and the tokens
    before generation (penalty samplers are primed with them, as llama.cpp primes them with the prompt)."""
    return ChainContext(params=params, vocab=model.vocab, n_vocab=model.n_vocab, n_ctx=n_ctx,
                        eog_tokens=model.eog_tokens() if params.ignore_eos else (), history=tuple(history))


class SequenceSampler:
    """Chooses each next token of one sequence from its logits row.

    How is decided once, into a native ``struct llama_cpp_native_choice`` (:attr:`choice`), and every token
    is chosen by the shim's ``llama_cpp_native_choose``, whether one at a time here or in a burst of decodes
    (:class:`.slot.Burst`).  A chain that is only argmax (after at most a logit bias) needs no candidate
    array of the whole vocabulary: the first maximum of the biased row is the token llama.cpp's greedy
    sampler picks, found without writing into the row.  Nor does a chain that begins with a small top-k: it
    is handed the tokens near the best logit, which its top-k cuts to the same survivors in the same order
    (``llama_cpp_native_sample_top``; the whole row when equal logits make the order llama.cpp's own).
    """

    __slots__ = ("params", "chain", "choice", "_processor", "_stop", "_bias", "history", "_kept_n", "kept")

    def __init__(self, params: SamplingParams, chain_context: ChainContext, prompt: Sequence[int],
                 logits_processor: Callable[..., Any] | None = None,
                 stopping_criteria: Callable[..., bool] | None = None, kept: int | None = None) -> None:
        """``kept``: report, for every token sampled, what the chain left (:attr:`kept`, by batch row): the
        token's log-probability after the chain and the ``kept`` most probable candidates with theirs
        (llama-server's ``post_sampling_probs``)."""
        logits_processor = as_hook(logits_processor, LogitsProcessorList, "logits_processor")
        stopping_criteria = as_hook(stopping_criteria, StoppingCriteriaList, "stopping_criteria")
        self.params = params
        self._kept_n = kept
        self.kept: dict[int, tuple[float, tuple[tuple[int, float], ...]]] = {}
        self.chain = SamplerChain(chain_context)
        self._processor = logits_processor
        self._stop = stopping_criteria
        self.history = TokenHistory(prompt) if logits_processor is not None or stopping_criteria is not None else None
        n_vocab = chain_context.n_vocab
        argmax = self.chain.biased_argmax and logits_processor is None
        # a chain that begins with a top-k much smaller than the vocabulary (after at most the logit bias)
        # samples from the tokens that can survive it (llama_cpp_native_sample_top)
        n_top = self.chain.leading_top
        top_n = n_top if not argmax and n_top <= n_vocab // 64 else 0
        choice = ffi.new("struct llama_cpp_native_choice *")
        choice.chain, choice.n_vocab, choice.argmax, choice.top_n = self.chain.ptr, n_vocab, argmax, top_n
        self._bias: tuple[Any, ...] = ()
        if argmax or (top_n > 0 and self.chain.active[0] == "logit_bias"):
            bias = effective_logit_bias(params, n_vocab, chain_context.eog_tokens)
            order = sorted(bias)  # ascending ids: among equal values the lowest id wins, as in a full argmax
            if order:  # (the choice points into these arrays: they live as long as it)
                self._bias = (np.asarray(order, dtype=np.int32), np.asarray([bias[t] for t in order], dtype=np.float32))
                choice.bias_ids = ffi.from_buffer("llama_token[]", self._bias[0])
                choice.bias_values = ffi.from_buffer("float[]", self._bias[1])
                choice.n_bias = len(order)
        self.choice = choice

    @property
    def chooses_alone(self) -> bool:
        """Whether :attr:`choice` is all there is to sampling a token: no Python hook sees the row or the
        tokens, nothing is reported, and no stage of the chain calls back into Python; a burst may then
        choose this sequence's tokens natively."""
        return self._processor is None and self._stop is None and self._kept_n is None and \
            not self.chain.calls_python

    def sample(self, ctx: Context, row: int) -> tuple[int, np.ndarray | None]:
        """The next token from batch row ``row``, and the raw row if a processor edited the buffer."""
        raw = None
        if self._processor is not None:
            view = ctx.logits_row(row)
            raw = view.copy()
            assert self.history is not None  # kept whenever there is a processor
            edited = self._processor(self.history.view(), view)
            if edited is not view and edited is not None:
                view[:] = edited
        if self._kept_n is not None:
            token = self._sample_reporting(ctx, row, self._kept_n)
        else:
            token = lib.llama_cpp_native_choose(self.choice, ctx.ptr, row)
        if self.chain.errors:  # a stage's Python callback raised inside llama.cpp
            self.chain.raise_stage_error()
        if token < 0:
            raise chain_failure(token, f"output {row}")
        return token, raw

    def _sample_reporting(self, ctx: Context, row: int, n: int) -> int:
        """Sample from every candidate and keep, under ``row``, what the chain left of them (``kept``).  The
        argmax chain leaves its one token, certain (llama.cpp's greedy sampler computes no probabilities; a
        zero temperature followed by a distribution, llama-server's greedy chain, gives that token 1)."""
        if self.choice.argmax:
            token = int(lib.llama_cpp_native_choose(self.choice, ctx.ptr, row))
            if token >= 0:
                self.kept[row] = (0.0, ((token, 0.0),) if n else ())
            return token
        ids = np.empty(n, dtype=np.int32)
        probs = np.empty(n, dtype=np.float32)
        n_out, p_token = ffi.new("int32_t *"), ffi.new("float *")
        token = lib.llama_cpp_native_sample_candidates(self.chain.ptr, ctx.ptr, row, n, ffi.from_buffer(
            "llama_token[]", ids), ffi.from_buffer("float[]", probs), n_out, p_token)
        if token < 0:
            return int(token)
        with np.errstate(divide="ignore"):
            logs = np.log(probs[:n_out[0]].astype(np.float64))
            self.kept[row] = (float(np.log(np.float64(p_token[0]))),
                              tuple(zip(ids[:n_out[0]].tolist(), logs.tolist())))
        return int(token)

    def stops(self, token: int, logits: np.ndarray) -> bool:
        """The request's stopping criteria on the ids including ``token`` and the row it came from."""
        if self._stop is None:
            return False
        assert self.history is not None  # kept whenever there are stopping criteria
        return bool(self._stop(self.history.view(token), logits))

    def accepted(self, tokens: Sequence[int]) -> None:
        """``tokens`` joined the sequence (sampled and kept, or sent in by the caller)."""
        if self.history is not None:
            self.history.extend(tokens)

    def close(self) -> None:
        self.choice.chain = ffi.NULL  # a choice made after this fails (-2) instead of using the freed chain
        self.chain.close()
