"""``reasoning_format`` in ``create_chat_completion``: the plan of one request and its reply's reshaping.

The split works on what any chat handler returns (a ``chat.completion``, or its chunks), so it holds for
every format, the multimodal handlers and the function-calling ones alike: the handler parses its tool
calls out of the reply first (a call after the thinking is found there), then the thinking at the
beginning of the remaining text goes to ``reasoning_content``.  The prompt the handler renders (asked of
it with ``render_chat_prompt``) tells whether the template opened the block itself.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from . import llama_grammar
from .llama_chat_format import ChatFormatterResponse
from .llama_grammar import LlamaGrammar, json_schema_grammar
from .reasoning import check_reasoning_format, markers_for, model_family
from .reasoning_grammar import with_reasoning_prefix
from .reasoning_split import Markers, ReasoningSplitter, split_reasoning

def plan(llama: Any, reasoning_format: str | None, render: Callable[[], ChatFormatterResponse | None],
         budget: bool, continued: str = "") -> tuple[str, Markers | None]:
    """(the request's reasoning format, the markers of its reply), None without a family: ``render()``
    gives the rendered prompt (None when the handler cannot); it is asked only when a family claims the
    model and something (the split, a reasoning budget) needs the markers.  ``continued`` is the thinking
    of the assistant message the request continues (``assistant_prefill``), "" for none."""
    fmt = check_reasoning_format("none" if reasoning_format is None else reasoning_format)
    if fmt == "none" and not budget:
        return fmt, None
    family = model_family(llama)
    if family is None:
        return fmt, None
    template = str(llama.metadata.get("tokenizer.chat_template") or "")
    rendered = render()
    if rendered is None:
        return fmt, markers_for(family, template, None, continued)
    return fmt, markers_for(family, template, rendered.prompt, continued, rendered.thinking_markers)


def response_format_with_reasoning(response_format: dict[str, Any] | None, markers: Markers) -> LlamaGrammar | None:
    """The grammar of a JSON ``response_format``, after the thinking (None for another or no format: the
    handler deals with it, errors included)."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        schema = response_format.get("schema")
        grammar = (json_schema_grammar(schema) if schema is not None
                   else LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False))
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            return None
        grammar = json_schema_grammar(spec["schema"])
    else:
        return None
    return with_reasoning_prefix(grammar, markers)


def budget_markers(request: dict[str, Any], markers: Markers) -> None:
    """A reasoning budget counts the family's block, unless the call named its own markers (a keyword left
    at its default is not in ``request``: the family's marker takes its place)."""
    if request.get("reasoning_budget", -1) < 0:
        return
    request.setdefault("reasoning_start", markers.start)
    request.setdefault("reasoning_end", markers.end)
    request.setdefault("reasoning_start_in_prompt", markers.opened)


def split_completion(chat: dict[str, Any], markers: Markers) -> dict[str, Any]:
    """A ``chat.completion`` with each message's thinking in ``reasoning_content`` (when there is some)."""
    for choice in chat.get("choices", ()):
        message = choice.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            continue
        reasoning, content = split_reasoning(message["content"], markers)
        if not reasoning and content == message["content"]:
            continue
        reshaped: dict[str, Any] = {}
        for key, value in message.items():
            reshaped[key] = value
            if key == "content":
                reshaped[key] = content if content or not message.get("tool_calls") else None
                if reasoning:
                    reshaped["reasoning_content"] = reasoning
        choice["message"] = reshaped
    return chat


def _with_delta(chunk: dict[str, Any], delta: dict[str, Any], logprobs: Any = None) -> dict[str, Any]:
    choice = {**chunk["choices"][0], "delta": delta, "logprobs": logprobs, "finish_reason": None}
    return {**chunk, "choices": [choice]}


def split_chunks(chunks: Iterator[dict[str, Any]], markers: Markers) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects with the thinking's ``content`` deltas sent as ``reasoning_content``
    deltas (llama-server's order: thinking, then the answer; a delta never holds part of a marker)."""
    splitters: dict[int, ReasoningSplitter] = {}
    for chunk in chunks:
        choices = chunk.get("choices") or []
        if not choices:
            yield chunk
            continue
        choice = choices[0]
        index = choice.get("index", 0)
        splitter = splitters.setdefault(index, ReasoningSplitter(markers))
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if isinstance(text, str):
            pieces = splitter.feed(text)
            rest = {k: v for k, v in delta.items() if k != "content"}
        else:
            pieces = splitter.finish() if (delta.get("tool_calls") or choice.get("finish_reason")) else []
            rest = None
        merged: list[tuple[str, str]] = []
        for kind, piece in pieces:
            key = "reasoning_content" if kind == "reasoning" else "content"
            if merged and merged[-1][0] == key:
                merged[-1] = (key, merged[-1][1] + piece)
            else:
                merged.append((key, piece))
        for i, (key, piece) in enumerate(merged):
            extra = rest if (rest and i == 0) else {}
            last = i == len(merged) - 1
            yield _with_delta(chunk, {**extra, key: piece}, choice.get("logprobs") if last and rest is not None
                              else None)
        if rest is None:
            yield chunk
        elif rest and not merged:
            yield _with_delta(chunk, rest)


__all__ = ["budget_markers", "plan", "response_format_with_reasoning", "split_chunks", "split_completion"]
