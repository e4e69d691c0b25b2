"""Models on demand: a model idle for ``sleep_idle_seconds`` is freed and loaded again by the next request
(the same answer, its memory given back meanwhile), and ``POST /models/load`` / ``/models/unload`` do it by
hand, refusing unknown names and never freeing a model under a running request.  And what a balancer in
front of several servers reads of each: ``GET /prefixes``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from llama_cpp_server.settings import load_settings
from serving import assert_error, running, tiny_settings, wait_until

from llama_cpp import Llama
from llama_cpp._adapters import NO_ADAPTERS
from llama_cpp.engine.prefix_summary import PrefixSummary, block_hashes, chain_start

ASK = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def status(base: str, name: str = "smol") -> str:
    listed = httpx.get(f"{base}/models", timeout=10).json()["data"]
    return next(model["status"]["value"] for model in listed if model["id"] == name)


def resident_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def complete(base: str) -> str:
    reply = httpx.post(f"{base}/v1/completions", json=ASK, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["text"]


def test_an_idle_model_sleeps_and_the_next_request_wakes_it(smollm2_model_path: Path) -> None:
    # a context of 8192 tokens: its KV cache (about 190 MB, written when it is made) is this server's alone,
    # where the weights' file pages may be shared with another Llama of this process that maps the same file
    settings = tiny_settings(smollm2_model_path, model_alias="smol", n_seq_max=2, n_ctx=8192,
                             sleep_idle_seconds=1.0)
    with Llama(str(smollm2_model_path), n_ctx=256, verbose=False), running(settings) as base:  # the file shared
        first = complete(base)
        awake = resident_mb()
        wait_until(lambda: status(base) == "sleeping", "the idle model is freed", timeout=10)
        wait_until(lambda: resident_mb() < awake - 100, "the context's memory given back", timeout=10)
        assert httpx.get(f"{base}/health", timeout=10).json() == {"status": "ok"}
        assert complete(base) == first  # awake again (its status may be "sleeping" anew by now on a slow machine)


def test_requests_around_a_sleep_all_succeed(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path, sleep_idle_seconds=0.3)) as base:
        seen: list[str] = []

        def watch() -> None:
            while len(seen) < 400 and "sleeping" not in seen[-1:]:
                seen.append(status(base, "tiny"))

        watcher = threading.Thread(target=watch)
        watcher.start()
        answers = []
        for pause in (0.0, 0.35, 0.5, 0.2, 0.45):  # some land while it sleeps or as it is freed
            threading.Event().wait(pause)
            answers.append(complete(base))
        watcher.join()
        assert "sleeping" in seen and len(set(answers)) == 1


def test_load_and_unload_by_hand(smollm2_model_path: Path) -> None:
    """On SmolLM2, whose tokens take long enough that a stream is still running when the unload comes."""
    with running(tiny_settings(smollm2_model_path, n_ctx=1024)) as base:
        assert status(base, "tiny") == "loaded"
        assert_error(httpx.post(f"{base}/models/load", json={"model": "tiny"}, timeout=10), 400, param="model")
        for route in ("load", "unload"):
            assert_error(httpx.post(f"{base}/models/{route}", json={"model": "nope"}, timeout=10), 404,
                         param="model")
            assert_error(httpx.post(f"{base}/models/{route}", json={}, timeout=10), 400, param="model")
        long = {**ASK, "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=long, timeout=60) as running_stream:
            lines = running_stream.iter_lines()  # kept: a dropped iterator closes the stream, which cancels it
            next(lines)  # a request is running on the model
            assert_error(httpx.post(f"{base}/models/unload", json={"model": "tiny"}, timeout=10), 409,
                         param="model")
        wait_until(lambda: httpx.post(f"{base}/models/unload", json={"model": "tiny"}, timeout=10).status_code
                   != 409, "the cancelled request ends")
        assert status(base, "tiny") == "unloaded"
        assert_error(httpx.post(f"{base}/models/unload", json={"model": "tiny"}, timeout=10), 400, param="model")
        assert httpx.post(f"{base}/models/load", json={"model": "tiny"}, timeout=60).json() == {"success": True}
        assert status(base, "tiny") == "loaded" and complete(base)


def test_status_changes_and_load_progress_stream_over_sse(smollm2_model_path: Path) -> None:
    """``/models/sse`` as llama-server's: each model's status first, then ``loading`` with the load's progress
    (increasing to 1.0), ``loaded``, ``unloaded``, and ``sleeping`` when idle."""
    # asleep 5 s after it is idle: long enough that it cannot fall asleep before the unload, on a slow machine
    with running(tiny_settings(smollm2_model_path, n_ctx=512, sleep_idle_seconds=5.0)) as base:
        events: list[dict] = []
        ready = threading.Event()

        def listen() -> None:
            with httpx.stream("GET", f"{base}/models/sse", timeout=60) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        ready.set()
                    if events and events[-1].get("data", {}).get("status") == "sleeping":
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert ready.wait(30)
        assert events[0] == {"model": "tiny", "event": "model_status", "data": {"status": "loaded"}}
        assert httpx.post(f"{base}/models/unload", json={"model": "tiny"}, timeout=10).json() == {"success": True}
        assert httpx.post(f"{base}/models/load", json={"model": "tiny"}, timeout=60).json() == {"success": True}
        listener.join(30)  # the model goes to sleep 5 s later
        statuses = [e["data"]["status"] for e in events]
        assert statuses[0] == "loaded" and statuses[1] == "unloaded" and statuses[-2:] == ["loaded", "sleeping"]
        loading = [e["data"]["progress"] for e in events if e["data"]["status"] == "loading"]
        values = [p["value"] for p in loading]
        assert len(values) > 2 and values == sorted(values) and values[0] == 0.0 and values[-1] == 1.0
        assert all(p["stages"] == ["text_model"] and p["current"] == "text_model" for p in loading)
        assert all(e["model"] == "tiny" and e["event"] == "model_status" for e in events)


def test_the_sleep_bound_is_checked() -> None:
    with pytest.raises(ValueError, match="sleep_idle_seconds"):
        tiny_settings(Path("x.gguf"), sleep_idle_seconds=0)


@pytest.mark.parametrize("given, seconds", [("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("250ms", 0.25),
                                            (120, 120.0), ("-1", -1), ("-5m", -1)])
def test_ollamas_keep_alive_is_the_sleep_bound(given: object, seconds: float) -> None:
    assert tiny_settings(Path("x.gguf"), keep_alive=given).sleep_idle_seconds == seconds
    assert load_settings(["--model", "x.gguf", "--keep-alive", str(given)]).sleep_idle_seconds == seconds


@pytest.mark.parametrize("given, says", [("0", "keep_alive 0"), ("5x", "a duration such as '5m'"),
                                         (True, "seconds or a duration")])
def test_a_bad_keep_alive_is_refused_naming_it(given: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        tiny_settings(Path("x.gguf"), keep_alive=given)
    with pytest.raises(ValueError, match="two names of one setting"):
        tiny_settings(Path("x.gguf"), keep_alive="5m", sleep_idle_seconds=10)
    if not isinstance(given, bool):
        with pytest.raises(SystemExit, match="--keep-alive"):
            load_settings(["--model", "x.gguf", "--keep-alive", str(given)])


def test_the_prefixes_route_is_the_engines_summary(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path, n_seq_max=2)) as base:
        prompt = " ".join(f"word{i}" for i in range(80))
        httpx.post(f"{base}/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=30)
        tokens = httpx.post(f"{base}/tokenize", json={"content": prompt, "add_special": True},
                            timeout=10).json()["tokens"]
        summary = httpx.get(f"{base}/prefixes", params={"block_tokens": 16}, timeout=10).json()
        assert summary["name"] == "tiny" and summary["block_tokens"] == 16 and summary["model"]
        ours = PrefixSummary(summary["model"], 16, tuple(summary["hashes"]))
        assert ours.held(block_hashes(tokens, chain_start(summary["model"], NO_ADAPTERS), 16)) == len(tokens) // 16
        assert_error(httpx.get(f"{base}/prefixes", params={"block_tokens": 0}, timeout=10), 400,
                     param="block_tokens")
