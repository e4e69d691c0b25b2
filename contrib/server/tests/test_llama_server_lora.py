"""llama-server's LoRA routes against llama-server itself, with a tiny random adapter of the tiny chat model:
``GET /lora-adapters`` lists the same entries, a request's ``lora`` and ``POST /lora-adapters`` give the same
greedy text there and here, and bad values are refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_cpp_server import load_settings
from serving import CHAT_TEMPLATE, assert_error, llama_server, running, tiny_settings

from llama_cpp.testing import TinyLlamaSpec, write_tiny_lora

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_lora(tmp_path_factory.mktemp("lora") / "tiny-lora.gguf",
                           TinyLlamaSpec(chat_template=CHAT_TEMPLATE), scale=2.0)


@pytest.fixture(scope="module")
def both(chat_model_path: Path, adapter: Path) -> Iterator[tuple[str, str]]:
    with running(tiny_settings(chat_model_path, n_seq_max=1, lora_adapters=[{"path": str(adapter)}])) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--lora", str(adapter)) as theirs:
        yield ours, theirs


def text(base: str, **fields: Any) -> str:
    reply = httpx.post(f"{base}/completion", json={"prompt": PROMPT, "n_predict": 10, "temperature": 0, **fields},
                       timeout=60)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["content"])


def set_scale(base: str, scale: float) -> None:
    reply = httpx.post(f"{base}/lora-adapters", json=[{"id": 0, "scale": scale}], timeout=10)
    assert reply.status_code == 200 and reply.json() == {"success": True}, reply.text


def test_the_adapters_are_listed_as_llama_server_lists_them(both: tuple[str, str]) -> None:
    ours, theirs = (httpx.get(f"{base}/lora-adapters", timeout=10).json() for base in both)
    assert ours == theirs and [e["id"] for e in ours] == [0] and ours[0]["scale"] == 1.0


def test_scales_per_request_and_for_the_next_requests_give_llama_servers_text(both: tuple[str, str]) -> None:
    ours, theirs = both
    try:
        applied = text(theirs)
        assert text(ours) == applied
        half = [text(base, lora=[{"id": 0, "scale": 0.5}]) for base in both]
        assert half[0] == half[1]
        # empty: the server's scales (llama-server reads it so too, but reuses the prompt it cached under
        # the last request's scales, so its text is not compared)
        assert text(ours, lora=[]) == applied
        off = [text(base, lora=[{"id": 0, "scale": 0}]) for base in both]
        assert off[0] == off[1] != applied
        for base in both:
            set_scale(base, 0.0)
        assert [text(base) for base in both] == off
        assert httpx.get(f"{ours}/lora-adapters", timeout=10).json()[0]["scale"] == 0.0
        chat = httpx.post(f"{ours}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                "max_tokens": 3, "lora": [{"id": 0, "scale": 1}]})
        assert chat.status_code == 200, chat.text
    finally:
        for base in both:
            set_scale(base, 1.0)


def test_the_request_lora_is_in_its_generation_settings(both: tuple[str, str]) -> None:
    answers = [httpx.post(f"{base}/completion", json={"prompt": PROMPT, "n_predict": 2, "temperature": 0,
                                                      "lora": [{"id": 0, "scale": 0.5}]}, timeout=60).json()
               for base in both]
    assert answers[0]["generation_settings"]["lora"] == answers[1]["generation_settings"]["lora"]


def test_bad_values_are_refused_naming_the_field(both: tuple[str, str]) -> None:
    ours = both[0]
    body = {"prompt": PROMPT, "n_predict": 2}
    assert_error(httpx.post(f"{ours}/completion", json={**body, "lora": [{"id": 3, "scale": 1}]}), 400,
                 param="lora")
    assert_error(httpx.post(f"{ours}/completion", json={**body, "lora": [{"id": 0, "scale": 1},
                                                                          {"id": 0, "scale": 2}]}), 400, param="lora")
    assert_error(httpx.post(f"{ours}/completion", json={**body, "lora": [{"id": 0, "scale": "x"}]}), 422,
                 param="lora[0].scale")
    assert_error(httpx.post(f"{ours}/completion", json={**body, "lora": [{"id": -1, "scale": 1}]}), 422,
                 param="lora[0].id")
    assert_error(httpx.post(f"{ours}/lora-adapters", json={"id": 0}), 400)
    assert_error(httpx.post(f"{ours}/lora-adapters", json=[{"id": 0}]), 422, param="[0].scale")
    assert_error(httpx.post(f"{ours}/lora-adapters", json=[{"id": 9, "scale": 1}]), 400)


def test_the_lora_flags_reach_the_settings() -> None:
    settings = load_settings(["--lora", "a.gguf,b.gguf", "--lora-scaled", "c.gguf:0.5", "--lora-init-without-apply"])
    assert [(a.path, a.scale) for a in settings.lora_adapters] == [("a.gguf", 1.0), ("b.gguf", 1.0), ("c.gguf", 0.5)]
    assert settings.lora_init_without_apply is True
    with pytest.raises(SystemExit, match="FNAME:SCALE"):
        load_settings(["--lora-scaled", "c.gguf"])
    with pytest.raises(ValueError, match="listed twice"):
        load_settings(["--lora", "a.gguf,a.gguf"])
