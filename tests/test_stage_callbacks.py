"""A sampler stage's Python callback that raises inside llama.cpp (``ChainContext.callback``).

An exception cannot cross llama.cpp's C frames: cffi used to print it as "Exception ignored" and return
zero, so the request went on as if the stage had done its work (a reasoning budget that stopped
counting, Ctrl-C lost).  Now the chain raises it once the sampling call returns: the request ends with
that error, and the instance generates what it generated before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama, hookimpl
from llama_cpp.plugins import SamplerStage
from llama_cpp.sampling import SamplingParams
from llama_cpp.testing import registered_plugin


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path) -> Llama:
    with Llama(str(tiny_model_path), n_ctx=512, n_threads=2, verbose=False) as model:
        yield model


class FailingStage:
    """A stage whose native sampler calls back into Python, and whose callback raises ``error`` on its
    ``fail_at``-th call (``where``: the sampler's apply or accept)."""

    def __init__(self, where: str, error: BaseException, fail_at: int) -> None:
        self.where, self.error, self.fail_at = where, error, fail_at
        self.calls = 0

    def build(self, ctx: Any) -> list[Any]:
        def count(*_args: Any) -> None:
            self.calls += 1
            if self.calls == self.fail_at:
                raise self.error

        name = ctx.ffi.new("char[]", b"failing")
        iface = ctx.ffi.new("struct llama_sampler_i *")
        iface.name = ctx.callback("const char *(*)(const struct llama_sampler *)", lambda _smpl: name)
        setattr(iface, self.where, ctx.callback(
            "void(struct llama_sampler *, llama_token_data_array *)" if self.where == "apply"
            else "void(struct llama_sampler *, llama_token)", count))
        ctx.keep.extend((iface, name))
        return [ctx.lib.llama_sampler_init(iface, ctx.ffi.NULL)]

    @hookimpl
    def llama_cpp_sampler_stages(self) -> list[SamplerStage]:
        return [SamplerStage("failing", self.build, order=45, default=False, description="raises on purpose")]


def sampled(llm: Llama, **kw: Any) -> str:
    return llm.create_completion("Once upon a time", max_tokens=16, temperature=0.8, seed=3, ignore_eos=True,
                                 **kw)["choices"][0]["text"]


@pytest.mark.parametrize("where", ["apply", "accept"])
@pytest.mark.parametrize("error", [ValueError("the stage failed on purpose"), KeyboardInterrupt()],
                         ids=["ValueError", "KeyboardInterrupt"])
def test_what_a_stage_callback_raises_ends_its_request(llm: Llama, where: str, error: BaseException,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    before = sampled(llm)
    stage = FailingStage(where, error, fail_at=5)
    with registered_plugin(stage, name="failing-stage-test"):
        with pytest.raises(type(error)) as raised:
            sampled(llm, extra_samplers=["failing"])
        assert raised.value is error
        assert stage.calls == 5  # the request stopped there; the callback was not called again
        stage.fail_at = 0  # never again: the stage now only counts
        assert sampled(llm, extra_samplers=["failing"]) == before
    assert "Exception ignored" not in capfd.readouterr().err
    assert sampled(llm) == before


def test_a_chain_built_by_hand_raises_it_from_sample(llm: Llama) -> None:
    """``SamplerChain`` outside the engine (as a stage's own tests build one) raises it from ``sample``."""
    stage = FailingStage("apply", ValueError("the stage failed on purpose"), fail_at=2)
    with registered_plugin(stage, name="failing-stage-test"):
        llm.reset()
        llm.eval(llm.tokenize(b"Once upon a time"))
        chain = llm._chain(SamplingParams(temperature=0.8, seed=3, extra_samplers=["failing"]))
        try:
            assert 0 <= chain.sample(llm._settled_ctx()) < llm.n_vocab()
            with pytest.raises(ValueError, match="on purpose"):
                chain.sample(llm._settled_ctx())
            assert not chain.errors
        finally:
            chain.close()
