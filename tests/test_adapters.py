"""LoRA routing (load_lora / active_loras) and control vectors, with llama-completion as the oracle."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp.testing import TinyLlamaSpec, write_control_vector, write_tiny_lora

from oracle import llama_completion
from test_compose import PrefixDictCache

PROMPT = "Once upon a time"
N = 16


def _llm(path: Path, **kw) -> Llama:
    return Llama(str(path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False, **kw)


def _greedy(llm: Llama, prompt: str = PROMPT, **kw) -> str:
    return llm.create_completion(prompt, max_tokens=N, temperature=0.0, **kw)["choices"][0]["text"]


def _bytes(llm: Llama, **kw) -> bytes:
    """The bytes of N greedy tokens (as llama-completion prints them, without stop handling)."""
    gen = llm.generate(llm.tokenize(PROMPT.encode(), special=True), temperature=0.0, **kw)
    tokens = [next(gen) for _ in range(N)]
    gen.close()
    return llm.detokenize(tokens)


@pytest.fixture(scope="module")
def second_lora(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_lora(tmp_path_factory.mktemp("lora") / "second.gguf", seed=7)


def test_active_loras_equal_llama_completion_with_the_same_adapter_and_scale(
        tiny_model_path: Path, tiny_lora_path: Path) -> None:
    with _llm(tiny_model_path) as llm:
        llm.load_lora("story", tiny_lora_path)
        assert llm.list_loras() == ["story"] and llm.loaded_lora_count == 1
        full = _bytes(llm, active_loras=[{"name": "story", "scale": 1.0}])
        half = _bytes(llm, active_loras=[{"name": "story", "scale": 0.5}])
        plain = _bytes(llm)
    assert full == llama_completion(tiny_model_path, PROMPT, N, extra=["--lora", str(tiny_lora_path)])
    assert half == llama_completion(tiny_model_path, PROMPT, N, extra=["--lora-scaled", f"{tiny_lora_path}:0.5"])
    assert plain == llama_completion(tiny_model_path, PROMPT, N)
    assert len({full, half, plain}) == 3


def test_switching_adapters_between_requests_never_reuses_a_prefix_evaluated_with_others(
        tiny_model_path: Path, tiny_lora_path: Path, second_lora: Path) -> None:
    with _llm(tiny_model_path) as fresh:
        base = _greedy(fresh)
    with _llm(tiny_model_path) as llm:
        llm.load_lora("a", tiny_lora_path)
        llm.load_lora("b", second_lora)
        with_a = _greedy(llm, active_loras=[{"name": "a"}])
        with_b = _greedy(llm, active_loras=[{"name": "b"}])
        both = _greedy(llm, active_loras=[{"name": "a"}, {"name": "b", "scale": 0.7}])
        assert _greedy(llm) == base  # same prompt right after: the KV cache of the LoRA run is not reused
        assert _greedy(llm, active_loras=[{"name": "a", "scale": 1.0}]) == with_a
    assert len({base, with_a, with_b, both}) == 4
    with _llm(tiny_model_path) as other:  # each result is what a fresh instance with that adapter gives
        other.load_lora("b", second_lora)
        assert _greedy(other, active_loras=[{"name": "b"}]) == with_b


def test_lora_path_is_the_default_of_every_request_and_an_empty_list_turns_it_off(
        tiny_model_path: Path, tiny_lora_path: Path) -> None:
    """The reference clears the constructor's adapter on the first eval that names none."""
    with _llm(tiny_model_path) as plain:
        base = _greedy(plain)
    with _llm(tiny_model_path, lora_path=str(tiny_lora_path)) as llm:
        first, second = _greedy(llm), _greedy(llm, prompt="The cat")
        assert _greedy(llm) == first != base
        assert _greedy(llm, active_loras=[]) == base
        assert llm.list_loras() == [str(tiny_lora_path)]
        assert _greedy(llm, active_loras=[{"name": str(tiny_lora_path), "scale": 1.0}]) == first
        assert _greedy(llm, prompt="The cat") == second


def test_unloading_an_applied_adapter_takes_it_off_the_context_first(
        tiny_model_path: Path, tiny_lora_path: Path) -> None:
    with _llm(tiny_model_path) as plain:
        base = _greedy(plain)
    llm = _llm(tiny_model_path, lora_path=str(tiny_lora_path))
    llm.load_lora("x", tiny_lora_path)
    _greedy(llm, active_loras=[{"name": "x"}])
    llm.unload_lora("x")
    llm.unload_lora("never loaded")  # ignored, as in the reference
    assert llm.list_loras() == [str(tiny_lora_path)]
    llm.unload_all_loras()
    assert llm.list_loras() == [] and llm.loaded_lora_count == 0
    assert _greedy(llm) == base  # no adapter is left on the context, and nothing dangles
    llm.close()
    llm.close()


def test_adapter_errors_say_what_is_wrong(tiny_model_path: Path, tiny_lora_path: Path, second_lora: Path,
                                          tmp_path: Path) -> None:
    with _llm(tiny_model_path) as llm:
        llm.load_lora("a", tiny_lora_path)
        llm.load_lora("a", tiny_lora_path)  # the same file again: nothing to do
        with pytest.raises(ValueError, match="already loaded"):
            llm.load_lora("a", second_lora)
        with pytest.raises(ValueError, match="not found"):
            llm.load_lora("missing", tmp_path / "nope.gguf")
        with pytest.raises(ValueError, match="failed to load LoRA"):
            llm.load_lora("model", tiny_model_path)  # a model is not an adapter
        with pytest.raises(ValueError, match=r"'b' is not loaded; loaded adapters: 'a'"):
            llm.create_completion(PROMPT, active_loras=[{"name": "b"}])
        with pytest.raises(ValueError, match="finite number"):
            llm.create_completion(PROMPT, active_loras=[{"name": "a", "scale": float("nan")}])
        with pytest.raises(ValueError, match="unknown keys"):
            llm.create_completion(PROMPT, active_loras=[{"name": "a", "weight": 1}])
        with pytest.raises(TypeError, match="list of"):
            llm.create_completion(PROMPT, active_loras={"name": "a"})
        with pytest.raises(ValueError, match="listed twice"):
            llm.create_completion(PROMPT, active_loras=[{"name": "a"}, {"name": "a"}])
        with pytest.raises(ValueError, match="not loaded"):  # raised at the call, before a stream starts
            llm.create_completion(PROMPT, stream=True, active_loras=[{"name": "zz"}])
        n_embd, n_layer = llm.n_embd(), llm.n_layer()
        with pytest.raises(ValueError, match=rf"needs? n_embd \({n_embd}\) x {n_layer}"):
            llm.create_completion(PROMPT, control_vector={"data": [0.0] * n_embd})
        with pytest.raises(ValueError, match="layer_start <= layer_end"):
            llm.create_completion(PROMPT, control_vector={"data": [0.0] * n_embd * n_layer, "layer_start": 0})
        with pytest.raises(ValueError, match="NaN"):
            llm.create_completion(PROMPT, control_vector={"data": [float("nan")] * n_embd * n_layer})
        with pytest.raises(TypeError, match="control_vector must be a dict"):
            llm.create_completion(PROMPT, control_vector=[0.0] * n_embd * n_layer)
        assert _greedy(llm) == _greedy(llm)  # still usable


def test_control_vector_equals_llama_completion_with_the_same_vector(
        tiny_model_factory, tmp_path: Path) -> None:
    spec = TinyLlamaSpec(n_layer=4)
    model = tiny_model_factory(n_layer=4)
    rng = np.random.default_rng(5)
    directions = {layer: rng.standard_normal(spec.n_embd).astype(np.float32) * 2 for layer in (1, 2, 3)}
    cvec_file = write_control_vector(tmp_path / "cvec.gguf", directions)
    data = np.concatenate([directions[1], directions[2], directions[3], np.zeros(spec.n_embd, np.float32)])
    with _llm(model) as llm:
        plain = _bytes(llm)
        steered = _bytes(llm, control_vector={"data": data})
        middle = _bytes(llm, control_vector={"data": data[: 3 * spec.n_embd], "layer_start": 2, "layer_end": 3})
        zero = _bytes(llm, control_vector={"data": np.zeros(4 * spec.n_embd)})
        assert _bytes(llm) == plain  # not passed: cleared
    assert steered == llama_completion(model, PROMPT, N, extra=["--control-vector", str(cvec_file)])
    assert middle == llama_completion(model, PROMPT, N, extra=["--control-vector", str(cvec_file),
                                                                "--control-vector-layer-range", "2", "3"])
    assert zero == plain != steered != middle


def test_chat_passes_active_loras_and_control_vector_on(tiny_model_path: Path, tiny_lora_path: Path) -> None:
    messages = [{"role": "user", "content": "Tell me a story"}]
    prompt = "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n"

    def chat(llm: Llama, **kw) -> str:
        reply = llm.create_chat_completion(messages, max_tokens=N, temperature=0.0, **kw)
        return reply["choices"][0]["message"]["content"]

    with _llm(tiny_model_path, chat_format="chatml") as llm:
        llm.load_lora("story", tiny_lora_path)
        lora = [{"name": "story", "scale": 0.8}]
        cvec = {"data": np.full(llm.n_embd() * llm.n_layer(), 0.3, dtype=np.float32)}
        assert chat(llm, active_loras=lora) == _greedy(llm, prompt, active_loras=lora, stop=["<|im_end|>"])
        assert chat(llm, control_vector=cvec) == _greedy(llm, prompt, control_vector=cvec, stop=["<|im_end|>"])
        assert len({chat(llm), chat(llm, active_loras=lora), chat(llm, control_vector=cvec)}) == 3


def test_state_and_prompt_cache_remember_the_adapters(tiny_model_path: Path, tiny_lora_path: Path) -> None:
    with _llm(tiny_model_path) as plain:
        base = _greedy(plain)
    with _llm(tiny_model_path) as llm:
        llm.load_lora("a", tiny_lora_path)
        tuned = _greedy(llm, active_loras=[{"name": "a"}])
        state = llm.save_state()
        llm.reset()
        llm.load_state(state)
        assert _greedy(llm) == base  # the restored tokens were evaluated with the adapter: not reused
        llm.set_cache(PrefixDictCache())
        assert _greedy(llm, active_loras=[{"name": "a"}]) == tuned
        assert _greedy(llm) == base
        assert _greedy(llm, active_loras=[{"name": "a"}]) == tuned


def test_pickling_carries_the_loaded_adapters(tiny_model_path: Path, tiny_lora_path: Path) -> None:
    with _llm(tiny_model_path) as llm:
        llm.load_lora("a", tiny_lora_path)
        tuned = _greedy(llm, active_loras=[{"name": "a"}])
        with pickle.loads(pickle.dumps(llm)) as clone:
            assert clone.list_loras() == ["a"]
            assert _greedy(clone, active_loras=[{"name": "a"}]) == tuned


def test_seed_readme_lora_and_control_vector_examples(tiny_model_factory, tmp_path: Path) -> None:
    """The README's multi-tenant example, unchanged but for the paths (a 4-layer tiny model, its adapters)
    and max_tokens (a random model would otherwise talk until the context is full)."""
    model = tiny_model_factory(n_layer=4)
    spec = TinyLlamaSpec(n_layer=4)
    coder = write_tiny_lora(tmp_path / "python-coder-lora.gguf", spec, seed=1)
    translator = write_tiny_lora(tmp_path / "spanish-translator-lora.gguf", spec, seed=2)
    llm = Llama(model_path=str(model), verbose=False)
    llm.load_lora("python_coder", str(coder))
    llm.load_lora("translator", str(translator))
    response_a = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Write a fast inverse square root in C."}],
        active_loras=[{"name": "python_coder", "scale": 1.0}], max_tokens=8,
    )
    response_b = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Explain quantum physics in Spanish."}],
        active_loras=[{"name": "translator", "scale": 0.85}], max_tokens=8,
    )
    response_c = llm.create_chat_completion(
        messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=8,
    )
    llm.unload_lora("python_coder")
    assert llm.list_loras() == ["translator"]
    for response in (response_a, response_b, response_c):
        assert response["object"] == "chat.completion" and response["usage"]["completion_tokens"] > 0
    n_embd = llm.n_embd()
    response = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Tell me a story about a futuristic city."}],
        control_vector={"data": [0.1] * (n_embd * 4), "layer_start": 2, "layer_end": 4}, max_tokens=8,
    )
    assert response["choices"][0]["message"]["content"] is not None
    llm.close()


def test_an_adapter_outliving_its_model_is_not_freed_twice(tiny_model_path: Path, tiny_lora_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp frees a model's adapters with the model; a handle finalized later must not free again."""
    import llama_cpp._adapters as adapters_module

    freed: list[object] = []
    real_lib = adapters_module.lib

    class CountingLib:
        def __getattr__(self, name: str) -> object:
            return getattr(real_lib, name)

        def llama_adapter_lora_free(self, ptr: object) -> None:
            freed.append(ptr)
            real_lib.llama_adapter_lora_free(ptr)

    monkeypatch.setattr(adapters_module, "lib", CountingLib())
    llm = _llm(tiny_model_path)
    llm.load_lora("a", tiny_lora_path)
    llm.load_lora("b", tiny_lora_path)
    llm.unload_lora("b")
    assert len(freed) == 1  # an adapter unloaded while its model lives is freed by us
    handle = llm._adapters._loaded["a"][1]
    llm._ctx.close()
    llm._model.close()  # as a garbage collector may order it: the model first, which frees "a"
    handle.close()
    llm.close()
    assert len(freed) == 1  # "a" was not freed a second time


@pytest.mark.parametrize("scale", [1e300, -1e39, float("nan"), True])
def test_a_scale_a_32_bit_float_cannot_hold_is_refused(scale: Any) -> None:
    """llama.cpp applies a scale as a 32-bit float: 1e300 is finite in Python and infinite there."""
    from llama_cpp.engine.normalize import check_lora_scale

    with pytest.raises(ValueError, match="within a 32-bit float's range"):
        check_lora_scale(scale, "the scale")
    assert check_lora_scale(3e38, "the scale") == 3e38
