"""llama-server's render-only chat routes against llama-server itself: ``/apply-template`` gives the same
prompt, ``/chat/completions/input_tokens`` the same count, on the tiny chat model and on SmolLM2 (whose
templates both servers render alike); and the prompt shown is the one the chat route generates from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import assert_error, llama_server, running, tiny_settings

from llama_cpp.testing import smollm2_path

CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "Hello there"}],
    "with a system turn": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}],
    "text parts": [{"role": "user", "content": [{"type": "text", "text": "Part one. "},
                                                {"type": "text", "text": "Part two."}]}],
}


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def both(request: pytest.FixtureRequest, chat_model_path: Path) -> Iterator[tuple[str, str]]:
    """(ours, llama-server's) base URLs, serving the same model."""
    model = chat_model_path if request.param == "tiny" else smollm2_path(quiet=True)
    with running(tiny_settings(model, n_seq_max=1, n_ctx=1024)) as ours, \
            llama_server(model, "-c", "1024", "-np", "1") as theirs:
        yield ours, theirs


def post(base: str, path: str, body: dict[str, Any]) -> Any:
    reply = httpx.post(base + path, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("messages", CONVERSATIONS.values(), ids=CONVERSATIONS.keys())
def test_apply_template_renders_the_prompt_llama_server_renders(both: tuple[str, str],
                                                                messages: list[dict[str, Any]]) -> None:
    ours, theirs = (post(base, "/apply-template", {"messages": messages}) for base in both)
    assert ours == theirs and list(ours) == ["prompt"]
    assert messages[-1]["content"] != "" and ours["prompt"]


def test_without_a_generation_prompt_too(both: tuple[str, str]) -> None:
    body = {"messages": CONVERSATIONS["one turn"], "add_generation_prompt": False}
    ours, theirs = (post(base, "/apply-template", body) for base in both)
    assert ours == theirs


@pytest.mark.parametrize("path", ["/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"])
def test_input_tokens_counts_as_llama_server_counts(both: tuple[str, str], path: str) -> None:
    body = {"messages": CONVERSATIONS["with a system turn"]}
    ours, theirs = (post(base, path, body) for base in both)
    assert ours == theirs and list(ours) == list(theirs) and ours["input_tokens"] > 0


def test_the_prompt_shown_is_the_one_the_chat_evaluates(both: tuple[str, str]) -> None:
    ours = both[0]
    messages = CONVERSATIONS["with a system turn"]
    counted = post(ours, "/chat/completions/input_tokens", {"messages": messages})["input_tokens"]
    chat = post(ours, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0})
    assert chat["usage"]["prompt_tokens"] == counted


def test_a_bad_body_is_refused_naming_the_field(serve: Any) -> None:
    with serve() as base:
        assert_error(httpx.post(f"{base}/apply-template", json={"messages": []}), 422, param="messages")
        assert_error(httpx.post(f"{base}/apply-template", json={"messages": [{"role": "user", "content": "x"}],
                                                                "add_generation_prompt": "maybe"}),
                     422, param="add_generation_prompt")
        assert_error(httpx.post(f"{base}/chat/completions/input_tokens", json={"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}),
            400, param="messages")


PREFILLED = [{"role": "user", "content": "Write a greeting."}, {"role": "assistant", "content": "Hello, dear"}]


def test_a_trailing_assistant_message_is_continued_as_llama_server_does(both: tuple[str, str]) -> None:
    """llama-server continues a trailing assistant message (its ``--prefill-assistant`` default): the prompt
    ends with its text, no end of turn, no new assistant turn; so does the server here unless a request's
    ``assistant_prefill`` says otherwise."""
    ours, theirs = (post(base, "/apply-template", {"messages": PREFILLED}) for base in both)
    assert ours == theirs and ours["prompt"].endswith("Hello, dear")
    counts = [post(base, "/chat/completions/input_tokens", {"messages": PREFILLED})["input_tokens"] for base in both]
    assert counts[0] == counts[1]
    answered = post(both[0], "/apply-template", {"messages": PREFILLED, "assistant_prefill": False})["prompt"]
    assert not answered.endswith("Hello, dear")


@pytest.mark.parametrize("messages", [
    [*PREFILLED[:1], {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
    [*PREFILLED, {"role": "assistant", "content": "friend"}],
], ids=["tool calls", "two assistant messages"])
def test_what_llama_server_will_not_continue_is_refused_alike(both: tuple[str, str],
                                                              messages: list[dict[str, Any]]) -> None:
    replies = [httpx.post(base + "/apply-template", json={"messages": messages}, timeout=60) for base in both]
    assert [r.status_code for r in replies] == [400, 400]
    assert replies[1].json()["error"]["message"] in replies[0].json()["error"]["message"]


@pytest.mark.parametrize("value", [True, "content", "reasoning_content"])
def test_continue_final_message_continues_as_llama_server_does(both: tuple[str, str], value: object) -> None:
    """llama-server's (and vLLM's) ``continue_final_message``, with ``add_generation_prompt`` false: here as
    there, even for two assistant messages at the end (what only the ``--prefill-assistant`` default
    refuses)."""
    for messages in (PREFILLED, [*PREFILLED, {"role": "assistant", "content": "friend"}]):
        body = {"messages": messages, "continue_final_message": value, "add_generation_prompt": False}
        ours, theirs = (post(base, "/apply-template", body) for base in both)
        assert ours == theirs


@pytest.mark.parametrize(("body", "status"), [
    ({"messages": PREFILLED, "continue_final_message": True}, 400),  # add_generation_prompt defaults to true
    ({"messages": PREFILLED[:1] + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
      "continue_final_message": True, "add_generation_prompt": False}, 400),
], ids=["with a generation prompt", "tool calls"])
def test_a_continuation_llama_server_refuses_is_refused_alike(both: tuple[str, str], body: dict[str, Any],
                                                              status: int) -> None:
    replies = [httpx.post(base + "/apply-template", json=body, timeout=60) for base in both]
    assert [r.status_code for r in replies] == [status, status]
    assert replies[1].json()["error"]["message"] in replies[0].json()["error"]["message"]


def test_a_continuation_of_what_is_not_the_assistants_or_of_no_known_kind_is_refused(serve: Any) -> None:
    with serve() as base:
        body = {"messages": PREFILLED[:1], "continue_final_message": True, "add_generation_prompt": False}
        assert_error(httpx.post(f"{base}/apply-template", json=body), 400, param="continue_final_message",
                     says="the last message must be the assistant's")
        body = {"messages": PREFILLED, "continue_final_message": "thinking", "add_generation_prompt": False}
        assert_error(httpx.post(f"{base}/apply-template", json=body), 422, param="continue_final_message")


def test_with_no_prefill_assistant_it_is_answered_as_llama_server_answers_it(chat_model_path: Path) -> None:
    from llama_cpp_server import load_settings

    settings = load_settings(["-m", str(chat_model_path), "-c", "1024", "-np", "1", "--no-prefill-assistant"])
    assert settings.prefill_assistant is False
    with running(settings) as ours, llama_server(chat_model_path, "-c", "1024", "-np", "1",
                                                 "--no-prefill-assistant") as theirs:
        prompts = [post(base, "/apply-template", {"messages": PREFILLED})["prompt"] for base in (ours, theirs)]
    assert prompts[0] == prompts[1] and not prompts[0].endswith("Hello, dear")
