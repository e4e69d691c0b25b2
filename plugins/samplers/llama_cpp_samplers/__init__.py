"""The standard sampler chain of llama_cpp as plugin stages over llama.cpp's native samplers.

Each stage turns the call's :class:`llama_cpp.sampling.SamplingParams` into
zero or more native ``llama_sampler`` objects.  ``order`` leaves gaps of ten so
that a third-party stage can be registered between two built-in ones.
"""

from __future__ import annotations

import re
from typing import Any

from llama_cpp import hookimpl
from llama_cpp.plugins import SamplerStage
from llama_cpp.sampling import effective_logit_bias

from .lazy_grammar import outside_reasoning
from .reasoning import reasoning_budget_stage


_ECMA_SPECIAL = re.compile(r"[.*+?^${}()|\[\]\\/]")


def _grammar(ctx: Any) -> list[Any]:
    """The GBNF grammar, first in the chain as in llama.cpp (already validated by LlamaGrammar).

    A lazy grammar stays inactive until a trigger word appears in the output
    or a trigger token is sampled; llama.cpp then constrains the text from the
    trigger on.  It looks for the trigger outside the reasoning block
    (``reasoning_start`` ... ``reasoning_end``), as llama-server's does
    (:mod:`.lazy_grammar`).
    """
    p = ctx.params
    if p.grammar is None:
        return []
    text, root = p.grammar.grammar.encode("utf-8"), p.grammar.root.encode("utf-8")
    if not p.grammar_lazy:
        smpl = ctx.lib.llama_sampler_init_grammar(ctx.vocab, text, root)
    else:
        words = [ctx.ffi.new("char[]", _ECMA_SPECIAL.sub(lambda m: "\\" + m.group(0), t).encode("utf-8"))
                 for t in p.grammar_triggers if isinstance(t, str)]
        tokens = [t for t in p.grammar_triggers if isinstance(t, int)]
        for token in tokens:
            if not 0 <= token < ctx.n_vocab:
                raise ValueError(f"grammar_triggers: {token} is not a token id of this model")
        patterns = ctx.ffi.new("char *[]", words)
        token_ids = ctx.ffi.new("llama_token[]", tokens)
        ctx.keep.extend((words, patterns, token_ids))
        smpl = ctx.lib.llama_sampler_init_grammar_lazy_patterns(
            ctx.vocab, text, root, patterns, len(words), token_ids, len(tokens))
    if smpl == ctx.ffi.NULL:
        raise ValueError("llama.cpp rejected the grammar for this model's vocabulary")
    return [outside_reasoning(ctx, smpl)] if p.grammar_lazy else [smpl]


def _infill(ctx: Any) -> list[Any]:
    """Fill-in-the-middle sampling: prefers ending the middle over rambling on.  With ``use_infill``, or where
    ``samplers`` lists it: llama.cpp applies each stage its list names (llama.vscode and llama.vim send
    ``["top_k", "top_p", "infill"]``)."""
    listed = any((entry if isinstance(entry, str) else entry.name) == "infill" for entry in ctx.params.samplers or ())
    return [ctx.lib.llama_sampler_init_infill(ctx.vocab)] if ctx.params.use_infill or listed else []


def _logit_bias(ctx: Any) -> list[Any]:
    """User biases plus, with ``ignore_eos``, -inf on every end-of-generation token.

    Applied once, as the first stage after the grammar (the reference applied it twice).
    """
    bias = effective_logit_bias(ctx.params, ctx.n_vocab, ctx.eog_tokens)
    if not bias:
        return []
    arr = ctx.ffi.new("llama_logit_bias[]", len(bias))
    for i, (token, value) in enumerate(bias.items()):
        arr[i].token = token
        arr[i].bias = value
    return [ctx.lib.llama_sampler_init_logit_bias(ctx.n_vocab, len(bias), arr)]


def _primed(ctx: Any, smpl: Any, last_n: int) -> Any:
    """Feed the last ``last_n`` tokens before generation to a sampler that penalizes history.

    llama.cpp's own programs accept the prompt into their sampler, so
    repetition of the prompt is penalized from the first generated token on.
    """
    for token in ctx.history[-last_n:]:
        ctx.lib.llama_sampler_accept(smpl, token)
    return smpl


def _penalties(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.mirostat_mode or (p.repeat_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0):
        return []
    last_n = ctx.n_ctx if p.penalty_last_n == -1 else p.penalty_last_n  # -1 = the whole context
    if last_n == 0:
        return []
    # llama.cpp's penalties, changing the window's tokens by index instead of looking up every candidate
    smpl = ctx.lib.llama_cpp_native_penalties_init(last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty)
    if smpl == ctx.ffi.NULL:
        raise MemoryError(f"no memory for the repetition penalties' window of {last_n} tokens")
    return [_primed(ctx, smpl, last_n)]


def _dry(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.dry_multiplier <= 0.0 or p.mirostat_mode:
        return []
    breakers = [ctx.ffi.new("char[]", s.encode("utf-8")) for s in p.dry_seq_breakers]
    arr = ctx.ffi.new("char *[]", breakers)
    last_n = ctx.n_ctx if p.dry_penalty_last_n == -1 else p.dry_penalty_last_n  # llama.cpp treats -1 as 0
    smpl = ctx.lib.llama_sampler_init_dry(ctx.vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length, last_n,
                                          arr, len(breakers))
    return [_primed(ctx, smpl, last_n)]


def _truncating(ctx: Any) -> bool:
    """Whether truncation filters run: not for greedy (argmax needs none) nor mirostat (it
    does its own truncation, and llama.cpp runs it on the untruncated distribution)."""
    return not ctx.params.greedy and not ctx.params.mirostat_mode


def _top_n_sigma(ctx: Any) -> list[Any]:
    n = ctx.params.top_n_sigma
    return [ctx.lib.llama_sampler_init_top_n_sigma(n)] if n > 0 and _truncating(ctx) else []


def _top_k(ctx: Any) -> list[Any]:
    k = ctx.params.top_k
    # greedy takes the argmax anyway: a partial sort of the vocabulary per token would be wasted
    return [ctx.lib.llama_sampler_init_top_k(k)] if 0 < k < ctx.n_vocab and _truncating(ctx) else []


def _typical(ctx: Any) -> list[Any]:
    p = ctx.params
    return [ctx.lib.llama_sampler_init_typical(p.typical_p, p.min_keep)] if p.typical_p < 1.0 and _truncating(ctx) else []


def _top_p(ctx: Any) -> list[Any]:
    p = ctx.params
    return [ctx.lib.llama_sampler_init_top_p(p.top_p, p.min_keep)] if p.top_p < 1.0 and _truncating(ctx) else []


def _min_p(ctx: Any) -> list[Any]:
    p = ctx.params
    return [ctx.lib.llama_sampler_init_min_p(p.min_p, p.min_keep)] if p.min_p > 0.0 and _truncating(ctx) else []


def _xtc(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.xtc_probability <= 0.0 or not _truncating(ctx):
        return []
    return [ctx.lib.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed)]


def _temperature(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.greedy or p.mirostat_mode:
        return []  # greedy ignores temperature; mirostat applies its own below
    if p.dynatemp_range > 0.0:
        return [ctx.lib.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)]
    return [ctx.lib.llama_sampler_init_temp(p.temperature)] if p.temperature != 1.0 else []


def _mirostat(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.greedy or p.mirostat_mode == 0:
        return []
    temp = [ctx.lib.llama_sampler_init_temp(p.temperature)]
    if p.mirostat_mode == 1:
        return temp + [ctx.lib.llama_sampler_init_mirostat(ctx.n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100)]
    return temp + [ctx.lib.llama_sampler_init_mirostat_v2(p.seed, p.mirostat_tau, p.mirostat_eta)]


def _adaptive_p(ctx: Any) -> list[Any]:
    p = ctx.params
    if p.greedy or p.adaptive_target < 0.0:
        return []
    return [ctx.lib.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, p.seed)]


def _greedy(ctx: Any) -> list[Any]:
    return [ctx.lib.llama_sampler_init_greedy()] if ctx.params.greedy else []


def _dist(ctx: Any) -> list[Any]:
    return [ctx.lib.llama_sampler_init_dist(ctx.params.seed)]


@hookimpl
def llama_cpp_sampler_stages() -> list[SamplerStage]:
    return [
        SamplerStage("grammar", _grammar, order=-10, description="GBNF grammar constraint (first, as in llama.cpp)"),
        SamplerStage("infill", _infill, order=5, description="fill-in-the-middle sampling (use_infill)"),
        SamplerStage("reasoning_budget", reasoning_budget_stage, order=25,
                     description="caps the first reasoning block (reasoning_budget)"),
        SamplerStage("logit_bias", _logit_bias, order=0, description="per-token biases; -inf on EOG with ignore_eos"),
        SamplerStage("penalties", _penalties, order=10, description="repeat/frequency/presence over penalty_last_n"),
        SamplerStage("dry", _dry, order=20, description="DRY repetition penalty"),
        SamplerStage("top_n_sigma", _top_n_sigma, order=30, description="keep logits within n sigma of the max"),
        SamplerStage("top_k", _top_k, order=40, description="keep the k most likely tokens",
                     keeps_top=lambda params: params.top_k),
        SamplerStage("typical_p", _typical, order=50, description="locally typical sampling"),
        SamplerStage("top_p", _top_p, order=60, description="nucleus sampling"),
        SamplerStage("min_p", _min_p, order=70, description="drop tokens below min_p x the top probability"),
        SamplerStage("xtc", _xtc, order=80, description="exclude top choices (seeded)"),
        SamplerStage("temperature", _temperature, order=90, description="temperature, dynamic with dynatemp_range"),
        SamplerStage("mirostat", _mirostat, order=0, final=True, description="mirostat v1/v2 (mirostat_mode)"),
        SamplerStage("adaptive_p", _adaptive_p, order=10, final=True, description="adaptive-p towards adaptive_target"),
        SamplerStage("greedy", _greedy, order=20, final=True, description="argmax at temperature <= 0"),
        SamplerStage("dist", _dist, order=30, final=True, description="seeded sampling from the distribution"),
    ]
