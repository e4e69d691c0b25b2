"""Streaming replies that may call tools, as OpenAI chat.completion.chunk deltas, while they are generated.

* A forced call (a named or required tool) streams its arguments as they
  are sampled: one delta opens each call (id, name), then argument fragments
  (after the thinking, as ``reasoning_content``, where the request splits it).
* An "auto" reply streams its text until something that could open a tool
  call appears (one of the families' markers, or a leading ``{``); from
  there the rest is held back and, at the end, parsed into tool calls (or
  sent as text if it was none).
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from llama_cpp.llama_chat_format import chat_logprobs
from llama_cpp.reasoning_split import Markers, ReasoningSplitter

from .forced_calls import ForcedReply
from .lazy_calls import LazyCalls
from .tool_calls import CALL_MARKERS


Chunk = dict[str, Any]


class _ChunkWriter:
    """chat.completion.chunk objects with the id/created/model of the completion being streamed."""

    def __init__(self) -> None:
        self.base: dict[str, Any] | None = None
        self.started = False
        self.finish: str | None = None
        self.usage: dict[str, int] | None = None

    def see(self, chunk: Chunk) -> dict[str, Any]:
        """Record a text_completion chunk; returns its choice."""
        if self.base is None:
            self.base = {"id": "chat" + chunk["id"], "object": "chat.completion.chunk",
                         "created": chunk["created"], "model": chunk["model"]}
        choice = chunk["choices"][0]
        if choice["finish_reason"] is not None:
            self.finish = choice["finish_reason"]
            self.usage = chunk.get("usage")
        return choice

    def role_once(self) -> list[Chunk]:
        """The assistant-role delta that opens a reply, the first time only."""
        if self.started:
            return []
        self.started = True
        return [self.delta({"role": "assistant"})]

    def delta(self, delta: dict[str, Any], logprobs: Any = None) -> Chunk:
        return {**(self.base or {}), "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                   "finish_reason": None}]}

    def call_end(self) -> Chunk:
        """The end of a forced call: "tool_calls", unless max_tokens cut it ("length") or it was aborted."""
        return self.end("tool_calls" if self.finish in (None, "stop") else self.finish)

    def end(self, finish: str) -> Chunk:
        out = {**(self.base or {}), "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def _call_delta(name: str | None, arguments: str, call_id: str | None = None, index: int = 0) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


def stream_forced_call(chunks: Iterator[Chunk], name: str) -> Iterator[Chunk]:
    """The completion of a call's JSON arguments, streamed as the deltas of one tool call."""
    writer = _ChunkWriter()
    for chunk in chunks:
        choice = writer.see(chunk)
        for opening in writer.role_once():
            yield opening
            yield writer.delta(_call_delta(name, "", f"call_{uuid.uuid4().hex[:24]}"))
        if choice["text"]:
            yield writer.delta(_call_delta(None, choice["text"]), chat_logprobs(choice.get("logprobs")))
    yield writer.call_end()


class _ReplyDeltas:
    """A forced reply's events (:class:`.forced_calls.ForcedReply`) as deltas: each call opens with its id and
    name under the next ``index``, its arguments follow under that index."""

    def __init__(self, writer: _ChunkWriter) -> None:
        self.writer = writer
        self.index = -1  # the call being streamed

    def __call__(self, events: list[tuple[str, str]]) -> Iterator[Chunk]:
        for kind, text in events:
            if kind == "name":
                self.index += 1
                yield self.writer.delta(_call_delta(text, "", f"call_{uuid.uuid4().hex[:24]}", self.index))
            elif kind == "arguments":
                yield self.writer.delta(_call_delta(None, text, index=self.index))
            else:  # the thinking, or what was cut short before a call's name (max_tokens)
                yield self.writer.delta({"reasoning_content" if kind == "reasoning" else "content": text})


def stream_forced_reply(chunks: Iterator[Chunk], reply: ForcedReply) -> Iterator[Chunk]:
    """A forced reply (:mod:`.forced_calls`), streamed as its thinking's ``reasoning_content`` deltas, then its
    tool calls: each opens once its name is complete, and its arguments follow as they are sampled."""
    writer = _ChunkWriter()
    deltas = _ReplyDeltas(writer)
    for chunk in chunks:
        choice = writer.see(chunk)
        yield from writer.role_once()
        yield from deltas(reply.feed(choice["text"]))
    yield from deltas(reply.finish())
    yield writer.call_end()


@dataclass(frozen=True)
class CallSyntax:
    """How a reply opens tool calls, so that the text before them can be streamed."""

    markers: tuple[str, ...] = CALL_MARKERS
    opening: str = ""  # a text answer begins with this (not part of the text); anything else is a call
    bare_json: bool = True  # a reply that begins with "{" may be a call (Llama 3.x)


@functools.lru_cache(maxsize=32)
def _scanner(markers: tuple[str, ...]) -> tuple[re.Pattern[str], frozenset[str], int]:
    """One search for all of ``markers``, the set of their proper beginnings, and the longest one's length: a
    streamed token costs the same however many call styles there are."""
    pattern = re.compile("|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)))
    beginnings = frozenset(m[:k] for m in markers for k in range(1, len(m)))
    return pattern, beginnings, max(map(len, markers), default=0)


def _text_end(text: str, start: int, markers: tuple[str, ...]) -> tuple[int, bool]:
    """How far ``text`` is surely text, and whether a marker has appeared (from ``start`` on).

    A marker's beginning at the very end is held back until the next piece
    tells whether it grows into the marker.
    """
    if not markers:
        return len(text), False
    pattern, beginnings, longest = _scanner(markers)
    found = pattern.search(text, start)
    cut = found.start() if found else len(text)
    for k in range(min(longest - 1, len(text) - start), 0, -1):
        if text[len(text) - k:] in beginnings:
            cut = min(cut, len(text) - k)
            break
    return cut, found is not None


def stream_auto_reply(chunks: Iterator[Chunk], parse: Callable[[str], tuple[str | None, list[dict[str, Any]]]],
                      syntax: CallSyntax = CallSyntax(), thinking: Markers | None = None,
                      lazy: LazyCalls | None = None) -> Iterator[Chunk]:
    """Text deltas while the reply is text; what may be tool calls is held back and parsed at the end.  With
    ``thinking``, the reply's thinking block streams whole (split downstream), markers in it included: calls
    are looked for in the answer after it.  With ``lazy`` (:mod:`.lazy_calls`), calls held back from its
    trigger on were written by its grammar: they stream as a forced reply's do, each call's arguments as they
    are sampled."""
    writer = _ChunkWriter()
    calls = _ReplyDeltas(writer)
    reader: ForcedReply | None = None  # the lazy grammar's calls, once the held text begins with its trigger
    text, sent, holding = "", 0, False
    body: int | None = 0 if not syntax.opening else None  # where the text answer starts, once known
    json_undecided = syntax.bare_json
    thought = ReasoningSplitter(thinking) if thinking is not None else None
    for chunk in chunks:
        choice = writer.see(chunk)
        yield from writer.role_once()
        text += choice["text"]
        if reader is not None:
            yield from calls(reader.feed(choice["text"]))
            continue
        if holding:
            if lazy is not None and text.startswith(lazy.trigger, sent):
                reader = lazy.reader()
                yield from calls(reader.feed(text[sent:]))
            continue
        if thought is not None and thought.answer_at is None:
            thought.feed(choice["text"])
            if thought.thinking and len(text) > sent:
                yield writer.delta({"content": text[sent:]}, chat_logprobs(choice.get("logprobs")))
                sent = len(text)
            if thought.answer_at is None:  # still thinking, or not yet known whether it will
                continue
            if thought.answer_at > sent:  # the end of the thinking's markers
                yield writer.delta({"content": text[sent:thought.answer_at]})
                sent = thought.answer_at
            if not syntax.opening:
                body = thought.answer_at
        if body is None:
            if text.startswith(syntax.opening):
                body = sent = len(syntax.opening)
            elif not syntax.opening.startswith(text):
                holding = True  # not a text answer: a call from the first token
            continue
        if json_undecided:  # does the reply open with a bare JSON object (a Llama 3.x call)?
            rest = text[body:].lstrip()
            if not rest:
                continue
            json_undecided, holding = False, rest.startswith("{")
            if holding:
                continue
        cut, holding = _text_end(text, sent, syntax.markers)
        if cut > sent:
            yield writer.delta({"content": text[sent:cut]}, chat_logprobs(choice.get("logprobs")))
            sent = cut
        if holding and lazy is not None and text.startswith(lazy.trigger, sent):
            reader = lazy.reader()
            yield from calls(reader.feed(text[sent:]))
    if reader is not None:
        yield from calls(reader.finish())
        yield writer.end("tool_calls" if reader.names and writer.finish in (None, "stop") else writer.finish or "stop")
        return
    content, parsed = parse(text[sent:])
    if content:
        yield writer.delta({"content": content})
    for i, call in enumerate(parsed):
        fn = call["function"]
        yield writer.delta(_call_delta(fn["name"], fn["arguments"], call["id"], i))
    yield writer.end("tool_calls" if parsed else writer.finish or "stop")
