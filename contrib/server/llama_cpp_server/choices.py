"""A chat request with ``n`` choices: ``n`` chat calls at once, one prompt evaluation, merged.

``create_chat_completion`` makes one choice (a chat handler reads one); the server runs one call per
choice, each on its own thread with a copy of the caller's context (so its engine requests join the
caller's request scope and are cancelled with it), all in one :class:`llama_cpp.engine.ChoiceGroup`:
the engine evaluates their shared prompt once and forks the other choices from it, as it does for
``create_completion(n=...)``.  The answers are merged: choice ``j`` is call ``j``'s, usage counts the
prompt once.
"""

from __future__ import annotations

import contextvars
import functools
import queue
import threading
from typing import Any, Callable, Iterator

from llama_cpp.engine import ChoiceGroup



def _start_all(targets: list[Callable[[], None]]) -> list[threading.Thread]:
    """Each of ``targets`` on a new thread, in a copy of this thread's context, as the calls of one
    choice group."""
    group = ChoiceGroup(len(targets))

    def member(target: Callable[[], None]) -> None:
        with group.member():
            target()

    threads = []
    for target in targets:
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(member, target), daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def chat_choices(llm: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat.completion with a choice per call in ``calls`` (``create_chat_completion``'s keywords)."""
    if len(calls) == 1:
        return _without_legacy_call(llm.create_chat_completion(**calls[0]), calls[0])
    results: list[Any] = [None] * len(calls)

    def run(j: int) -> None:
        try:
            results[j] = llm.create_chat_completion(**calls[j])
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            results[j] = exc

    for thread in _start_all([functools.partial(run, j) for j in range(len(calls))]):
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    merged = dict(results[0])  # one response: the first call's id
    merged["choices"] = [{**_without_legacy_call(r, calls[j])["choices"][0], "index": j} for j, r in enumerate(results)]
    completion = sum(r["usage"]["completion_tokens"] for r in results)
    prompt = results[0]["usage"]["prompt_tokens"]
    merged["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return merged


def _without_legacy_call(chat: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
    """``chat`` as OpenAI's API and llama-server answer a request with ``tools``: its calls in ``tool_calls``
    only (``Llama`` adds the legacy ``function_call`` beside a single call, as the seed did; a client that
    sends the message back with both is refused by OpenAI's API).  A request with the legacy ``functions``
    keeps it."""
    if call.get("tools") and not call.get("functions"):
        for choice in chat.get("choices", ()):
            choice.get("message", {}).pop("function_call", None)
    return chat


def chat_choice_streams(llm: Any, calls: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The chunks of one streamed call per item of ``calls``, interleaved as they come, choice ``j``'s
    chunks indexed ``j``; the calls' usage arrives once, in a last chunk without choices."""
    if len(calls) == 1:
        yield from llm.create_chat_completion(stream=True, **calls[0])
        return
    out: queue.Queue[Any] = queue.Queue()
    finished = object()

    def pump(j: int) -> None:
        try:
            for chunk in llm.create_chat_completion(stream=True, **calls[j]):
                for choice in chunk.get("choices", []):
                    choice["index"] = j
                out.put(chunk)
        except BaseException as exc:  # noqa: BLE001 - raised on the stream's thread
            out.put(exc)
        finally:
            out.put(finished)

    _start_all([functools.partial(pump, j) for j in range(len(calls))])
    prompt = completion = 0
    base: dict[str, Any] = {}
    remaining = len(calls)
    while remaining:
        item = out.get()
        if item is finished:
            remaining -= 1
            continue
        if isinstance(item, BaseException):
            raise item
        usage = item.pop("usage", None)
        if usage is not None:
            prompt, completion = usage["prompt_tokens"], completion + usage["completion_tokens"]
        if not base:  # every chunk of the response carries the first call's id, as OpenAI's one stream does
            base = {k: item[k] for k in ("id", "object", "created", "model") if k in item}
        yield {**item, **base}
    if base:
        yield {**base, "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion}}
