"""llama-server's spelling of its flags: each reaches the setting it means, a llama-server command line starts
this server, and the server-wide sampling defaults apply to the requests that set nothing themselves."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from llama_cpp_server import load_settings
from llama_cpp_server.llama_server_flags import translate
from serving import free_port, llama_server, running, serving_process, tiny_settings


def test_each_llama_server_flag_reaches_its_setting(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# the team's keys\nk2\n\nk3\n")
    settings = load_settings([
        "-m", "m.gguf", "-c", "4096", "-np", "6", "-t", "3", "-tb", "2", "-ngl", "all", "-b", "1024",
        "-ub", "256", "-a", "zeta,alpha", "--api-key", "k1", "--api-key-file", str(keys), "--host", "0.0.0.0",
        "--port", "8081", "--cors-origins", "localhost,https://a.example", "-fa", "on", "--pooling", "mean",
        "--embeddings", "--metrics", "--jinja", "--no-slots", "-n", "64", "--temp", "0.5", "--top-k", "20",
        "--top-p", "0.9", "--min-p", "0.1", "-s", "42", "-to", "30", "--no-webui", "-mm", "p.gguf",
        "--slot-save-path", str(tmp_path)])
    assert (settings.model, settings.n_ctx, settings.n_seq_max, settings.n_threads, settings.n_threads_batch,
            settings.n_gpu_layers, settings.n_batch, settings.n_ubatch) == ("m.gguf", 4096, 6, 3, 2, "all", 1024, 256)
    assert settings.model_alias == "alpha"  # llama-server names the model by its first alias, sorted
    assert settings.api_keys == ["k1", "k2", "k3"]
    assert (settings.host, settings.port, settings.cors_origins) == ("0.0.0.0", 8081, ["localhost", "https://a.example"])
    assert (settings.flash_attn_type, settings.pooling_type, settings.embeddings) == (1, 1, True)
    assert (settings.default_max_tokens, settings.default_temperature, settings.default_top_k,
            settings.default_top_p, settings.default_min_p) == (64, 0.5, 20, 0.9, 0.1)
    assert (settings.seed, settings.request_timeout, settings.chat_page, settings.mmproj_path) == (42, 30, False,
                                                                                                  "p.gguf")
    assert (settings.slot_save_path, settings.slots_endpoint) == (str(tmp_path), False)


def test_the_other_spellings_and_this_servers_own_flags_mix() -> None:
    settings = load_settings(["--ctx_size=2048", "--parallel", "-1", "--n-gpu-layers", "0", "--reranking",
                              "--model", "m.gguf", "--n_seq_max", "2", "--embeddings", "true", "-fa", "auto"])
    assert (settings.n_ctx, settings.n_gpu_layers, settings.pooling_type, settings.embeddings) == (2048, "0", 4,
                                                                                                  True)
    assert settings.n_seq_max == 2 and settings.flash_attn_type == -1  # the later flag wins, as in llama-server
    assert translate(["--model", "m.gguf", "--n_ctx", "512"]) == ["--model", "m.gguf", "--n_ctx", "512"]


@pytest.mark.parametrize(("args", "says"), [
    (["--no-jinja"], "Jinja"), (["-fa", "sometimes"], "on, off"),
    (["--pooling", "max"], "mean"), (["-c"], "a value"),
    (["--api-key-file", "/nonexistent/keys"], "cannot read")])
def test_flags_this_server_cannot_honour_are_refused_with_the_reason(args: list[str], says: str) -> None:
    with pytest.raises(SystemExit, match=says):
        load_settings(["-m", "m.gguf", *args])


def test_a_slot_folder_must_exist() -> None:
    with pytest.raises(ValueError, match="not an existing folder"):
        load_settings(["-m", "m.gguf", "--slot-save-path", "/nonexistent/folder"])


def test_a_llama_server_command_line_starts_this_server(chat_model_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "-m", str(chat_model_path), "-a", "tiny", "-c", "512",
               "-np", "2", "-t", "1", "--port", str(port), "--jinja", "--metrics", "-n", "3"]
    with serving_process(command, port, "the server") as base:
        props = httpx.get(f"{base}/props", timeout=10).json()
        assert props["total_slots"] == 2 and props["model_alias"] == "tiny"
        assert props["default_generation_settings"]["params"]["n_predict"] == 3
        reply = httpx.post(f"{base}/completion", json={"prompt": "Hi"}, timeout=30).json()
        assert reply["tokens_predicted"] == 3 and reply["stop_type"] == "limit"  # -n: the server's default


@pytest.mark.parametrize(("flags", "per_sequence"), [([], 1024), (["-np", "4"], 256)])
def test_sequences_left_to_the_default_each_may_use_the_whole_context(chat_model_path: Path, flags: list[str],
                                                                      per_sequence: int) -> None:
    """llama-server's automatic --parallel (its default) puts 4 sequences in one KV buffer, each allowed the
    whole context; a number of sequences given shares the context out.  Once, left unset here, a request of
    1081 tokens to ``-c 4096`` was refused (1024 per sequence) where llama-server answered it."""
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "-m", str(chat_model_path), "-c", "1024", "-t", "1",
               "--port", str(port), *flags]
    with serving_process(command, port, "the server") as ours, llama_server(chat_model_path, "-c", "1024",
                                                                            *flags) as theirs:
        mine, its = (httpx.get(f"{base}/props", timeout=10).json() for base in (ours, theirs))
    assert mine["total_slots"] == its["total_slots"] == 4
    assert mine["default_generation_settings"]["n_ctx"] == its["default_generation_settings"]["n_ctx"] == per_sequence


def test_server_defaults_apply_only_where_a_request_sets_nothing(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path, default_temperature=0.0, default_max_tokens=5)) as base:
        greedy = httpx.post(f"{base}/v1/completions", json={"prompt": "Once", "max_tokens": 5, "temperature": 0},
                            timeout=30).json()["choices"][0]["text"]
        for _ in range(2):  # without a temperature the server's 0 applies: the same text every time
            reply = httpx.post(f"{base}/v1/completions", json={"prompt": "Once"}, timeout=30).json()
            assert reply["choices"][0]["text"] == greedy and reply["usage"]["completion_tokens"] == 5
        native = httpx.post(f"{base}/completion", json={"prompt": "Once"}, timeout=30).json()
        assert native["tokens_predicted"] == 5 and native["generation_settings"]["temperature"] == 0.0
        own = httpx.post(f"{base}/completion", json={"prompt": "Once", "max_tokens": 2}, timeout=30).json()
        assert own["tokens_predicted"] == 2  # the request's own limit wins, under either name
        chat = httpx.post(f"{base}/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2}, timeout=30).json()
        assert chat["usage"]["completion_tokens"] <= 2


def test_the_localhost_shorthand_lets_local_pages_in(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path, cors_origins=["localhost"])) as base:
        def allowed(origin: str) -> str | None:
            reply = httpx.options(f"{base}/v1/models", headers={"Origin": origin, "Access-Control-Request-Method":
                                                                "GET"}, timeout=10)
            return reply.headers.get("access-control-allow-origin")

        assert allowed("http://localhost:5173") == "http://localhost:5173"
        assert allowed("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
        assert allowed("https://evil.example") is None
        assert allowed("http://localhost.evil.example") is None
