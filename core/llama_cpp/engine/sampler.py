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

    A chain that is only argmax (after at most a logit bias) needs no
    candidate array of the whole vocabulary: numpy's argmax over the row picks
    the same token as llama.cpp's greedy sampler (the first maximum), and the
    bias is accounted for without touching the row.  Nor does a chain that
    begins with a small top-k: it is handed the tokens near the best logit,
    which its top-k cuts to the same survivors in the same order (the shim's
    ``llama_cpp_native_sample_top``; the whole row when equal logits make the
    order llama.cpp's own).
    """

    __slots__ = ("params", "chain", "_argmax", "_bias_ids", "_bias_values", "_banned", "_finite", "_processor",
                 "_stop", "_top_n", "_top_bias", "history", "_kept_n", "kept")

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
        self._argmax = self.chain.biased_argmax and logits_processor is None
        # a chain that begins with a top-k much smaller than the vocabulary (after at most the logit bias)
        # samples from the tokens that can survive it (llama_cpp_native_sample_top)
        n_top = self.chain.leading_top
        self._top_n = n_top if not self._argmax and n_top <= chain_context.n_vocab // 64 else 0
        biased = self._argmax or (self._top_n > 0 and self.chain.active[0] == "logit_bias")
        bias = effective_logit_bias(params, chain_context.n_vocab, chain_context.eog_tokens) if biased else {}
        order = sorted(bias)  # ascending ids: among equal values the lowest id wins, as in a full argmax
        self._bias_ids = np.asarray(order, dtype=np.intp)
        self._bias_values = np.asarray([bias[t] for t in order], dtype=np.float32)
        self._banned = frozenset(bias)  # tokens whose raw score must not decide alone
        self._finite = any(v != float("-inf") for v in bias.values())  # -inf alone (ignore_eos) cannot win
        # the bias as the top-k path passes it: the chain's own bias sampler adds it, the search ranks by it
        self._top_bias: tuple[Any, Any, int] = (ffi.NULL, ffi.NULL, 0)
        if order:  # (the cdata keep their numpy arrays alive)
            self._top_bias = (ffi.from_buffer("llama_token[]", self._bias_ids.astype(np.int32)),
                              ffi.from_buffer("float[]", self._bias_values), len(order))

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
        if self._argmax and self._kept_n is None:
            return self._biased_argmax(ctx.logits_row(row)), None
        token = self._sample_reporting(ctx, row, self._kept_n) if self._kept_n is not None else \
            self._sample_native(ctx, row)
        if self.chain.errors:  # a stage's Python callback raised inside llama.cpp
            self.chain.raise_stage_error()
        return token, raw

    def _sample_native(self, ctx: Context, row: int) -> int:
        if self._top_n:
            token = lib.llama_cpp_native_sample_top(self.chain.ptr, ctx.ptr, row, self._top_n, *self._top_bias)
            if token >= 0:
                return token
            if token != -1:  # -1: the candidates cannot be cut safely, every token is one
                raise chain_failure(token, "the candidates of its top-k")
        token = lib.llama_cpp_native_sample(self.chain.ptr, ctx.ptr, row)
        if token < 0:
            raise chain_failure(token, f"output {row}")
        return token

    def _sample_reporting(self, ctx: Context, row: int, n: int) -> int:
        """Sample from every candidate and keep, under ``row``, what the chain left of them (``kept``).  The
        argmax chain leaves its one token, certain (llama.cpp's greedy sampler computes no probabilities; a
        zero temperature followed by a distribution, llama-server's greedy chain, gives that token 1)."""
        if self._argmax:
            token = self._biased_argmax(ctx.logits_row(row))
            self.kept[row] = (0.0, ((token, 0.0),) if n else ())
            return token
        ids = np.empty(n, dtype=np.int32)
        probs = np.empty(n, dtype=np.float32)
        n_out, p_token = ffi.new("int32_t *"), ffi.new("float *")
        token = lib.llama_cpp_native_sample_candidates(self.chain.ptr, ctx.ptr, row, n, ffi.from_buffer(
            "llama_token[]", ids), ffi.from_buffer("float[]", probs), n_out, p_token)
        if token < 0:
            raise chain_failure(token, f"output {row}")
        with np.errstate(divide="ignore"):
            logs = np.log(probs[:n_out[0]].astype(np.float64))
            self.kept[row] = (float(np.log(np.float64(p_token[0]))),
                              tuple(zip(ids[:n_out[0]].tolist(), logs.tolist())))
        return int(token)

    def _biased_argmax(self, row: np.ndarray) -> int:
        best = int(row.argmax())
        if not self._banned:
            return best
        if best in self._banned:  # the raw winner is biased: rank every token
            shifted = row.copy()
            shifted[self._bias_ids] += self._bias_values
            return int(shifted.argmax())
        if not self._finite:
            return best
        ids = self._bias_ids
        biased = row[ids] + self._bias_values
        j = int(biased.argmax())
        if biased[j] > row[best] or (biased[j] == row[best] and ids[j] < best):
            return int(ids[j])
        return best

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
        self.chain.close()
