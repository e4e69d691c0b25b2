"""Several models from one server: chosen by the request's ``model``, loaded on first use, at most
``max_loaded_models`` at once (the least recently used idle one unloaded), an unknown one a 404; a server
of one model serves it whatever the request names."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from serving import assert_error, running, tiny_settings
from llama_cpp_server import ModelPool, ModelSettings, Settings

from llama_cpp.testing import TinyLlamaSpec, write_tiny_llama


def test_the_request_chooses_the_model_and_idle_ones_are_unloaded(chat_model_path: Path, tmp_path: Path) -> None:
    other = write_tiny_llama(tmp_path / "other.gguf", TinyLlamaSpec(seed=99))
    settings = Settings(models=[ModelSettings(model=str(chat_model_path), model_alias="a", n_ctx=512),
                                ModelSettings(model=str(other), model_alias="b", n_ctx=512)],
                        max_loaded_models=1)
    with running(settings) as base:
        assert [m["id"] for m in httpx.get(f"{base}/v1/models").json()["data"]] == ["a", "b"]

        def complete(model: str) -> str:
            reply = httpx.post(f"{base}/v1/completions", json={"model": model, "prompt": "Once", "max_tokens": 6,
                                                               "temperature": 0})
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == model
            return reply.json()["choices"][0]["text"]

        def loaded() -> set[str]:
            text = httpx.get(f"{base}/metrics").text
            return {line.split('model="')[1].split('"')[0] for line in text.splitlines()
                    if line.startswith("llamacpp:n_decode_total")}

        a = complete("a")
        assert loaded() == {"a"}
        b = complete("b")
        assert loaded() == {"b"}  # max_loaded_models=1: "a" went when "b" came
        assert a != b  # two different models answered
        assert complete("a") == a and loaded() == {"a"}
        assert_error(httpx.post(f"{base}/v1/completions", json={"model": "c", "prompt": "x"}), 404, param="model",
                     says="available: a, b")


def test_a_server_of_one_model_serves_the_openai_names_clients_send(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path)) as base:
        completion = httpx.post(f"{base}/v1/completions", json={"model": "gpt-3.5-turbo-instruct", "prompt": "Once",
                                                                "max_tokens": 4, "temperature": 0})
        chat = httpx.post(f"{base}/v1/chat/completions", json={
            "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0})
        named = httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "Once", "max_tokens": 4,
                                                           "temperature": 0})
        assert completion.status_code == chat.status_code == 200, (completion.text, chat.text)
        assert completion.json()["model"] == chat.json()["model"] == "tiny"  # answered with its alias
        assert completion.json()["choices"][0]["text"] == named.json()["choices"][0]["text"]


def test_two_models_with_one_name_are_refused(chat_model_path: Path) -> None:
    settings = Settings(models=[ModelSettings(model=str(chat_model_path)), ModelSettings(model=str(chat_model_path))])
    with pytest.raises(ValueError, match="give one a model_alias"):
        ModelPool(settings.model_list(), settings.server())
