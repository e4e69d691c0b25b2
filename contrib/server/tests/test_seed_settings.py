"""The reference server's settings and modules: every one of its settings is accepted under its name, every
``Llama`` keyword is a setting, the seed README's ``--hf_model_repo_id ... --model '*q8_0.gguf'`` command
serves a model from the Hub (here an offline Hugging Face cache), streams carry sse-starlette's pings
unless ``disable_ping_events``, and ``llama_cpp.server.{app,settings,types,model}`` have the reference's
names."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from serving import free_port, running, tiny_settings
from llama_cpp_server import ConfigFileSettings, LlamaProxy, ModelSettings, ServerSettings, Settings, create_app
from llama_cpp_server import bridge, load_settings
from llama_cpp_server.models import NOT_PASSED, llama_kwargs, load_llama

from llama_cpp import Llama, _params
from llama_cpp.engine import RequestScope
from llama_cpp.testing import TinyLlamaSpec, write_tiny_llama

# The Llama keywords that are objects, and the settings that stand for them.
OBJECT_KEYWORDS = {"model_path": "model", "tokenizer": "hf_pretrained_model_name_or_path",
                   "chat_handler": "chat_format"}
# Llama keywords the server gives itself: the load's progress goes to /models/sse
SERVER_OWNED = {"progress_callback"}

# The reference server's settings (llama_cpp/server/settings.py of the seed, and of the upstream project
# it forked: use_mmap, use_mlock, embedding, flash_attn, lora_base, lora_path), each with a value a user
# could write on its command line (None: checked by its own test below, it changes what the others mean).
REFERENCE_MODEL_SETTINGS = {
    "model": "m.gguf", "model_alias": "m", "n_gpu_layers": "0", "split_mode": "1", "load_mode": "1",
    "main_gpu": "0", "tensor_split": ["0.5", "0.5"], "vocab_only": "false", "check_tensors": "false",
    "use_extra_bufts": "true", "no_host": "false", "kv_overrides": ["a.b=int:1", "c=str:x"],
    "rpc_servers": "host:50052", "seed": "7", "n_ctx": "2048", "n_batch": "512", "n_ubatch": "512",
    "n_seq_max": "2", "n_threads": "2", "n_threads_batch": "2", "rope_scaling_type": "-1", "pooling_type": "-1",
    "attention_type": "-1", "flash_attn_type": "1", "rope_freq_base": "0", "rope_freq_scale": "0",
    "yarn_ext_factor": "-1", "yarn_attn_factor": "1", "yarn_beta_fast": "32", "yarn_beta_slow": "1",
    "yarn_orig_ctx": "0", "mul_mat_q": "true", "logits_all": "true", "embeddings": "false",
    "offload_kqv": "true", "no_perf": "false", "op_offload": "true", "swa_full": "true", "kv_unified": "true",
    "last_n_tokens_size": "64", "numa": "false", "chat_format": "chatml", "clip_model_path": "mmproj.gguf",
    "cache": "false", "cache_type": "ram", "cache_size": "1024", "hf_tokenizer_config_path": None,
    "hf_pretrained_model_name_or_path": "org/tokenizer", "hf_model_repo_id": None,
    "draft_model": "prompt-lookup-decoding", "draft_model_num_pred_tokens": "10", "type_k": "1", "type_v": "1",
    "verbose": "true", "use_mmap": "true", "use_mlock": "false", "embedding": "false", "flash_attn": "true",
    "lora_base": "base.gguf", "lora_path": "adapter.gguf",
}
REFERENCE_SERVER_SETTINGS = {
    "host": "0.0.0.0", "port": "8080", "ssl_keyfile": "key.pem", "ssl_certfile": "cert.pem", "api_key": "k",
    "interrupt_requests": "true", "disable_ping_events": "false", "root_path": "/api",
}


def llama_keywords() -> set[str]:
    """``Llama``'s keywords: its signature's, and the older ones it still maps (``use_mmap``, ``lora_path``...)."""
    parameters = inspect.signature(Llama.__init__).parameters
    named = {name for name, p in parameters.items() if name != "self" and p.kind is not p.VAR_KEYWORD}
    return named | set(_params.LEGACY_MAPPED)


def test_every_llama_keyword_is_a_setting() -> None:
    keywords = llama_keywords()
    assert {"main_gpu", "tensor_split", "rope_freq_base", "yarn_orig_ctx", "type_k", "type_v", "offload_kqv",
            "kv_unified", "lora_path", "kv_overrides"} <= keywords  # the enumeration sees them
    missing = {k for k in keywords - set(OBJECT_KEYWORDS) - SERVER_OWNED if k not in Settings.model_fields}
    assert not missing, f"Llama keywords that are no server setting: {sorted(missing)}"
    for keyword, setting in OBJECT_KEYWORDS.items():
        assert keyword in keywords and setting in ModelSettings.model_fields
    assert SERVER_OWNED <= keywords and not SERVER_OWNED & set(Settings.model_fields)


def test_every_setting_reaches_llama_or_is_read_by_the_server() -> None:
    assert NOT_PASSED <= set(ModelSettings.model_fields)  # no stale name
    takes = llama_keywords() | set(_params.LEGACY_IGNORED)
    strays = {name for name in ModelSettings.model_fields if name not in NOT_PASSED and name not in takes}
    assert not strays, f"settings passed to Llama that it does not take: {sorted(strays)}"


def _flags(values: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for name, value in values.items():
        argv += [f"--{name}", *(value if isinstance(value, list) else [value])]
    return argv


def test_every_reference_setting_is_accepted_under_its_name_on_the_command_line() -> None:
    given = {k: v for k, v in {**REFERENCE_MODEL_SETTINGS, **REFERENCE_SERVER_SETTINGS}.items() if v is not None}
    given.pop("chat_format")  # hf_pretrained_model_name_or_path alone; chatml is checked below
    settings = load_settings(_flags(given))
    assert set(REFERENCE_MODEL_SETTINGS) <= set(ModelSettings.model_fields)
    assert set(REFERENCE_SERVER_SETTINGS) <= set(ServerSettings.model_fields)
    model = settings.model_list()[0]
    assert model.tensor_split == [0.5, 0.5]  # the reference's list flags (argparse's nargs)
    assert model.kv_overrides == {"a.b": 1, "c": "x"}
    assert model.mmproj_path == "mmproj.gguf"  # clip_model_path is the reference's name of mmproj_path
    assert model.speculative == {"engine": "prompt-lookup", "num_pred_tokens": 10}
    assert model.flash_attn_type == 1 and model.embeddings is False and model.verbose is True
    server = settings.server()
    assert server.api_keys == ["k"] and server.root_path == "/api" and server.interrupt_requests is True
    assert load_settings(["--chat_format", "chatml"]).chat_format == "chatml"


def test_given_settings_reach_llama_and_the_others_are_left_to_its_defaults(tmp_path: Path) -> None:
    settings = Settings(model="m.gguf", main_gpu=1, tensor_split=[0.25, 0.75], flash_attn=True, rope_freq_base=1e6,
                        rope_freq_scale=0.5, yarn_ext_factor=0.0, yarn_orig_ctx=4096, type_k=8, type_v=8,
                        offload_kqv=False, kv_unified=True, lora_path="adapter.gguf", lora_scale=0.5,
                        kv_overrides=["general.name=str:x", "a=float:0.5", "b=bool:TRUE"], use_mmap=False,
                        embedding=True, mul_mat_q=True)
    kwargs = llama_kwargs(settings.model_list()[0], settings.server())
    assert {k: kwargs[k] for k in ("main_gpu", "tensor_split", "flash_attn_type", "rope_freq_base", "rope_freq_scale",
                                   "yarn_ext_factor", "yarn_orig_ctx", "type_k", "type_v", "offload_kqv",
                                   "kv_unified", "lora_path", "lora_scale", "use_mmap", "mul_mat_q")} == {
        "main_gpu": 1, "tensor_split": [0.25, 0.75], "flash_attn_type": 1, "rope_freq_base": 1e6,
        "rope_freq_scale": 0.5, "yarn_ext_factor": 0.0, "yarn_orig_ctx": 4096, "type_k": 8, "type_v": 8,
        "offload_kqv": False, "kv_unified": True, "lora_path": "adapter.gguf", "lora_scale": 0.5,
        "use_mmap": False, "mul_mat_q": True}
    assert kwargs["kv_overrides"] == {"general.name": "x", "a": 0.5, "b": True}
    assert kwargs["embeddings"] is True  # embedding: the reference's spelling, also choosing LlamaEmbedding
    assert not {"split_mode", "swa_full", "logits_all", "yarn_beta_fast", "n_keep", "flash_attn", "embedding",
                "model", "model_alias"} & set(kwargs)  # not given: Llama's defaults; the server's own: not passed
    # the server's context defaults are passed whatever Llama's are
    assert (kwargs["n_ctx"], kwargs["n_seq_max"], kwargs["n_batch"]) == (8192, 4, 2048)


def test_settings_that_contradict_each_other_or_mean_nothing_are_refused() -> None:
    for bad, says in [({"flash_attn": True, "flash_attn_type": 0}, "disagree"),
                      ({"draft_model": "prompt-lookup-decoding", "speculative": {"engine": "ngram-mod"}}, "use one"),
                      ({"draft_model_num_pred_tokens": 4}, "goes with draft_model"),
                      ({"draft_model": "eagle"}, "prompt-lookup-decoding"),
                      ({"hf_model_repo_id": "org/repo"}, "needs model"),
                      ({"hf_model_repo_id": "org/repo", "model": "*.gguf", "hf_repo": "org/other", "hf_file": "x"},
                       "use one"),
                      ({"model": "m.gguf", "hf_repo": "org/repo", "hf_file": "*.gguf"}, "both name the model"),
                      ({"chat_format": "hf-autotokenizer"}, "needs hf_pretrained_model_name_or_path"),
                      ({"chat_format": "chatml", "hf_tokenizer_config_path": "t.json"}, "chat_format is chatml"),
                      ({"kv_overrides": ["no-type"]}, "key=type:value"),
                      ({"kv_overrides": {"n": "int:many"}}, "not a int"),
                      ({"mmproj_path": "a.gguf", "clip_model_path": "b.gguf"}, "different files")]:
        with pytest.raises(ValueError, match=says):
            Settings(**bad)


def test_the_reference_spellings_of_numbers_and_lists() -> None:
    settings = load_settings(["--n_threads", "-1", "--n_threads_batch", "-1", "--api_keys", "a", "b",
                              "--kv_overrides", "x=int:1", "y=str:a=b", "--log_filters", "CUDA", "ggml"])
    assert settings.n_threads == settings.n_threads_batch == (os.cpu_count() or 1)
    assert settings.api_keys == ["a", "b"] and settings.log_filters == ["CUDA", "ggml"]
    assert settings.kv_overrides == {"x": 1, "y": "a=b"}
    assert load_settings(["--tensor_split", "0.5,0.5"]).tensor_split == [0.5, 0.5]  # pydantic-settings' forms stay
    assert load_settings(["--kv_overrides", '{"k": 2}']).kv_overrides == {"k": 2}


# -- a model from the Hugging Face Hub ----------------------------------------------------------------------
REPO_ID = "tiny-org/tiny-chat-GGUF"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def offline_hub(cache: Path, files: dict[str, bytes]) -> Path:
    """A Hugging Face cache holding REPO_ID's ``files`` at COMMIT, laid out as huggingface_hub lays it out."""
    storage = cache / f"models--{REPO_ID.replace('/', '--')}"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    for name, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = storage / "snapshots" / COMMIT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..", "..", "blobs", blob.name))
    return cache


def test_the_seed_readme_command_serves_a_model_from_the_hub(chat_model_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    model = chat_model_path.read_bytes()
    cache = offline_hub(tmp_path / "hub", {"tiny-chat-q8_0.gguf": model, "tiny-chat-q4_0.gguf": model})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--hf_model_repo_id", REPO_ID,
                             "--model", "*q8_0.gguf", "--n_ctx", "512", "--n_threads", "1", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")[-3000:]
        # the model's name is the glob, as the reference's model_alias defaults to its model setting
        assert [m["id"] for m in httpx.get(f"{base}/v1/models").json()["data"]] == ["*q8_0.gguf"]
        reply = httpx.post(f"{base}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                                 "max_tokens": 3}, timeout=30)
        assert reply.status_code == 200, reply.text
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_glob_matching_two_files_is_refused_and_the_projector_comes_from_the_same_repository(
        chat_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    model = chat_model_path.read_bytes()
    cache = offline_hub(tmp_path / "hub", {"tiny-q8_0.gguf": model, "tiny-q4_0.gguf": model,
                                           "mmproj-tiny-f16.gguf": b"GGUF projector"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # huggingface_hub reads the cache folder once, at import: after another test imported it, only its
    # constant says where the cache is
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    server = ServerSettings()
    with pytest.raises(ValueError, match="2 files of tiny-org/tiny-chat-GGUF match"):
        load_llama(ModelSettings(hf_model_repo_id=REPO_ID, model="tiny-*.gguf"), server)
    loaded: dict[str, Any] = {}

    def from_pretrained(repo_id: str, filename: str, **kwargs: Any) -> str:
        loaded.update(repo_id=repo_id, filename=filename, **kwargs)
        return "a Llama"

    monkeypatch.setattr(Llama, "from_pretrained", from_pretrained)
    assert load_llama(ModelSettings(hf_model_repo_id=REPO_ID, model="*q8_0.gguf", clip_model_path="mmproj-*"),
                      server) == "a Llama"
    assert (loaded["repo_id"], loaded["filename"]) == (REPO_ID, "*q8_0.gguf")
    assert Path(loaded["mmproj_path"]).read_bytes() == b"GGUF projector"


# -- the reference's tokenizer and speculative settings -----------------------------------------------------
def test_hf_tokenizer_config_path_renders_the_chat(chat_model_path: Path, tmp_path: Path) -> None:
    from llama_cpp_chat_formats.handler import tokenize_prompt

    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                                                   "{% endfor %}[assistant]", "eos_token": "</s>"}))
    settings = tiny_settings(chat_model_path, hf_tokenizer_config_path=str(config), n_ctx=512)
    assert settings.chat_format == "hf-tokenizer-config"  # implied, as the path means nothing else
    with load_llama(settings.model_list()[0], settings.server()) as llm:
        reply = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        assert reply["usage"]["prompt_tokens"] == len(tokenize_prompt(llm, "[user]Hi[assistant]", False))


def test_hf_pretrained_model_name_or_path_is_the_tokenizer(chat_model_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_cpp import llama_tokenizer

    made: list[str] = []
    monkeypatch.setattr(llama_tokenizer.LlamaHFTokenizer, "from_pretrained",
                        classmethod(lambda cls, name: made.append(name) or "an HF tokenizer"))  # no transformers here
    settings = tiny_settings(chat_model_path, hf_pretrained_model_name_or_path="org/tokenizer")
    kwargs = llama_kwargs(settings.model_list()[0], settings.server())
    assert kwargs["tokenizer"] == "an HF tokenizer" and made == ["org/tokenizer"]


def test_draft_model_is_prompt_lookup_decoding(chat_model_path: Path) -> None:
    settings = tiny_settings(chat_model_path, draft_model="prompt-lookup-decoding", draft_model_num_pred_tokens=4,
                             n_ctx=512, n_seq_max=1)
    with load_llama(settings.model_list()[0], settings.server()) as llm:
        assert type(llm.speculative_engine).__name__ == "LlamaPromptLookupDecoding"
        assert llm.speculative_engine.max_draft_tokens() == 4


# -- pings ----------------------------------------------------------------------------------------------------
def test_pings_keep_sse_starlettes_clock_while_items_flow() -> None:
    interval, gap, count = 0.06, 0.02, 15

    def make() -> Iterator[int]:
        for i in range(count):
            time.sleep(gap)
            yield i

    async def collect() -> list[tuple[float, Any]]:
        stream = await bridge.open_stream(make, timeout=30, scope=RequestScope(), workers=bridge.Workers(),
                                          ping_interval=interval)
        return [(time.monotonic(), item) async for item in stream]

    got = asyncio.run(collect())
    items = [item for _, item in got if item is not bridge.PING]
    pings = [t for t, item in got if item is bridge.PING]
    assert items == list(range(count)) and got[0][1] == 0  # nothing before the first item: the answer's status
    assert len(pings) >= 2, "pings come while items flow (a clock, not an idle timer)"
    first_item_at = got[0][0]
    assert pings[0] - first_item_at >= interval * 0.9
    assert all(b - a >= interval * 0.9 for a, b in zip(pings, pings[1:]))
    assert bridge.ping_event().startswith(b": ping - ") and bridge.ping_event().endswith(b"\n\n")


def _stream_lines(base: str) -> list[str]:
    body = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        return [line for line in reply.iter_lines() if line]


@pytest.mark.parametrize("disabled", [False, True])
def test_streams_carry_pings_unless_disable_ping_events(chat_model_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        disabled: bool) -> None:
    # a ping is due at every event once the interval has passed; 200 tokens take longer than a millisecond
    monkeypatch.setattr(bridge, "PING_INTERVAL", 0.001)
    with running(tiny_settings(chat_model_path, disable_ping_events=disabled, n_ctx=512)) as base:
        lines = _stream_lines(base)
        pings = [line for line in lines if line.startswith(":")]
        events = [line for line in lines if not line.startswith(":")]
        assert events[-1] == "data: [DONE]" and all(line.startswith("data: {") for line in events[:-1])
        if disabled:
            assert not pings
            return
        assert pings and all(line.startswith(": ping - ") for line in pings)
        import openai

        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none")
        request = {"model": "tiny", "prompt": "Once", "max_tokens": 50, "temperature": 0,
                   "extra_body": {"ignore_eos": True}}
        chunks = list(client.completions.create(stream=True, **request))  # the client skips the comments
        assert "".join(c.choices[0].text for c in chunks) == client.completions.create(**request).choices[0].text
        assert chunks[-1].choices[0].finish_reason == "length"


# -- the reference's modules and create_app --------------------------------------------------------------------
def test_the_reference_modules_have_its_names() -> None:
    import llama_cpp.server.app as app
    import llama_cpp.server.model as model
    import llama_cpp.server.settings as settings
    import llama_cpp.server.types as types
    import llama_cpp_server

    for name in ("ModelSettings", "ServerSettings", "Settings", "ConfigFileSettings"):
        assert getattr(settings, name) is getattr(llama_cpp_server, name)
    assert model.LlamaProxy is LlamaProxy and app.create_app is create_app
    for name in ("CreateCompletionRequest", "CreateEmbeddingRequest", "CreateChatCompletionRequest",
                 "ChatCompletionRequestMessage", "ModelData", "ModelList", "TokenizeInputRequest",
                 "TokenizeInputResponse", "TokenizeInputCountResponse", "DetokenizeInputRequest",
                 "DetokenizeInputResponse"):
        assert isinstance(getattr(types, name), type), name
    assert types.CreateCompletionRequest(prompt="Hi", max_tokens=4).max_tokens == 4
    parameters = inspect.signature(create_app).parameters
    assert [(n, p.default) for n, p in parameters.items()][:3] == [("settings", None), ("server_settings", None),
                                                                   ("model_settings", None)]
    assert issubclass(Settings, ServerSettings) and issubclass(Settings, ModelSettings)
    assert issubclass(ConfigFileSettings, ServerSettings)


def test_create_app_takes_the_reference_config_file(chat_model_path: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps({"host": "127.0.0.1", "port": 8080, "interrupt_requests": False, "models": [
        {"model": str(chat_model_path), "model_alias": "gpt-3.5-turbo", "chat_format": None, "n_gpu_layers": -1,
         "offload_kqv": True, "n_threads": 1, "n_batch": 512, "n_ctx": 512}]})
    config = ConfigFileSettings.model_validate_json(text)
    app = create_app(server_settings=ServerSettings.model_validate(config), model_settings=config.models)
    assert app.state.pool.names == ["gpt-3.5-turbo"]
    with pytest.raises(ValueError, match="go together"):
        create_app(server_settings=config)
    with pytest.raises(ValueError, match="not both"):
        create_app(Settings(), server_settings=config, model_settings=config.models)
    (tmp_path / "server.json").write_text(text)
    monkeypatch.setenv("CONFIG_FILE", str(tmp_path / "server.json"))
    assert create_app().state.pool.names == ["gpt-3.5-turbo"]  # uvicorn's --factory: the environment's file


def test_llama_proxy_holds_one_model_at_a_time(chat_model_path: Path, tmp_path: Path) -> None:
    other = write_tiny_llama(tmp_path / "other.gguf", TinyLlamaSpec(seed=99))
    proxy = LlamaProxy([ModelSettings(model=str(chat_model_path), model_alias="a", n_ctx=256, n_threads=1),
                        ModelSettings(model=str(other), model_alias="b", n_ctx=256, n_threads=1)])
    try:
        a = proxy()  # the constructor loaded the first model
        assert proxy("a") is a and list(proxy) == ["a", "b"] and proxy["b"]["model"] == str(other)
        b = proxy("b")
        assert b is not a and [s.name for s in proxy.loaded] == ["b"]
        with pytest.raises(RuntimeError):
            a.tokenize(b"closed")  # closed when b was loaded
        proxy["c"] = ModelSettings(model=str(chat_model_path), n_ctx=256, n_threads=1).model_dump_json()
        assert list(proxy) == ["a", "b", "c"]
        with pytest.raises(Exception, match="not found"):
            proxy("d")
    finally:
        proxy.free()
