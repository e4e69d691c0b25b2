"""llama-server's ``POST /props`` against llama-server itself: 501 unless started with ``--props``, then
``{"success": true}`` (it changes nothing, there or here), and ``GET /props`` says which; a property named
in the body is a 400 naming it here."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from llama_cpp_server.settings import load_settings
from serving import assert_error, llama_server, running, tiny_settings


@pytest.mark.parametrize("enabled", [False, True], ids=["off", "--props"])
def test_post_props_answers_as_llama_server(chat_model_path: Path, enabled: bool) -> None:
    flags = ["--props"] if enabled else []
    with running(tiny_settings(chat_model_path, n_seq_max=1, props_endpoint=enabled)) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", *flags) as theirs:
        answers = [httpx.post(f"{base}/props", json={}, timeout=10) for base in (ours, theirs)]
        assert [a.status_code for a in answers] == [200 if enabled else 501] * 2
        if enabled:
            assert answers[0].json() == answers[1].json() == {"success": True}
        else:
            assert answers[0].json()["error"]["type"] == answers[1].json()["error"]["type"] == "not_supported_error"
        shown = [httpx.get(f"{base}/props", timeout=10).json()["endpoint_props"] for base in (ours, theirs)]
        assert shown == [enabled, enabled]
        if enabled:
            assert httpx.post(f"{ours}/props", timeout=10).json() == {"success": True}  # no body at all
            assert_error(httpx.post(f"{ours}/props", json={"n_ctx": 4}, timeout=10), 400, param="n_ctx")
            assert_error(httpx.post(f"{ours}/props", json=[1], timeout=10), 400)
            assert_error(httpx.post(f"{ours}/props", content=b"{", timeout=10), 400)
            assert_error(httpx.post(f"{ours}/props", content="[" * 5000 + "]" * 5000, timeout=10), 400,
                         says="not valid JSON")  # deeper than Python's parser goes


def test_the_props_flag_turns_it_on() -> None:
    assert load_settings(["--props"]).props_endpoint is True
    assert load_settings([]).props_endpoint is False
