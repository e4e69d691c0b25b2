"""``python -m llama_cpp.server``: the reference's command starts this server, settings come from flags,
the environment and a config file, and without the server package it says what to install."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serving import free_port, server_process, serving_process
from llama_cpp_server import load_settings


def test_the_command_serves_a_model(chat_model_path: Path) -> None:
    port = free_port()
    with serving_process([sys.executable, "-m", "llama_cpp.server", "--model", str(chat_model_path),
                          "--model_alias", "tiny", "--n_ctx", "512", "--port", str(port)], port, "the server") as base:
        reply = httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 3


def test_a_shutdown_signal_ends_the_open_streams_at_once(chat_model_path: Path) -> None:
    # uvicorn waits for open connections before the app's shutdown: a stream went on for its graceful
    # timeout (5 s), then its task was cancelled with a traceback in the log and the client cut off
    port = free_port()
    with server_process([sys.executable, "-m", "llama_cpp.server", "--model", str(chat_model_path),
                         "--n_ctx", "4096", "--port", str(port)], port, "the server") as (base, proc, log):
        body = {"prompt": "Hi", "max_tokens": 4000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=30) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # the stream is running
            proc.send_signal(signal.SIGINT)
            rest = [line[len("data: "):] for line in lines if line.startswith("data: ")]
        assert rest[-1] == "[DONE]"
        assert json.loads(rest[-2])["choices"][0]["finish_reason"] == "abort"
        assert proc.wait(30) == 0
        log.seek(0)
        output = log.read().decode(errors="replace")
        assert "graceful shutdown exceeded" not in output and "Traceback" not in output, output[-3000:]


def test_without_the_server_package_the_command_says_what_to_install() -> None:
    code = ("import runpy, sys; sys.modules['llama_cpp_server'] = None; "
            "runpy.run_module('llama_cpp.server', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "pip install llama-cpp-server" in proc.stderr
    imported = subprocess.run([sys.executable, "-c", "import sys; sys.modules['llama_cpp_server'] = None; "
                               "from llama_cpp.server import create_app"], capture_output=True, text=True, timeout=60)
    assert imported.returncode == 1 and "ImportError" in imported.stderr
    assert "pip install llama-cpp-server" in imported.stderr


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"port": 9000, "n_ctx": 1024, "api_keys": ["from-file"],
                                  "models": [{"model": "a.gguf", "model_alias": "a"}, {"model": "b.gguf"}]}))
    monkeypatch.setenv("CONFIG_FILE", str(config))
    monkeypatch.setenv("N_CTX", "2048")
    settings = load_settings(["--port", "9001"])
    assert (settings.port, settings.n_ctx, settings.api_keys) == (9001, 2048, ["from-file"])
    assert [m.name for m in settings.model_list()] == ["a", "b.gguf"]
    monkeypatch.delenv("CONFIG_FILE")
    yaml_config = tmp_path / "server.yaml"
    yaml_config.write_text("model: m.gguf\nn_seq_max: 8\ncors_origins: [https://app.example]\n")
    settings = load_settings(["--config_file", str(yaml_config)])
    assert (settings.model, settings.n_seq_max, settings.cors_origins) == ("m.gguf", 8, ["https://app.example"])


def test_bad_settings_are_refused_with_the_field(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):  # argparse's usage error for an unknown flag
        load_settings(["--no_such_flag", "1"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": [{"model": "a.gguf", "n_ctx": -5}]}))
    with pytest.raises(ValueError, match="n_ctx"):
        load_settings(["--config_file", str(bad)])
    with pytest.raises(ValueError, match="not found"):
        load_settings(["--config_file", str(tmp_path / "missing.yaml")])
    env = {**os.environ, "N_SEQ_MAX": "zero"}
    proc = subprocess.run([sys.executable, "-c", "from llama_cpp_server import load_settings; load_settings([])"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "n_seq_max" in proc.stderr
