"""Stopping the server while a generation runs.

uvicorn cancels the tasks of requests still open after its graceful timeout (2 s in these tests), then runs
the app's shutdown, without waiting for the worker threads those requests decode on.  The shutdown must
cancel their engine requests and wait for the threads before it frees the models: freeing a model under a
decoding thread crashed the process (SIGSEGV in ``llama_decode``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from serving import metric, wait_until


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_stopping_with_a_generation_running(serve: Callable[..., Any], caplog: pytest.LogCaptureFixture,
                                            stream: bool) -> None:
    ended: list[str] = []

    def client(base_url: str) -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Go on"}], "stream": stream}
        try:
            with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60) as response:
                for _ in response.iter_bytes():
                    pass
            ended.append("answered")
        except httpx.HTTPError as exc:
            ended.append(type(exc).__name__)

    caplog.set_level(logging.WARNING, logger="llama_cpp_server")
    # one sequence of the whole context and no token limit: the generation outlasts the graceful timeout
    with serve(n_ctx=8192, n_seq_max=1) as base_url:
        thread = threading.Thread(target=client, args=(base_url,), daemon=True)
        thread.start()
        wait_until(lambda: metric(base_url, "requests_processing") == 1, "the generation starts", timeout=15)
    thread.join(10)
    assert ended, "the client was neither answered nor cut off"
    assert "requests still running at shutdown" not in caplog.text  # the models were freed, after the threads
