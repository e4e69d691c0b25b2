"""Bad input gets a clear exception, never a crash or silent acceptance."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llama_cpp import Llama, StoppingCriteriaList


def test_missing_model_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        Llama(str(missing))


def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_text("this is not a model")
    with pytest.raises(ValueError, match="not a GGUF file"):
        Llama(str(path), verbose=False)


def test_truncated_gguf(tmp_path: Path, tiny_model_path: Path) -> None:
    path = tmp_path / "truncated.gguf"
    path.write_bytes(tiny_model_path.read_bytes()[:4096])
    with pytest.raises(ValueError, match="failed to load model"):
        Llama(str(path), verbose=False)


def test_corrupt_gguf_header(tmp_path: Path, tiny_model_path: Path) -> None:
    data = bytearray(tiny_model_path.read_bytes()[:65536])
    data[4:8] = (999).to_bytes(4, "little")  # unknown GGUF version
    data[8:24] = b"\xff" * 16  # absurd tensor and key counts
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="failed to load model"):
        Llama(str(path), verbose=False)


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=64, n_threads=2, verbose=False) as model:
        yield model


def test_prompt_longer_than_context_names_both_numbers(llm: Llama) -> None:
    n_ctx = llm.n_ctx()  # llama.cpp may round the requested size up
    prompt = list(range(100, 100 + n_ctx + 10))
    with pytest.raises(ValueError, match=rf"{n_ctx + 10} tokens.*{n_ctx}"):
        llm.create_completion(prompt, max_tokens=4)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_ctx": -1}, "n_ctx"), ({"n_batch": 0}, "n_batch"), ({"n_threads": 0}, "n_threads"),
    ({"n_gpu_layers": "many"}, "n_gpu_layers"), ({"n_seq_max": 1000}, "n_seq_max"),
])
def test_invalid_constructor_values_name_the_field(tiny_model_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Llama(str(tiny_model_path), verbose=False, **kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"top_p": 2.0}, "top_p"), ({"min_p": -0.1}, "min_p"), ({"top_k": 1.5}, "top_k"),
    ({"penalty_last_n": -5}, "penalty_last_n"), ({"logit_bias": {"x": 1.0}}, "logit_bias"),
    ({"mirostat_mode": 3}, "mirostat_mode"),
])
def test_invalid_sampling_values_name_the_field(llm: Llama, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        llm.create_completion("hello", max_tokens=2, **kwargs)


def test_typo_is_a_type_error_with_a_suggestion(tiny_model_path: Path) -> None:
    with pytest.raises(TypeError, match="n_ctxx.*'n_ctx'"):
        Llama(str(tiny_model_path), n_ctxx=128, verbose=False)


def test_second_generation_in_another_thread_waits_its_turn(llm: Llama) -> None:
    # The reference refused a second concurrent generation; the engine queues it (docs/differences.md).
    stream = llm.create_completion("Once upon a time", max_tokens=32, stream=True, temperature=0.0)
    next(stream)  # the first generation is now running (suspended mid-way), holding the only sequence
    results: list[dict] = []
    thread = threading.Thread(target=lambda: results.append(llm.create_completion("Another prompt", max_tokens=4)))
    thread.start()
    thread.join(timeout=0.5)
    assert thread.is_alive() and not results  # it waits: the only sequence is taken
    rest = list(stream)  # the first one finishes normally...
    assert rest[-1]["choices"][0]["finish_reason"] in {"length", "stop"}
    thread.join(timeout=60)
    assert results and results[0]["choices"][0]["finish_reason"] in {"length", "stop"}  # ...then the other runs
    # and the instance still works, with the same greedy result as a fresh run
    a = llm.create_completion("Once upon a time", max_tokens=8, temperature=0.0)["choices"][0]["text"]
    llm.reset()
    b = llm.create_completion("Once upon a time", max_tokens=8, temperature=0.0)["choices"][0]["text"]
    assert a == b


def test_calls_after_close_raise(tiny_model_path: Path) -> None:
    model = Llama(str(tiny_model_path), verbose=False)
    model.close()
    model.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        model.create_completion("hi")
    with pytest.raises(RuntimeError, match="closed"):
        model.tokenize(b"hi")


def test_close_while_other_threads_generate_ends_their_requests(tiny_model_path: Path) -> None:
    # close() used to free the context under a decode running on another thread: a segmentation fault
    model = Llama(str(tiny_model_path), n_ctx=4096, n_seq_max=1, verbose=False)
    started = threading.Event()
    outcomes: dict[str, BaseException | None] = {}

    def stream() -> None:
        try:
            for i, _ in enumerate(model.create_completion("Once upon a time", max_tokens=4000, stream=True,
                                                          ignore_eos=True)):
                if i == 5:
                    started.set()
            outcomes["stream"] = None
        except BaseException as exc:  # noqa: BLE001 - what the reader raises is the result
            outcomes["stream"] = exc

    def waiting() -> None:  # the only sequence is the stream's: this request waits in the queue
        try:
            model.create_completion("Another prompt", max_tokens=4)
            outcomes["waiting"] = None
        except BaseException as exc:  # noqa: BLE001
            outcomes["waiting"] = exc

    threads = [threading.Thread(target=stream), threading.Thread(target=waiting)]
    threads[0].start()
    assert started.wait(60)
    threads[1].start()
    deadline = time.monotonic() + 60
    while model.scheduler.stats().waiting < 1:  # it is in the queue, not yet to come: close() must end it
        assert time.monotonic() < deadline and threads[1].is_alive(), outcomes
        time.sleep(0.005)
    model.close()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    for name in ("stream", "waiting"):
        assert isinstance(outcomes[name], RuntimeError), outcomes
        assert "closed" in str(outcomes[name])
    with pytest.raises(RuntimeError, match="closed"):
        model.create_completion("hi", max_tokens=2)
    model.close()  # still idempotent


def test_close_from_inside_a_generation_is_refused(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), verbose=False) as model:
        def close_now(_ids: object, _logits: object) -> bool:
            model.close()
            return False

        with pytest.raises(RuntimeError, match="inside a generation"):
            model.create_completion("Once upon a time", max_tokens=4, stopping_criteria=StoppingCriteriaList([close_now]))
        text = model.create_completion("Once upon a time", max_tokens=4, temperature=0.0)["choices"][0]["text"]
        assert text  # the instance was left as it was


def test_token_ids_are_checked(llm: Llama) -> None:
    import numpy as np

    tokens = np.array(llm.tokenize(b"Once upon a time"), dtype=np.intc)  # numpy ids are fine
    assert llm.create_completion(tokens, max_tokens=2)["usage"]["prompt_tokens"] == len(tokens)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.eval([-1])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.create_completion([1, 10**6], max_tokens=2)
    with pytest.raises(TypeError, match="integers"):
        llm.eval([1.5])  # type: ignore[list-item]


def test_empty_inputs(llm: Llama) -> None:
    with pytest.raises(ValueError, match="at least one token"):
        llm.generate([])
    out = llm.create_completion("", max_tokens=3, temperature=0.0)  # starts from BOS
    assert out["usage"]["prompt_tokens"] == 1 and out["usage"]["completion_tokens"] == 3
