"""Servers on loopback for the tests: the real app under uvicorn, in a thread, on a free port; and the
helpers the server's tests share.  Imported by name (``from serving import ...``): a module called
``conftest`` would be the first one pytest imported under that name, another folder's."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import llama_cpp_native
import pytest
import uvicorn
from llama_cpp_server import Settings, create_app

from llama_cpp.testing import TinyLlamaSpec, llama_cpp_source_dir, write_tiny_llama

# a template with a system turn, tools and a generation prompt: enough for chat, tools and JSON tests
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(settings: Settings, *, wait_ready: bool = True) -> Iterator[str]:
    """The app for ``settings`` served on 127.0.0.1 (a free port); yields its base URL, stops it after."""
    port = free_port()
    app = create_app(settings.model_copy(update={"host": "127.0.0.1", "port": port}))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"{base}/health", timeout=2).status_code
            if status == 200 or (status == 503 and not wait_ready):
                break
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    else:
        server.should_exit = True
        raise RuntimeError("the test server did not become ready")
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def local_ray_serve() -> Iterator[str]:
    """A local Ray of this machine's 2 cores with Serve's HTTP proxy on a free port (its base URL); Serve and
    Ray are shut down after."""
    import ray
    from ray import serve

    port = free_port()
    # Serve's controller gives a starting proxy 5 s to be ready (three times, then kills it: serve.start fails)
    # and a running one 10 s per health check: a loaded machine with two cores can take longer to import it
    guards = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60"}
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 << 20,
             runtime_env={"env_vars": guards})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@contextlib.contextmanager
def serving_process(command: list[str], port: int, what: str) -> Iterator[str]:
    """``command`` (a server listening on 127.0.0.1:``port``) running until the block ends; yields its base
    URL once ``/health`` answers 200 (:func:`server_process`)."""
    with server_process(command, port, what) as (base, _, _):
        yield base


@contextlib.contextmanager
def server_process(command: list[str], port: int,
                   what: str) -> Iterator[tuple[str, subprocess.Popen[bytes], IO[bytes]]]:
    """``command`` (a server listening on 127.0.0.1:``port``) running until the block ends (terminated if it
    still runs); yields its base URL, the process and its output, once ``/health`` answers 200.  Its output
    goes to a file (a pipe nobody reads would fill up and stop it), shown if it exits before it is ready."""
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "OMP_THREAD_LIMIT": "1"})
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"{what} exited ({proc.returncode}): "
                                       f"{log.read().decode(errors='replace')[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not become ready")
                time.sleep(0.05)
            yield base, proc, log
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def llama_server(model: Path, *args: str) -> Iterator[str]:
    """llama.cpp's own llama-server (the oracle, built from the same source by ``build-tools --server``) for
    ``model`` with ``args``, one thread, on a free loopback port."""
    folder = llama_cpp_native.tools_dir()
    exe = folder / "llama-server" if folder is not None else None
    if exe is None or not exe.exists():
        pytest.fail("llama-server is not built: run `python -m llama_cpp_native build-tools --server` (the nox "
                    "tests session does)")
    port = free_port()
    with serving_process([str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "1",
                          "-tb", "1", "--no-webui", *args], port, "llama-server") as base:
        yield base


@pytest.fixture(scope="session")
def chat_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama with a small chat template (F32, fast, exact greedy text)."""
    return write_tiny_llama(tmp_path_factory.mktemp("server-model") / "tiny-chat.gguf",
                            TinyLlamaSpec(chat_template=CHAT_TEMPLATE))


# tokens of the tiny vocabulary given the fill-in-the-middle roles (llama-server's /infill needs them)
FIM_IDS = {"fim_pre": 31990, "fim_suf": 31991, "fim_mid": 31992, "fim_rep": 31993, "fim_sep": 31994}


def fim_metadata() -> tuple[tuple[str, int], ...]:
    """The GGUF keys that make a tiny model's :data:`FIM_IDS` its fill-in-the-middle tokens."""
    return tuple((f"tokenizer.ggml.{name}_token_id", token) for name, token in FIM_IDS.items())


@pytest.fixture(scope="session")
def fim_chat_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model (its template) with fill-in-the-middle tokens too: every generation route answers."""
    return write_tiny_llama(tmp_path_factory.mktemp("fim-chat") / "tiny-fim-chat.gguf",
                            TinyLlamaSpec(chat_template=CHAT_TEMPLATE, extra_metadata=fim_metadata()))


@pytest.fixture(scope="session")
def reasoning_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama with Qwen3's chat template (its thinking markers, its tool calls): a grammar forces
    a reply such as ``<think>abc</think>answer`` to test how the thinking is split out."""
    template = (llama_cpp_source_dir() / "models" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    return write_tiny_llama(tmp_path_factory.mktemp("reasoning") / "tiny-qwen3.gguf",
                            TinyLlamaSpec(chat_template=template))


def tiny_settings(model_path: Path, **overrides: Any) -> Settings:
    """Settings of a server of the tiny chat model at ``model_path``, called "tiny" (``n_ctx=2048``,
    ``n_seq_max=4`` unless given).  One thread: ggml's threads wait for each other by spinning, so with the
    client, the server and another process on two cores a two-thread decode of the tiny model took 230 ms
    instead of 2 ms."""
    values: dict[str, Any] = {"model": str(model_path), "model_alias": "tiny", "n_ctx": 2048, "n_seq_max": 4,
                              "n_threads": 1, "n_threads_batch": 1}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def serve(chat_model_path: Path) -> Callable[..., Any]:
    """``serve(**settings)`` -> a context manager giving the base URL of a server of the tiny chat model
    (:func:`tiny_settings`)."""

    def make(**overrides: Any) -> Any:
        return running(tiny_settings(chat_model_path, **overrides))

    return make


def metric(base_url: str, name: str, headers: dict[str, str] | None = None) -> float:
    """``llamacpp:<name>`` of the served model, read from ``/metrics``."""
    text = httpx.get(f"{base_url}/metrics", headers=headers, timeout=5).text
    found = re.search(rf'^llamacpp:{re.escape(name)}{{model="[^"]*"}} (\S+)$', text, re.MULTILINE)
    assert found, f"no llamacpp:{name} in /metrics:\n{text}"
    return float(found.group(1))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:g} s")
        time.sleep(0.02)


def assert_error(response: httpx.Response, status: int, *, param: str | None = None, says: str = "") -> dict:
    """``response`` is OpenAI's error object with ``status``; returns the error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"] and says in error["message"], error
    if param is not None:
        assert error["param"] == param, error
    return error
