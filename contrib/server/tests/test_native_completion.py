"""llama-server's own ``/completion`` against llama-server itself: the same request to both, greedy on the same
tiny F32 model, gives the same text, the same tokens and the same response shape (keys in order, value types,
the stream's events); ``/completions`` is the same route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import fim_metadata, llama_server, running, tiny_settings

from llama_cpp import Llama
from llama_cpp.llama_grammar import gbnf_literal
from llama_cpp.testing import TinyLlamaSpec, write_tiny_llama

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def both(chat_model_path: Path) -> Iterator[tuple[str, str]]:
    """(ours, llama-server's) base URLs, one sequence each, as llama-server's -np 1."""
    with running(tiny_settings(chat_model_path, n_seq_max=1)) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--alias", "tiny") as theirs:
        yield ours, theirs


def post(base: str, body: dict[str, Any], path: str = "/completion") -> Any:
    reply = httpx.post(base + path, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def shape(value: Any) -> Any:
    """The keys (in order) and value types of ``value``, all the way down (list items: the first one's)."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return ["list", shape(value[0])] if value else ["list"]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def same(ours: dict[str, Any], theirs: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert ours[key] == theirs[key], (key, ours[key], theirs[key])


def stream(base: str, body: dict[str, Any], path: str = "/completion") -> tuple[list[dict[str, Any]], bytes]:
    """The stream's events and its raw bytes."""
    with httpx.stream("POST", base + path, json={**body, "stream": True}, timeout=60) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read()
    events = [json.loads(line[len(b"data: "):]) for line in raw.split(b"\n")
              if line.startswith(b"data: ") and line != b"data: [DONE]"]
    return events, raw


def test_greedy_text_tokens_and_the_whole_shape_equal_llama_servers(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "tokens", "tokens_predicted", "tokens_evaluated", "stop", "stop_type",
         "stopping_word", "truncated", "has_new_line", "model", "prompt")
    assert ours["stop_type"] == "limit" and ours["tokens_predicted"] == 12 == len(ours["tokens"])
    assert shape(ours) == shape(theirs)
    assert ours["timings"]["prompt_n"] + ours["timings"]["cache_n"] == ours["tokens_evaluated"]
    assert ours["generation_settings"]["n_predict"] == theirs["generation_settings"]["n_predict"] == 12
    assert ours["generation_settings"]["samplers"] == theirs["generation_settings"]["samplers"]
    assert post(both[0], body, "/completions")["content"] == ours["content"]  # the same route


def test_a_stop_word_ends_the_text_before_it(both: tuple[str, str]) -> None:
    first = post(both[1], {"prompt": PROMPT, "n_predict": 12, "temperature": 0})["content"]
    word = first[len(first) // 2:][:2]  # a stop string from the middle of the greedy text
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "stop": [word]}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "stop_type", "stopping_word", "tokens_predicted")
    assert ours["stop_type"] == "word" and ours["stopping_word"] == word and word not in ours["content"]


def test_the_end_of_generation_token_is_a_token_of_no_text(both: tuple[str, str], chat_model_path: Path) -> None:
    with Llama(str(chat_model_path), vocab_only=True, verbose=False) as vocab:
        eos_id = vocab.token_eos()
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "logit_bias": [[eos_id, 100.0]],
            "return_tokens": True}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "tokens", "stop_type", "tokens_predicted")
    assert ours["stop_type"] == "eos" and ours["tokens"] == [eos_id] and ours["content"] == ""


@pytest.mark.parametrize("prompt", [[1, 450, 1156], ["Once", 2501, " a time"]], ids=["tokens", "mixed"])
def test_token_and_mixed_prompts_are_read_as_llama_server_reads_them(both: tuple[str, str], prompt: list[Any]) -> None:
    body = {"prompt": prompt, "n_predict": 6, "temperature": 0}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "tokens_evaluated", "prompt")


def test_several_prompts_answer_a_list_in_prompt_order(both: tuple[str, str]) -> None:
    body = {"prompt": [PROMPT, "The sky is"], "n_predict": 5, "temperature": 0}
    ours, theirs = (post(base, body) for base in both)
    assert isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs) == 2
    assert [r["index"] for r in ours] == [0, 1]
    for mine, its in zip(ours, theirs):
        same(mine, its, "index", "content", "tokens_evaluated")


def test_the_stream_has_llama_servers_events(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0}
    (ours, ours_raw), (theirs, theirs_raw) = (stream(base, body) for base in both)
    assert b"[DONE]" not in ours_raw and b"[DONE]" not in theirs_raw
    assert [(e["content"], e["tokens"], e["stop"]) for e in ours] == [(e["content"], e["tokens"], e["stop"])
                                                                      for e in theirs]
    assert [shape(e) for e in ours[:-1]] == [shape(e) for e in theirs[:-1]]
    assert shape(ours[-1]) == shape(theirs[-1]) and ours[-1]["content"] == "" and ours[-1]["tokens"] == []
    assert ours[-1]["tokens_predicted"] == theirs[-1]["tokens_predicted"] == 8


@pytest.mark.parametrize("id_slot", [0, 3])
def test_id_slot_runs_the_request_in_that_slot_as_llama_servers(both: tuple[str, str], id_slot: int) -> None:
    """(One slot each: slot 3 wraps around to slot 0, as llama-server's does; llama.vim's instruct requests
    send a request counter as id_slot.)"""
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "id_slot": id_slot}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "id_slot", "tokens_predicted")
    assert ours["id_slot"] == 0


def test_timings_per_token_time_every_event_as_llama_servers(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "timings_per_token": True}
    (ours, _), (theirs, _) = (stream(base, body) for base in both)
    assert [shape(e) for e in ours] == [shape(e) for e in theirs]
    assert all("timings" in e for e in ours)
    counts = [e["timings"]["predicted_n"] for e in ours[:-1]]
    assert counts == list(range(1, 7)) and ours[-1]["timings"]["predicted_n"] == 6
    assert [e["timings"]["prompt_n"] + e["timings"]["cache_n"] for e in ours] == [e["tokens_evaluated"] for e in ours]
    assert [e["timings"]["predicted_ms"] for e in ours] == sorted(e["timings"]["predicted_ms"] for e in ours)
    without = stream(both[0], {**body, "timings_per_token": False})[0]
    assert ["timings" in e for e in without] == [False] * 6 + [True]


LONG_PROMPT = ("Once upon a time there was a little girl who lived in a village near the forest, and every "
               "morning she walked to the river")


@pytest.fixture(scope="module")
def small_batches(chat_model_path: Path) -> Iterator[tuple[str, str]]:
    """(ours, llama-server's), one sequence each, batches of 16 tokens: a long prompt takes several decodes."""
    with running(tiny_settings(chat_model_path, n_seq_max=1, n_batch=16, n_ubatch=16)) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "-b", "16", "-ub", "16", "--alias", "tiny") as theirs:
        yield ours, theirs


def progress_of(events: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(e["prompt_progress"]["total"], e["prompt_progress"]["cache"], e["prompt_progress"]["processed"])
            for e in events if "prompt_progress" in e]


def test_return_progress_reports_each_chunk_of_the_prompt_as_llama_server(small_batches: tuple[str, str]) -> None:
    body = {"prompt": LONG_PROMPT, "n_predict": 3, "temperature": 0, "return_progress": True}
    (ours, _), (theirs, _) = (stream(base, body) for base in small_batches)
    assert [shape(e) for e in ours] == [shape(e) for e in theirs]
    assert [{k: v for k, v in e.items() if k != "prompt_progress"} for e in ours[:-1]] == \
        [{k: v for k, v in e.items() if k != "prompt_progress"} for e in theirs[:-1]]
    steps = progress_of(ours)
    assert steps == progress_of(theirs)
    total = steps[0][0]
    assert total > 16 and steps[0][2] == 0 and steps[-1][2] == total and len(steps) == 1 + -(-total // 16)
    assert [e["prompt_progress"]["time_ms"] for e in ours if "prompt_progress" in e] == \
        sorted(e["prompt_progress"]["time_ms"] for e in ours if "prompt_progress" in e)
    # the same prompt but its last word: the sequence's prefix is reused, and the report says so
    again = {**body, "prompt": LONG_PROMPT[:-len("river")] + "sea"}
    (ours, _), (theirs, _) = (stream(base, again) for base in small_batches)
    assert progress_of(ours) == progress_of(theirs)
    assert progress_of(ours)[0][1] > 16
    # not streamed, and not asked: no reports, as llama-server
    assert "prompt_progress" not in json.dumps(post(small_batches[0], body))
    assert not progress_of(stream(small_batches[0], {**body, "return_progress": False})[0])


CODE = "def f():\n    return 1\nx = 2\ny = 3\n"


def test_n_indent_ends_at_the_first_line_indented_less_as_llama_servers(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 40, "temperature": 0, "n_indent": 4, "return_tokens": True,
            "grammar": "root ::= " + json.dumps(CODE)}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "tokens", "tokens_predicted", "stop_type")
    assert ours["content"] == "def f():\n    return 1\n" and ours["stop_type"] == "limit"
    (mine, _), (its, _) = (stream(base, body) for base in both)
    assert [(e["content"], e["tokens"]) for e in mine] == [(e["content"], e["tokens"]) for e in its]


def test_t_max_predict_ms_ends_at_a_line_break_once_the_time_is_up(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 40, "temperature": 0, "grammar": "root ::= " + json.dumps(CODE),
            "t_max_predict_ms": 0.001, "t_max_prompt_ms": 500}  # llama.vscode's fields
    whole = post(both[0], body)
    assert whole["content"] == "def f():\n" and whole["stop_type"] == "limit"
    assert post(both[0], {**body, "t_max_predict_ms": -1})["content"] == CODE


def test_token_probabilities_have_llama_servers_shape_and_tokens(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 3}
    ours, theirs = (post(base, body) for base in both)
    assert shape(ours["completion_probabilities"]) == shape(theirs["completion_probabilities"])
    for mine, its in zip(ours["completion_probabilities"], theirs["completion_probabilities"], strict=True):
        assert mine["id"] == its["id"] and [t["id"] for t in mine["top_logprobs"]] == [
            t["id"] for t in its["top_logprobs"]]
        assert mine["logprob"] == pytest.approx(its["logprob"], abs=1e-3)


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 5}], ids=["greedy", "seeded"])
def test_post_sampling_probs_are_what_the_chain_left_as_llama_servers(both: tuple[str, str],
                                                                     sampling: dict[str, Any]) -> None:
    body = {"prompt": PROMPT, "n_predict": 4, "n_probs": 3, "post_sampling_probs": True, **sampling}
    ours, theirs = (post(base, body) for base in both)
    assert ours["content"] == theirs["content"]
    assert shape(ours["completion_probabilities"]) == shape(theirs["completion_probabilities"])
    for mine, its in zip(ours["completion_probabilities"], theirs["completion_probabilities"], strict=True):
        assert (mine["id"], mine["token"]) == (its["id"], its["token"])
        assert mine["prob"] == pytest.approx(its["prob"], rel=1e-5)
        assert [t["id"] for t in mine["top_probs"]] == [t["id"] for t in its["top_probs"]]
        assert [t["prob"] for t in mine["top_probs"]] == pytest.approx([t["prob"] for t in its["top_probs"]], rel=1e-5)
    if sampling["temperature"] == 0:  # the greedy chain leaves one token, certain
        assert all(p["prob"] == 1.0 and len(p["top_probs"]) == 1 for p in ours["completion_probabilities"])
    else:  # the chain's top-k, top-p and min-p leave a few, whose probabilities are no longer the model's
        assert any(len(p["top_probs"]) > 1 for p in ours["completion_probabilities"])
    (streamed, _), (their_stream, _) = (stream(base, body) for base in both)
    assert [shape(e) for e in streamed] == [shape(e) for e in their_stream]


def test_the_infill_sampler_named_in_samplers_applies_as_llama_servers(both: tuple[str, str]) -> None:
    """llama.vscode and llama.vim send ``samplers: ["top_k", "top_p", "infill"]`` with every completion: the
    chain applies each stage its list names (the infill stage once built nothing without ``use_infill``)."""
    body = {"prompt": PROMPT, "n_predict": 16, "temperature": 0.8, "seed": 1, "samplers": ["top_k", "top_p", "infill"]}
    ours, theirs = (post(base, body) for base in both)
    assert ours["content"] == theirs["content"]
    assert ours["generation_settings"]["samplers"] == theirs["generation_settings"]["samplers"]
    plain = post(both[0], {**body, "samplers": ["top_k", "top_p"]})
    assert plain["content"] != ours["content"]  # (the stage changes what is sampled here)


def test_n_keep_and_n_discard_change_nothing_without_a_context_shift_as_llama_servers(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": -1, "temperature": 0, "n_keep": -1, "n_discard": 8}
    ours, theirs = (post(base, body) for base in both)
    plain = post(both[0], {**body, "n_keep": 0, "n_discard": 0})
    same(ours, theirs, "content", "tokens_predicted", "truncated", "stop_type")
    assert ours["content"] == plain["content"] and ours["truncated"]  # ran to the end of the context, unshifted
    for key in ("n_keep", "n_discard"):
        assert ours["generation_settings"][key] == theirs["generation_settings"][key] == body[key]


def test_n_cache_reuse_moves_held_runs_into_place_as_llama_servers(both: tuple[str, str]) -> None:
    """The prompt drops a stretch of what the sequence holds (an editor's ring of context chunks does): the
    runs after it are shifted into place, not evaluated again, and the text is the same as llama-server's."""
    first = [1, *range(1000, 1060)]
    later = first[:12] + first[30:]  # 18 held tokens skipped
    for base in both:
        post(base, {"prompt": first, "n_predict": 4, "temperature": 0})
    reused = [post(base, {"prompt": later, "n_predict": 8, "temperature": 0, "n_cache_reuse": 4}) for base in both]
    same(reused[0], reused[1], "content", "tokens_predicted")
    assert reused[0]["timings"]["cache_n"] == reused[1]["timings"]["cache_n"] == len(later) - 1
    assert reused[0]["timings"]["prompt_n"] == reused[1]["timings"]["prompt_n"] == 1
    # without it, only the shared prefix is reused here (llama-server would restore its RAM prompt cache's
    # state of the request above instead, which this server's default, no prompt cache, has not)
    post(both[0], {"prompt": first, "n_predict": 4, "temperature": 0})
    assert post(both[0], {"prompt": later, "n_predict": 8, "temperature": 0})["timings"]["cache_n"] == 12


def test_response_fields_keep_only_those_paths(both: tuple[str, str]) -> None:
    body = {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
            "response_fields": ["content", "generation_settings/n_predict", "no/such"]}
    ours, theirs = (post(base, body) for base in both)
    assert ours == theirs and list(ours) == ["content", "generation_settings/n_predict"]


def test_bad_values_are_refused_naming_the_field(both: tuple[str, str]) -> None:
    ours = both[0]
    for body, field in (({"prompt": PROMPT, "n_predict": -2}, "n_predict"),
                        ({"prompt": PROMPT, "samplers": ["top_k", "no_such"]}, "samplers"),
                        ({"prompt": PROMPT, "logit_bias": [[10**9, 1.0]]}, "logit_bias"),
                        ({"prompt": PROMPT, "n_keep": -2}, "n_keep"),
                        ({"prompt": PROMPT, "n_discard": -1}, "n_discard"),
                        ({"prompt": PROMPT, "n_cache_reuse": -1}, "n_cache_reuse"),
                        ({"prompt": PROMPT, "post_sampling_probs": "often"}, "post_sampling_probs"),
                        ({"prompt": PROMPT, "no_such_field": 1}, "no_such_field"),
                        ({"prompt": []}, "prompt")):
        reply = httpx.post(ours + "/completion", json=body, timeout=30)
        assert reply.status_code in (400, 422), (body, reply.text)
        assert field in json.dumps(reply.json()["error"]), (body, reply.text)


def test_a_lazy_grammar_starts_at_its_trigger_word_as_llama_servers(both: tuple[str, str]) -> None:
    """A word of the greedy text as the trigger: the text runs free up to it, then the grammar (which begins
    with the word) takes over; the same text and settings as llama-server's."""
    free = post(both[0], {"prompt": PROMPT, "n_predict": 24, "temperature": 0})["content"]
    word = max(free.split(), key=len)  # several tokens: a word trigger, not a token one
    body = {"prompt": PROMPT, "n_predict": 48, "temperature": 0, "grammar": f'root ::= {gbnf_literal(word)} " the end"',
            "grammar_lazy": True, "grammar_triggers": [{"type": 1, "value": word}]}
    ours, theirs = (post(base, body) for base in both)
    same(ours, theirs, "content", "tokens_predicted")
    assert ours["content"] == free[:free.index(word)] + word + " the end"
    assert ours["generation_settings"]["grammar_triggers"] == theirs["generation_settings"]["grammar_triggers"]
    for bad in ({"type": 2, "value": "a.*"}, {"type": 0, "value": "x"}):
        reply = httpx.post(both[0] + "/completion", json={**body, "grammar_triggers": [bad]}, timeout=30)
        assert reply.status_code == 400 and "grammar_triggers[0]" in reply.text, reply.text


@pytest.fixture(scope="module")
def fim_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Ours and llama-server on a tiny model with fill-in-the-middle tokens (repository ones too)."""
    path = write_tiny_llama(tmp_path_factory.mktemp("fim") / "tiny-fim.gguf",
                            TinyLlamaSpec(extra_metadata=fim_metadata()))
    with running(tiny_settings(path, n_seq_max=1)) as ours, \
            llama_server(path, "-c", "2048", "-np", "1", "--alias", "tiny") as theirs:
        yield ours, theirs


@pytest.mark.parametrize("extra", [[], [{"filename": "util.py", "text": "def helper():\n    return 1\n"},
                                        {"text": "x = 2\n"}],
                                   # as llama.vscode and llama.vim send their chunks: with the time of each
                                   [{"text": "x = 1\n", "time": 1733480000000, "filename": "u.py"}]],
                         ids=["plain", "repository", "plugin chunks"])
def test_infill_equals_llama_servers(fim_servers: tuple[str, str], extra: list[dict[str, Any]]) -> None:
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "input_extra": extra,
            "prompt": "return", "n_predict": 8, "temperature": 0, "return_tokens": True}
    ours, theirs = (post(base, body, "/infill") for base in fim_servers)
    same(ours, theirs, "prompt", "tokens_evaluated", "content", "tokens")
    assert shape(ours) == shape(theirs)


def test_an_infill_prompt_of_tokens_is_used(fim_servers: tuple[str, str]) -> None:
    """/infill's ``prompt`` (placed after the prefix) may be token ids, as /completion's is (llama-server
    reads a text only, and drops anything else without a word); ids are checked, and one prompt it is."""
    ours = fim_servers[0]
    tokens = httpx.post(ours + "/tokenize", json={"content": "zz"}).json()["tokens"]

    def infill(prompt: Any) -> httpx.Response:
        return httpx.post(ours + "/infill", json={"input_prefix": "a", "input_suffix": "b", "n_predict": 1,
                                                  "temperature": 0, "prompt": prompt}, timeout=60)

    evaluated = [infill(prompt).json()["tokens_evaluated"] for prompt in (tokens, "zz", "")]
    assert evaluated[0] == evaluated[1] > evaluated[2]
    assert "outside the vocabulary" in infill([-5]).json()["error"]["message"]
    reply = infill([[1, 2]])
    assert reply.status_code == 400 and "takes one prompt" in reply.json()["error"]["message"], reply.text


def test_infill_needs_fim_tokens_and_well_formed_extra_files(both: tuple[str, str],
                                                               fim_servers: tuple[str, str]) -> None:
    body = {"input_prefix": "a", "input_suffix": "b", "n_predict": 2}
    for base in both:  # the chat model has no FIM tokens
        reply = httpx.post(base + "/infill", json=body, timeout=30)
        assert reply.status_code == 501 and "not supported" in reply.json()["error"]["message"], reply.text
    for bad, field in (({**body, "input_extra": [{"filename": "a.py"}]}, "text"),
                       ({**body, "input_extra": "x"}, "input_extra"), ({"input_suffix": "b"}, "input_prefix")):
        reply = httpx.post(fim_servers[0] + "/infill", json=bad, timeout=30)
        assert reply.status_code == 422 and field in reply.text, reply.text
