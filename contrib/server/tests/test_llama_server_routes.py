"""The rest of llama-server's routes, against llama-server itself: its unprefixed aliases of the OpenAI routes,
its native ``/embedding(s)``, ``/props`` and ``/v1/health``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llama_cpp_server import Settings
from serving import llama_server, running, tiny_settings
from test_native_completion import post, shape, stream

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}


@pytest.fixture(scope="module")
def both(chat_model_path: Path) -> Iterator[tuple[str, str]]:
    with running(tiny_settings(chat_model_path, n_seq_max=1)) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--alias", "tiny") as theirs:
        yield ours, theirs


def test_the_unprefixed_aliases_answer_as_the_v1_routes(both: tuple[str, str]) -> None:
    ours = both[0]
    v1 = httpx.post(f"{ours}/v1/chat/completions", json=CHAT, timeout=60).json()
    bare = httpx.post(f"{ours}/chat/completions", json=CHAT, timeout=60).json()
    assert bare["choices"][0]["message"] == v1["choices"][0]["message"]
    assert httpx.get(f"{ours}/models", timeout=10).json()["data"] == httpx.get(f"{ours}/v1/models",
                                                                                timeout=10).json()["data"]
    for base in both:
        assert httpx.get(f"{base}/v1/health", timeout=10).json() == {"status": "ok"}


# what llama.cpp's web UI (services/chat.service.ts) and llama.vim's instruct (autoload/llama.vim) send to the chat
# route: llama-server's own fields beside OpenAI's
WEB_UI_CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "return_progress": True,
               "timings_per_token": True, "typ_p": 1.0, "repeat_last_n": 64, "backend_sampling": False,
               "samplers": ["top_k", "typ_p", "top_p", "min_p", "temperature"], "temperature": 0, "max_tokens": 6}
LLAMA_VIM_INSTRUCT = {"messages": [{"role": "user", "content": "hi"}], "id_slot": 7, "n_predict": 6,
                      "cache_prompt": True, "response_fields": ["choices"], "temperature": 0}


def test_llama_servers_own_fields_on_the_chat_route_as_its_clients_send_them(both: tuple[str, str]) -> None:
    """The web UI's streamed chat and llama.vim's instruct request were refused (422, unknown fields) where
    llama-server answers them; n_predict is the length, the sampler names are llama-server's."""
    ours, theirs = (post(base, LLAMA_VIM_INSTRUCT, "/v1/chat/completions") for base in both)
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == 6
    texts = []
    for base in both:
        events, _ = stream(base, WEB_UI_CHAT, "/v1/chat/completions")
        texts.append("".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices")))
    assert texts[0] == texts[1] and texts[0]
    letters = post(both[0], {**LLAMA_VIM_INSTRUCT, "samplers": "kypmt", "n_predict": 0}, "/v1/chat/completions")
    assert letters["usage"]["completion_tokens"] == 1  # n_predict 0 samples one token, as llama-server's


OPENAI = [("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}),
          ("/v1/chat/completions", CHAT)]


@pytest.mark.parametrize("path, body", OPENAI)
def test_openai_answers_end_with_llama_servers_timings(both: tuple[str, str], path: str, body: dict[str, object]) -> None:
    ours, theirs = (post(base, body, path) for base in both)
    assert shape(ours["timings"]) == shape(theirs["timings"])
    for answer in (ours, theirs):
        assert list(answer)[-1] == "timings"
        timings, usage = answer["timings"], answer["usage"]
        assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
        assert timings["predicted_n"] == usage["completion_tokens"] == 6
        assert timings["prompt_ms"] > 0 and timings["predicted_ms"] > 0 and timings["predicted_per_second"] > 0


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("path, body", OPENAI)
def test_the_last_event_of_an_openai_stream_has_the_timings(both: tuple[str, str], path: str, body: dict[str, object],
                                                            include_usage: bool) -> None:
    asked = {**body, "stream_options": {"include_usage": True}} if include_usage else body
    ours, theirs = (stream(base, asked, path)[0] for base in both)
    for events in (ours, theirs):
        assert [i for i, event in enumerate(events) if "timings" in event] == [len(events) - 1]
    assert shape(ours[-1]["timings"]) == shape(theirs[-1]["timings"])
    # usage as OpenAI sends it: only when asked (llama-server's completion streams always end with it)
    assert ("usage" in ours[-1]) is include_usage


def test_props_has_llama_servers_settings_context_and_template(both: tuple[str, str]) -> None:
    ours, theirs = (httpx.get(f"{base}/props", timeout=10).json() for base in both)
    for key in ("total_slots", "model_alias", "chat_template", "bos_token", "eos_token", "modalities",
                "endpoint_slots", "endpoint_props"):
        assert ours[key] == theirs[key], key
    mine, its = ours["default_generation_settings"], theirs["default_generation_settings"]
    assert mine["n_ctx"] == its["n_ctx"]
    assert shape(mine["params"]) == shape(its["params"])
    for key in ("temperature", "top_k", "n_predict", "samplers", "repeat_last_n", "seed"):
        assert mine["params"][key] == pytest.approx(its["params"][key]), key
    assert set(ours) <= set(theirs)  # llama-server's keys; the web UI's and the file type's left out


@pytest.fixture(scope="module")
def embedders(minilm_model_path: Path) -> Iterator[tuple[str, str]]:
    settings = Settings(model=str(minilm_model_path), model_alias="minilm", embeddings=True, n_ctx=512,
                        n_threads=1, n_threads_batch=1)
    with running(settings) as ours, llama_server(minilm_model_path, "--embeddings", "-c", "512") as theirs:
        yield ours, theirs


@pytest.mark.parametrize("field", ["input", "content"])
def test_native_embeddings_equal_llama_servers(embedders: tuple[str, str], field: str) -> None:
    body = {field: ["the cat sat", "a dog ran far"]}
    for path in ("/embedding", "/embeddings"):
        ours, theirs = (httpx.post(base + path, json=body, timeout=60).json() for base in embedders)
        assert shape(ours) == shape(theirs) and [r["index"] for r in ours] == [0, 1]
        for mine, its in zip(ours, theirs, strict=True):
            assert len(mine["embedding"]) == len(its["embedding"]) == 1
            assert mine["embedding"][0] == pytest.approx(its["embedding"][0], abs=1e-4)


def test_native_embeddings_normalise_as_asked_and_refuse_empty_inputs(embedders: tuple[str, str]) -> None:
    body = {"input": "the cat sat", "embd_normalize": -1}
    ours, theirs = (httpx.post(base + "/embedding", json=body, timeout=60).json() for base in embedders)
    assert ours[0]["embedding"][0] == pytest.approx(theirs[0]["embedding"][0], abs=1e-4)
    for bad in ({"input": ""}, {"input": ["a", ""]}, {}, {"input": ["a", [1, 2]]}):
        reply = httpx.post(embedders[0] + "/embedding", json=bad, timeout=30)
        assert reply.status_code == 400 and "input" in reply.text, (bad, reply.text)


def test_a_vector_per_token_is_native_only(minilm_model_path: Path) -> None:
    """With pooling 'none' /embedding answers a vector per token; OpenAI's route has no such shape and refuses,
    as llama-server does (it once answered 200 with the vectors nested, or with base64 concatenated)."""
    settings = Settings(model=str(minilm_model_path), model_alias="minilm", embeddings=True, n_ctx=512,
                        pooling_type=0, n_threads=1, n_threads_batch=1)
    with running(settings) as ours, llama_server(minilm_model_path, "--embeddings", "-c", "512", "--pooling",
                                                 "none") as theirs:
        replies = [httpx.post(base + "/v1/embeddings", json={"input": ["the cat sat"], "model": "minilm"},
                              timeout=60) for base in (ours, theirs)]
        native = [httpx.post(base + "/embedding", json={"input": "the cat sat"}, timeout=60).json()
                  for base in (ours, theirs)]
    assert [r.status_code for r in replies] == [400, 400]
    assert "pooling" in replies[0].json()["error"]["message"] and "pooling" in replies[1].json()["error"]["message"]
    assert len(native[0][0]["embedding"]) == len(native[1][0]["embedding"]) > 1  # one per token


def test_native_embeddings_need_an_embedding_model(both: tuple[str, str]) -> None:
    reply = httpx.post(both[0] + "/embedding", json={"input": "x"}, timeout=30)
    assert reply.status_code == 501 and "embeddings" in reply.json()["error"]["message"]


@pytest.mark.parametrize("body", [
    {"content": "The quick brown fox, 12 times!"},
    {"content": "<s>hi there", "add_special": True, "with_pieces": True},
    {"content": "<s>hi there", "parse_special": False, "with_pieces": True},
    {"content": ["Once", 2501, " a time"], "add_special": True},
    {"content": "naïve café ünïcode", "with_pieces": True}], ids=["text", "pieces", "unparsed", "mixed", "bytes"])
def test_tokenize_equals_llama_servers(both: tuple[str, str], body: dict[str, object]) -> None:
    ours, theirs = (httpx.post(base + "/tokenize", json=body, timeout=30).json() for base in both)
    assert ours == theirs


def test_detokenize_equals_llama_servers(both: tuple[str, str]) -> None:
    tokens = httpx.post(both[1] + "/tokenize", json={"content": "Once upon a time", "add_special": True},
                        timeout=30).json()["tokens"]
    ours, theirs = (httpx.post(base + "/detokenize", json={"tokens": tokens}, timeout=30).json() for base in both)
    assert ours["content"] == theirs["content"] == "<s> Once upon a time"


def test_a_prompt_past_the_context_is_llama_servers_exceed_context_error(both: tuple[str, str]) -> None:
    prompt = "hello " * 3000
    for path, body in (("/completion", {"prompt": prompt, "n_predict": 4}),
                       ("/v1/completions", {"prompt": prompt, "max_tokens": 4})):
        replies = [httpx.post(base + path, json=body, timeout=60) for base in both]
        assert [r.status_code for r in replies] == [400, 400], [r.text for r in replies]
        ours, theirs = (r.json()["error"] for r in replies)
        assert ours["type"] == theirs["type"] == "exceed_context_size_error"
        assert (ours["n_prompt_tokens"], ours["n_ctx"]) == (theirs["n_prompt_tokens"], theirs["n_ctx"])


def test_without_a_key_an_unknown_route_is_a_401(chat_model_path: Path) -> None:
    with running(tiny_settings(chat_model_path, api_keys=["k"])) as base:
        assert httpx.get(f"{base}/no/such/route", timeout=10).status_code == 401
        assert httpx.get(f"{base}/no/such/route", headers={"Authorization": "Bearer k"}, timeout=10).status_code == 404
        assert httpx.get(f"{base}/health", timeout=10).status_code == 200


@pytest.fixture
def slot_servers(chat_model_path: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Fresh servers (no request has run yet) with a slot folder each."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    with running(tiny_settings(chat_model_path, n_seq_max=1, slot_save_path=str(tmp_path / "ours"))) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--slot-save-path",
                         str(tmp_path / "theirs")) as theirs:
        yield ours, theirs


def test_slots_save_erase_and_restore_as_llama_server(slot_servers: tuple[str, str]) -> None:
    fresh = [httpx.get(base + "/slots", timeout=10).json() for base in slot_servers]
    assert shape(fresh[0]) == shape(fresh[1]) and fresh[0][0]["n_ctx"] == fresh[1][0]["n_ctx"]
    body = {"prompt": "Once upon a time there was a", "n_predict": 6, "temperature": 0}
    first = [post(base, body) for base in slot_servers]
    saved = [httpx.post(base + "/slots/0?action=save", json={"filename": "story.bin"}, timeout=30).json()
             for base in slot_servers]
    assert shape(saved[0]) == shape(saved[1]) and saved[0]["n_saved"] == saved[1]["n_saved"] > 0
    erased = [httpx.post(base + "/slots/0?action=erase", timeout=30).json() for base in slot_servers]
    assert erased[0] == erased[1] == {"id_slot": 0, "n_erased": saved[0]["n_saved"]}
    restored = [httpx.post(base + "/slots/0?action=restore", json={"filename": "story.bin"}, timeout=30).json()
                for base in slot_servers]
    assert shape(restored[0]) == shape(restored[1]) and restored[0]["n_restored"] == saved[0]["n_saved"]
    again = post(slot_servers[0], body)  # from the restored memory: only the last prompt token again
    assert again["content"] == first[0]["content"] == first[1]["content"]
    assert again["timings"]["prompt_n"] == 1 and again["timings"]["cache_n"] == again["tokens_evaluated"] - 1


@pytest.mark.parametrize("name", ["../escape.bin", "a/b.bin", "", " lead.bin", "trail.", "..", "a\\b", "x\x01y"])
def test_slot_file_names_that_leave_the_folder_are_refused(slot_servers: tuple[str, str], name: str) -> None:
    for base in slot_servers:
        reply = httpx.post(base + "/slots/0?action=save", json={"filename": name}, timeout=30)
        assert reply.status_code == 400, (base, name, reply.text)


def test_slot_actions_need_a_folder_and_a_real_slot(both: tuple[str, str], slot_servers: tuple[str, str]) -> None:
    for base in both:  # started without a slot folder
        assert httpx.post(base + "/slots/0?action=erase", timeout=30).status_code == 501
    for base in slot_servers:
        assert httpx.post(base + "/slots/0?action=fly", timeout=30).status_code == 400
    assert httpx.post(slot_servers[0] + "/slots/7?action=erase", timeout=30).status_code == 400  # llama-server: 200
    reply = httpx.post(slot_servers[0] + "/slots/0?action=restore", json={"filename": "missing.bin"}, timeout=30)
    assert reply.status_code == 400 and "Unable to restore" in reply.text
    with running(tiny_settings(Path(httpx.get(both[0] + "/props", timeout=10).json()["model_path"]),
                               slots_endpoint=False)) as off:
        assert httpx.get(off + "/slots", timeout=10).status_code == 501
