"""An example llama_cpp plugin: the ``banned_tokens`` sampler stage.

Everything a plugin needs is here: hook implementations marked with
``llama_cpp.hookimpl``, records from ``llama_cpp.plugins``, and an entry point
in the ``llama_cpp`` group (see pyproject.toml).
"""

from __future__ import annotations

from typing import Any

from llama_cpp import hookimpl
from llama_cpp.plugins import SamplerStage


def _banned_tokens(ctx: Any) -> list[Any]:
    """A native logit-bias sampler that gives every banned token -inf.

    ``ctx.params.extra["banned_tokens"]`` holds the token ids; ``ctx.lib`` and
    ``ctx.ffi`` are llama.cpp's C API, so the stage adds no Python per token.
    """
    banned = [int(t) for t in ctx.params.extra.get("banned_tokens", ())]
    for token in banned:
        if not 0 <= token < ctx.n_vocab:
            raise ValueError(f"banned_tokens: {token} is not a token id of this model (0..{ctx.n_vocab - 1})")
    if not banned:
        return []
    biases = ctx.ffi.new("llama_logit_bias[]", len(banned))
    for item, token in zip(biases, banned):
        item.token = token
        item.bias = float("-inf")
    return [ctx.lib.llama_sampler_init_logit_bias(ctx.n_vocab, len(banned), biases)]


@hookimpl
def llama_cpp_sampler_stages() -> list[SamplerStage]:
    return [
        SamplerStage(
            name="banned_tokens",
            build=_banned_tokens,
            order=5,  # after the built-in logit_bias (0), before penalties (10)
            default=False,  # only when a call names it in extra_samplers
            description="never sample the token ids in extra['banned_tokens']",
        )
    ]
