"""The Llama constructor and model-level API: legacy keywords, LoRA, logging, metadata, tokens."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from oracle import llama_completion

import llama_cpp
from llama_cpp import Llama, _logger
from llama_cpp_native import lib


def test_seed_vocab_tokenization(llama_vocab_file) -> None:
    """llama-cpp-python's own test: the SPM vocab's ids for 'Hello World'."""
    with Llama(str(llama_vocab_file("llama-spm")), vocab_only=True, verbose=False) as llm:
        assert llm.tokenize(b"Hello World") == [1, 15043, 2787]
        assert llm.tokenize(b"Hello World</s>", special=True) == [1, 15043, 2787, 2]
        assert llm.tokenize(b"") == [1]
        assert llm.detokenize([15043, 2787]) == b" Hello World"
        with pytest.raises(TypeError, match="bytes"):
            llm.tokenize("Hello")  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="vocab_only"):
            llm.create_completion("Hello")


def test_model_information(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=0, verbose=False) as llm:
        assert llm.n_ctx() == llm.n_ctx_train() == 4096  # n_ctx=0: the model's own size
        assert (llm.n_embd(), llm.n_layer(), llm.n_head(), llm.n_vocab()) == (64, 2, 4, 32000)
        assert (llm.token_bos(), llm.token_eos()) == (1, 2)
        assert llm.metadata["general.architecture"] == "llama"
        assert llm.metadata["llama.embedding_length"] == "64"
        assert llm.n_params() > 0


def test_kv_overrides_reach_the_model(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), verbose=False, kv_overrides={"llama.context_length": 1024}) as llm:
        assert llm.n_ctx_train() == 1024
    with pytest.raises(ValueError, match="kv_overrides"):
        Llama(str(tiny_model_path), verbose=False, kv_overrides={"general.name": "x" * 200})


def test_langchain_style_legacy_keywords(tiny_model_path: Path) -> None:
    legacy = dict(rope_freq_scale=0.0, rope_freq_base=0.0, lora_path=None, lora_base=None, n_ctx=256, n_parts=-1,
                  seed=-1, f16_kv=True, logits_all=False, vocab_only=False, use_mlock=False, n_threads=2,
                  n_batch=8, use_mmap=True, last_n_tokens_size=64, verbose=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Llama(str(tiny_model_path), **legacy) as llm:
            assert llm.model_params.load_mode == lib.LLAMA_LOAD_MODE_MMAP
            assert llm.context_params.n_batch == 8
            assert llm.create_completion("Hi", max_tokens=2)["usage"]["completion_tokens"] == 2
    messages = " ".join(str(w.message) for w in caught if issubclass(w.category, DeprecationWarning))
    assert "n_parts" in messages and "f16_kv" in messages and "use_mmap" in messages
    assert "lora_base" not in messages  # passed as None: not used, nothing to warn about


def test_use_mlock_without_mmap_maps_to_mlock(tiny_model_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="load_mode"):
        with Llama(str(tiny_model_path), use_mmap=False, use_mlock=True, verbose=False) as llm:
            assert llm.model_params.load_mode == lib.LLAMA_LOAD_MODE_MLOCK


def test_seed_zero_is_a_seed(tiny_model_path: Path) -> None:
    def sample(seed: int) -> str:
        with Llama(str(tiny_model_path), n_ctx=256, seed=seed, verbose=False) as llm:
            return llm.create_completion("Once", max_tokens=12, temperature=1.5, top_k=0, top_p=1.0,
                                         min_p=0.0)["choices"][0]["text"]

    assert sample(0) == sample(0)  # the reference turned 0 into a random seed
    assert len({sample(-1) for _ in range(3)}) > 1  # negative: random


def test_n_gpu_layers_values(tiny_model_path: Path) -> None:
    for value, expected in (("auto", -1), ("all", -2), (0, 0), ("3", 3)):
        with Llama(str(tiny_model_path), n_gpu_layers=value, vocab_only=True, verbose=False) as llm:
            assert llm.model_params.n_gpu_layers == expected
    with pytest.raises(TypeError, match="n_gpu_layers"):
        Llama(str(tiny_model_path), n_gpu_layers=1.5, verbose=False)


def test_lora_path_applies_the_adapter_as_llama_cpp_does(tiny_model_path: Path, tiny_lora_path: Path) -> None:
    prompt = "Once upon a time"
    with Llama(str(tiny_model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False) as plain:
        base = plain.create_completion(prompt, max_tokens=16, temperature=0.0)["choices"][0]["text"]
    with Llama(str(tiny_model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False,
               lora_path=str(tiny_lora_path)) as adapted:
        tuned = adapted.create_completion(prompt, max_tokens=16, temperature=0.0)["choices"][0]["text"]
        gen = adapted.generate(adapted.tokenize(prompt.encode(), special=True), temperature=0.0)
        tokens = [next(gen) for _ in range(16)]
        gen.close()
        produced = adapted.detokenize(tokens)
    assert tuned != base
    native = llama_completion(tiny_model_path, prompt, 16, n_ctx=512, extra=["--lora", str(tiny_lora_path)])
    assert produced == native  # the same bytes as llama.cpp with the same adapter


def test_logging_levels_aliases_and_filters(tiny_model_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    try:
        assert _logger.parse_verbosity("quiet") == 2 and _logger.parse_verbosity(True) == 5
        assert _logger.parse_verbosity(9) == 5 and _logger.parse_verbosity("-3") == 0
        with pytest.raises(ValueError, match="unknown verbosity"):
            _logger.parse_verbosity("loud")
        with pytest.raises(TypeError):
            _logger.parse_verbosity(1.5)

        llm = Llama(str(tiny_model_path), vocab_only=True, verbosity="info")
        capfd.readouterr()
        Llama(str(tiny_model_path), vocab_only=True, verbosity="info").close()
        assert "llama_model_loader" in capfd.readouterr().err  # info level shows the loader
        llm.set_log_filters(["llama_model_loader"])
        assert llm.get_log_filters() == ["llama_model_loader"]
        Llama(str(tiny_model_path), vocab_only=True, verbosity="info").close()
        assert "llama_model_loader" not in capfd.readouterr().err  # filtered out
        llm.reset_log_filters()
        assert llm.get_log_filters() == _logger.DEFAULT_LOG_FILTERS
        Llama(str(tiny_model_path), vocab_only=True, verbose=False).close()
        assert capfd.readouterr().err == ""  # verbose=False: errors only
        assert llm.get_verbosity() == 1
        llm.close()
    finally:
        _logger.reset_logging()


# A Llama held by another module's global is freed in the interpreter's teardown, after the logging module's
# callback: its context logs while it is freed.
HELD_TILL_EXIT = """
import json, sys
from llama_cpp import Llama
llm = Llama(sys.argv[1], n_ctx=256, verbose=sys.argv[2] == "verbose")
llm("Once upon a time", max_tokens=4)
json.held = llm
print("generated")
"""


@pytest.mark.parametrize("verbosity", ["quiet", "verbose"])
def test_a_llama_freed_in_the_interpreters_teardown_exits_cleanly(tiny_model_path: Path, verbosity: str) -> None:
    for _ in range(2):  # the crash was the teardown's order, the same each run
        proc = subprocess.run([sys.executable, "-c", HELD_TILL_EXIT, str(tiny_model_path), verbosity],
                              capture_output=True, text=True, timeout=120)
        assert (proc.returncode, proc.stdout) == (0, "generated\n"), proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_top_level_names_of_the_seed() -> None:
    for name in ("Llama", "LlamaState", "LlamaGrammar", "LogitsProcessorList", "StoppingCriteriaList",
                 "MinTokensLogitsProcessor", "llama_backend_init", "llama_model_load_from_file", "LLAMA_DEFAULT_SEED"):
        assert hasattr(llama_cpp, name), name


def test_tokenizer_objects(tiny_model_path: Path) -> None:
    from llama_cpp import LlamaTokenizer

    tok = LlamaTokenizer.from_ggml_file(str(tiny_model_path))
    assert tok.encode("Hello World") == [1, 15043, 2787]
    assert tok.encode("</s>") != [1, 2]  # user text spelling a special token stays text
    assert tok.decode([15043, 2787]) == " Hello World"

    class Upper:
        """A custom tokenizer (the seed's ``tokenizer=`` argument) that Llama delegates to."""

        def tokenize(self, text, add_bos=True, special=False):
            return [1] + [100 + b for b in text.upper()] if add_bos else [100 + b for b in text.upper()]

        def detokenize(self, tokens, prev_tokens=None, special=False):
            return bytes(t - 100 for t in tokens if t >= 100)

    with Llama(str(tiny_model_path), vocab_only=True, verbose=False, tokenizer=Upper()) as llm:
        assert llm.tokenize(b"ab") == [1, 165, 166]
        assert llm.detokenize([165, 166]) == b"AB"


def test_model_accessors_and_helpers(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        assert llm.n_head_kv() == 2 and llm.n_embd_out() == 64 and llm.n_swa() == 0
        assert llm.model is not None and llm.ctx is not None and not llm.is_hybrid
        llm.eval(llm.tokenize(b"Hello"))
        assert llm.eval_tokens == llm.tokenize(b"Hello") and llm.loaded_lora_count == 0
    logprobs = Llama.logits_to_logprobs([1.0, 2.0, 3.0])
    assert abs(float(sum(__import__("numpy").exp(logprobs))) - 1.0) < 1e-6
    assert Llama.longest_token_prefix([1, 2, 3], [1, 2, 4]) == 2


def test_mmproj_without_a_multimodal_handler_is_refused(tiny_model_path: Path) -> None:
    with pytest.raises(ValueError, match="multimodal"):
        Llama(str(tiny_model_path), str(tiny_model_path), verbose=False)


def test_pickle_loads_the_model_again_with_the_same_arguments(tiny_model_path: Path) -> None:
    import pickle

    with Llama(str(tiny_model_path), n_ctx=1024, seed=7, verbose=False, chat_format="chatml") as llm:
        data = pickle.dumps(llm)
        expected = llm.create_completion("Once", max_tokens=6, temperature=0.0)["choices"][0]["text"]
    with pickle.loads(data) as copy:
        assert copy.n_ctx() == 1024 and copy.chat_format == "chatml" and copy._seed == 7
        assert copy.create_completion("Once", max_tokens=6, temperature=0.0)["choices"][0]["text"] == expected
    with pytest.raises(RuntimeError, match="closed"):
        pickle.dumps(llm)


def test_llama_types_describe_what_the_api_returns(tiny_model_path: Path) -> None:
    import typing

    from llama_cpp import llama_types

    assert llama_cpp.ChatCompletionRequestMessage is llama_types.ChatCompletionRequestMessage
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        out = llm.create_completion("Hi", max_tokens=2)
    keys = typing.get_type_hints(llama_types.CreateCompletionResponse).keys()
    assert set(out) == set(keys)
    assert set(out["choices"][0]) == set(typing.get_type_hints(llama_types.CompletionChoice))


def test_the_seed_reexports_cache_and_speculative_names_at_top_level() -> None:
    from llama_cpp import llama_cache, llama_speculative

    for name in ("BaseLlamaCache", "LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaTrieCache",
                 "HybridCheckpointCache"):
        assert getattr(llama_cpp, name) is getattr(llama_cache, name)
    for name in ("LlamaDraftModel", "LlamaSpecEngine", "SpecConfig", "SpeculativeType", "create_spec_engine",
                 "create_native_spec_engine", "speculative_output_limits"):
        assert getattr(llama_cpp, name) is getattr(llama_speculative, name)
    for name in ("BaseLlamaTokenizer", "LlamaTokenizer", "AbortCriteria", "LlamaState", "LogitsProcessorList",
                 "StoppingCriteriaList", "MinTokensLogitsProcessor", "LlamaGrammar"):
        assert hasattr(llama_cpp, name), name
    with pytest.raises(AttributeError, match="no attribute 'NotASeedName'"):
        llama_cpp.NotASeedName  # noqa: B018


class _CharTokenizer:
    """A stand-in for a Hugging Face tokenizer: one token per character, 1 as the start token."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + [100 + ord(c) % 1000 for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i - 100) for i in ids if i >= 100)  # the start token decodes to nothing


def test_a_hugging_face_tokenizer_replaces_the_vocabulary(tiny_model_path: Path) -> None:
    from llama_cpp.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer

    tokenizer = LlamaHFTokenizer(_CharTokenizer())
    assert isinstance(tokenizer, BaseLlamaTokenizer) and llama_cpp.BaseLlamaTokenizer is BaseLlamaTokenizer
    assert tokenizer.tokenize(b"ab") == [1, 197, 198]
    assert tokenizer.detokenize([199], prev_tokens=[197, 198]) == b"c"
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False, tokenizer=tokenizer) as llm:
        assert llm.tokenize(b"Hi") == [1, 172, 205]
        assert llm.detokenize([172, 205]) == b"Hi"
        out = llm.create_completion("Hi", max_tokens=3, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == 3
    with pytest.raises(TypeError, match="encode"):
        LlamaHFTokenizer(object())
    with pytest.raises(TypeError, match="BaseLlamaTokenizer"):
        Llama(str(tiny_model_path), verbose=False, tokenizer="gpt2")


def test_abort_criteria_stops_a_generation_from_another_thread(tiny_model_path: Path) -> None:
    import threading

    from llama_cpp import AbortCriteria, StoppingCriteriaList

    event = threading.Event()
    abort = AbortCriteria(event)
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        seen = 0
        for _chunk in llm.create_completion("Once", max_tokens=200, temperature=0.0, stream=True,
                                            stopping_criteria=StoppingCriteriaList([abort])):
            seen += 1
            if seen == 5:
                event.set()
        assert 5 <= seen <= 6
        assert abort.event is event and not AbortCriteria().event.is_set()
