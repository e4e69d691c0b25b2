"""Chat ``n > 1`` on the server: one call of the chat handler per choice, one prompt evaluation.

The server runs a chat call per choice (a chat handler makes one choice) in one choice group, so the
engine holds the calls' requests until all are in and forks the others from the first: the prompt is
evaluated once (the engine's counter, as /metrics reports it), and choice ``j`` is what a request with
``n=1`` and seed ``seed + j`` gives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from serving import metric

BODY = {"model": "tiny", "max_tokens": 12, "temperature": 0.9, "seed": 7, "ignore_eos": True}


def chat(base: str, content: str, **fields: Any) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                          json={**BODY, "messages": [{"role": "user", "content": content}], **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_chat_n_evaluates_the_prompt_once_and_each_choice_is_its_solo_run(serve: Callable[..., Any]) -> None:
    with serve(n_seq_max=4) as base:
        whole = chat(base, "Tell me three things", n=3)
        evaluated = metric(base, "prompt_tokens_total")
        assert evaluated == whole["usage"]["prompt_tokens"]  # once, not three times
        assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
        texts = [c["message"]["content"] for c in whole["choices"]]
        solo = [chat(base, "Tell me three things", seed=7 + j)["choices"][0]["message"]["content"]
                for j in range(3)]
        assert texts == solo
        assert len(set(texts)) > 1  # the seeds differ, and so do the choices


def test_streamed_chat_n_evaluates_the_prompt_once(serve: Callable[..., Any]) -> None:
    with serve(n_seq_max=4) as base:
        body = {**BODY, "messages": [{"role": "user", "content": "Stream three"}], "n": 3, "stream": True,
                "stream_options": {"include_usage": True}}
        texts = ["", "", ""]
        usage = None
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                for choice in event["choices"]:
                    texts[choice["index"]] += choice["delta"].get("content") or ""
        assert usage is not None and metric(base, "prompt_tokens_total") == usage["prompt_tokens"]
        solo = [chat(base, "Stream three", seed=7 + j)["choices"][0]["message"]["content"] for j in range(3)]
        assert texts == solo


def test_chat_n_larger_than_the_sequences_still_answers_every_choice(serve: Callable[..., Any]) -> None:
    with serve(n_seq_max=2) as base:
        whole = chat(base, "More choices than sequences", n=3)
        texts = [c["message"]["content"] for c in whole["choices"]]
        solo = [chat(base, "More choices than sequences", seed=7 + j)["choices"][0]["message"]["content"]
                for j in range(3)]
        assert texts == solo


def test_with_the_overlap_on_as_on_a_gpu_the_answers_are_the_same(serve: Callable[..., Any]) -> None:
    """``overlap_decode`` (on by default where layers are on a GPU): choices forked from one prompt, streams
    and a stop string that cancels a stream part way give what the server without it gives."""
    body = {**BODY, "messages": [{"role": "user", "content": "Stream three"}], "n": 3, "stream": True}
    answers = []
    for overlap in (False, True):
        with serve(n_seq_max=4, overlap_decode=overlap) as base:
            whole = [c["message"]["content"] for c in chat(base, "Tell me three things", n=3)["choices"]]
            texts = ["", "", ""]
            with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        for choice in json.loads(line[6:])["choices"]:
                            texts[choice["index"]] += choice["delta"].get("content") or ""
            stopped = chat(base, "Tell me three things", stop=[whole[0][5:8]])["choices"][0]["message"]["content"]
            again = chat(base, "Tell me three things")["choices"][0]["message"]["content"]
            answers.append((whole, texts, stopped, again))
    assert answers[0] == answers[1]
    assert len(answers[1][2]) < len(answers[1][0][0])  # the stop string ended that one early
