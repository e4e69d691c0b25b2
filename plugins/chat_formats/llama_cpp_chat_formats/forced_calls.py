"""A forced tool call (``tool_choice`` "required", or a named tool) written in the model's own call syntax.

A model calls tools the way its chat template writes an assistant's calls, and llama-server constrains a
required call to that syntax (its parser is derived from the template).  Here the template is asked too:
it renders a turn that calls a sentinel tool with sentinel arguments, and the text it writes around the
tool's name and the arguments is the call's frame (:mod:`.call_frames`): around one JSON object (Hermes /
Qwen: ``<tool_call>\n{"name": "`` NAME ``", "arguments": `` ARGS ``}\n</tool_call>``; Mistral:
``[TOOL_CALLS]`` NAME ``[ARGS]`` ARGS), or around each argument (Qwen3-Coder and Qwen 3.5:
``<parameter=`` KEY ``>\n`` VALUE ``\n</parameter>``; GLM's ``<arg_key>``, MiniMax-M2's ``<parameter
name=...>``).  A call id the template writes (Mistral's ``[CALL_ID]``, Cohere's ``tool_call_id``) is left
to the model: nine letters or digits, as Mistral's templates require.  After the arguments the frame keeps
the shortest text with which the family's reader (:mod:`.tool_calls`) reads the call back: the turn's end
is the model's to write, and once the grammar is complete only an end-of-generation token can follow.

The grammar forces the frame with a chosen tool's name and its parameters' schema inside, after the
thinking block when the request splits reasoning (:func:`llama_cpp.reasoning_grammar.after_thinking`):
a reasoning model thinks before it calls, as it does under llama-server.

A template whose call is written otherwise (LFM2's Python calls, Gemma 4's own value syntax), whose call
reads differently after thinking (gpt-oss repeats its role header), or that cannot render a call at all
(a hand-written format) keeps :data:`JSON_FRAME`, ``{"name": ..., "arguments": ...}``.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from typing import Any, Callable, Sequence

from llama_cpp.llama_chat_format import ChatFormatterResponse
from llama_cpp.reasoning_split import Markers, ReasoningSplitter

from .call_frames import ID_SLOT, JSON_FRAME, CallFrame, TaggedFrame
from .call_values import make_tool_call
from .continuation import template_thinking_markers
from .tool_calls import parse_tool_calls

Formatter = Callable[..., ChatFormatterResponse]


# the sentinel call the template is asked to write (its id is nine characters, as Mistral's), and the ids
# of the calls after it in a turn of three
_ID, _OTHER_IDS = "zq0000001", ("zq0000002", "zq0000003")
_NAME = "zq_sentinel_tool"
_KEY, _VALUE, _NUMBER_KEY, _NUMBER = "zq_sentinel_key", "zq sentinel value", "zq_sentinel_number", 4217
_ARGUMENTS = {_KEY: _VALUE, _NUMBER_KEY: _NUMBER}
_THOUGHT = "zq sentinel thought"
_TOOL = {"type": "function", "function": {"name": _NAME, "description": "A sentinel tool.", "parameters": {
    "type": "object", "properties": {_KEY: {"type": "string"}, _NUMBER_KEY: {"type": "integer"}},
    "required": [_KEY, _NUMBER_KEY]}}}
_ASKED = [{"role": "user", "content": "zq sentinel question"}]


def _called(*ids: str, **extra: Any) -> list[dict[str, Any]]:
    """The sentinel conversation: a question, then a turn that calls the sentinel tool once per id."""
    calls = [{"id": id_, "type": "function", "function": {"name": _NAME, "arguments": json.dumps(_ARGUMENTS)}}
             for id_ in ids]
    return [*_ASKED, {"role": "assistant", "content": "", "tool_calls": calls, **extra}]


def chosen_tools(tools: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]] | None:
    """The functions a forced reply may call (None when the choice forces none): every offered one for
    "required", the named one for a named choice (a name that was not offered is a ValueError)."""
    by_name = {t["function"]["name"]: t["function"] for t in tools if "function" in t}
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if name not in by_name:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools: {', '.join(by_name)}")
        return [by_name[name]]
    if tool_choice == "required":
        return list(by_name.values())
    return None


_frames: weakref.WeakKeyDictionary[Any, dict[str, CallFrame]] = weakref.WeakKeyDictionary()


def template_frame(formatter: Formatter, variables: dict[str, Any]) -> CallFrame:
    """The frame ``formatter``'s template writes a call in (:data:`JSON_FRAME` if none), once per formatter
    and set of template variables."""
    key = json.dumps(variables, sort_keys=True, default=repr)
    try:
        known = _frames.setdefault(formatter, {})
    except TypeError:  # a formatter that cannot be weakly referenced is asked every time
        known = {}
    if key not in known:
        known[key] = _derive(formatter, variables) or JSON_FRAME
    return known[key]


def frame_for(formatter: Formatter, variables: dict[str, Any], thinking: Markers | None) -> CallFrame:
    """The frame of a forced call of this request: the template's, unless the reply may think first and the
    template writes something else than the thinking's end between a thought and a call (gpt-oss: a new
    message header), which the grammar after the thinking would not let in."""
    frame = template_frame(formatter, variables)
    if thinking is not None and frame.after_thought is not None and frame.after_thought != thinking.end.strip():
        return JSON_FRAME
    return frame


def _derive(formatter: Formatter, variables: dict[str, Any]) -> CallFrame | None:
    """The frame of the sentinel call as ``formatter`` writes it, if its family's reader reads it back, with
    what the template writes between a thought and the call."""
    markers = template_thinking_markers(formatter)

    def written(messages: list[dict[str, Any]]) -> str | None:
        try:
            prompt = formatter(messages=_ASKED, tools=[_TOOL], add_generation_prompt=True, **variables).prompt
            turn = formatter(messages=messages, tools=[_TOOL], add_generation_prompt=False, **variables).prompt
        except Exception:  # noqa: BLE001 - a format that cannot render a call has no frame, whatever it raised
            return None
        return _after_prompt(turn, prompt, markers.start, markers.end)

    text = written(_called(_ID))
    if text is None:
        return None
    found = _frame_of(text)
    frame = None if found is None else _reads_back(found)
    if frame is None:
        return None
    thrice = written(_called(_ID, *_OTHER_IDS))
    link = None if thrice is None else _link_of(thrice, frame)
    if link is not None:
        frame = dataclasses.replace(frame, link=link)
    thought = written(_called(_ID, reasoning_content=_THOUGHT)) if markers.end else None
    at = -1 if thought is None else thought.find(_THOUGHT)
    if thought is None or at < 0:  # the template writes no thought before a call
        return frame
    opens = thought.find(frame.opening.lstrip().replace(ID_SLOT, _ID), at + len(_THOUGHT))
    return dataclasses.replace(frame, after_thought=thought[at + len(_THOUGHT):opens].strip()) if opens >= 0 else None


def _after_prompt(turn: str, prompt: str, start: str, end: str) -> str | None:
    """The text a turn writes after the generation prompt, less an empty thinking block it opens with; the
    prompt may open the thinking itself (DeepSeek R1's ``<think>\\n``), which a past turn does not repeat."""
    if turn.startswith(prompt):
        text = turn[len(prompt):]
    else:
        cut = prompt.rfind(start.strip()) if start else -1
        if cut < 0 or prompt[cut:].strip() != start.strip() or not turn.startswith(prompt[:cut]):
            return None
        text = turn[cut:]
    rest = text.lstrip()
    if end and rest.startswith(end.strip()):  # the block the prompt opened, or one a past turn only closes
        return rest[len(end.strip()):].lstrip()
    if start and end and rest.startswith(start.strip()):
        close = rest.find(end.strip(), len(start.strip()))
        if close >= 0 and not rest[len(start.strip()):close].strip():
            return rest[close + len(end.strip()):].lstrip()
    return text


def _frame_of(text: str) -> CallFrame | None:
    """The frame around the sentinel's name and its arguments in ``text`` (one JSON object, or one tag each),
    with everything after the arguments as its closing (cut down by :func:`_reads_back`)."""
    named = text.find(_NAME)
    if named < 0:
        return None
    after = named + len(_NAME)
    keyed = text.find(json.dumps(_KEY), after)
    opens = text.rfind("{", after, keyed) if keyed >= 0 else -1
    if opens >= 0:
        try:
            arguments, end = json.JSONDecoder().raw_decode(text, opens)
        except json.JSONDecodeError:
            return None
        if arguments != _ARGUMENTS:
            return None
        return CallFrame(*(part.replace(_ID, ID_SLOT) for part in (text[:named], text[after:opens], text[end:])))
    return _tagged_frame_of(text, named)


def _tagged_frame_of(text: str, named: int) -> TaggedFrame | None:
    """The frame of arguments written one by one: the same text before each key, between a key and its value
    and after the value (the split between the head's end and the first key's opening is the longest text
    both arguments' openings share: whatever the split, a call is written the same)."""
    at, marks = named + len(_NAME), []
    for mark in (_KEY, _VALUE, _NUMBER_KEY, str(_NUMBER)):
        found = text.find(mark, at)
        if found < 0:
            return None
        marks.append((found, found + len(mark)))
        at = found + len(mark)
    (key, key_end), (value, value_end), (number_key, number_key_end), (number, number_end) = marks
    first_open, second_open = text[named + len(_NAME):key], text[value_end:number_key]
    mid = text[key_end:value]
    if mid != text[number_key_end:number]:
        return None
    shared = 0
    while shared < min(len(first_open), len(second_open)) and first_open[-1 - shared] == second_open[-1 - shared]:
        shared += 1
    arg_open = first_open[len(first_open) - shared:]
    arg_close = second_open[:len(second_open) - shared]
    if not arg_open or not arg_close or not text.startswith(arg_close, number_end):
        return None
    pieces = (text[:named], first_open[:len(first_open) - shared], text[number_end + len(arg_close):], arg_open,
              mid, arg_close)
    if any(sentinel in piece for piece in pieces for sentinel in (_ID, _NAME, _KEY, _VALUE, _NUMBER_KEY)):
        return None
    return TaggedFrame(*pieces)


def _written(frame: CallFrame, n_calls: int = 1) -> str:
    arguments = frame.tagged(_ARGUMENTS) if isinstance(frame, TaggedFrame) else json.dumps(_ARGUMENTS)
    return frame.write_calls([(_NAME, arguments)] * n_calls).replace(ID_SLOT, _ID)


def _read_back(frame: CallFrame, n_calls: int = 1) -> bool:
    """Whether the family's reader reads ``n_calls`` sentinel calls written in ``frame`` back, and no text."""
    content, calls = parse_tool_calls(_written(frame, n_calls), [_TOOL])
    return not content and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (_NAME, _ARGUMENTS)] * n_calls


def _reads_back(frame: CallFrame) -> CallFrame | None:
    """``frame`` with the shortest closing that its family's reader reads the call back with (None if none)."""
    for length in range(len(frame.closing) + 1):
        shorter = dataclasses.replace(frame, closing=frame.closing[:length])
        if _read_back(shorter):
            return shorter
    return None


def _link_of(text: str, frame: CallFrame) -> str | None:
    """What ``text``, a turn with three sentinel calls, writes from the end of a call's arguments to the next
    call's name, where that is the same text each time (not Cohere's running index), the calls after the
    first are written as the first (not Kimi's ``:0``, ``:1``) and the family's reader reads linked calls back."""
    at, names = 0, []
    while (found := text.find(_NAME, at)) >= 0:
        names.append(found)
        at = found + len(_NAME)
    spans = [_arguments_span(text, named, frame) for named in names]
    if len(names) != 3 or None in spans:
        return None
    links, heads = set(), set()
    for i, (start, end) in enumerate(span for span in spans if span is not None):
        heads.add(_with_id_slots(text[names[i] + len(_NAME):start]))
        if i < 2:
            links.add(_with_id_slots(text[end:names[i + 1]]))
    link = links.pop() if len(links) == 1 else ""
    if not link.strip() or heads != {frame.after_name} or any(s in link for s in (_NAME, _KEY, _VALUE)):
        return None
    return link if _read_back(dataclasses.replace(frame, link=link), 2) else None


def _with_id_slots(text: str) -> str:
    for id_ in (_ID, *_OTHER_IDS):
        text = text.replace(id_, ID_SLOT)
    return text


def _arguments_span(text: str, named: int, frame: CallFrame) -> tuple[int, int] | None:
    """Where the arguments of the sentinel call whose name is at ``named`` begin and end in ``text``."""
    if isinstance(frame, TaggedFrame):
        key = text.find(_KEY, named)
        number = text.find(str(_NUMBER), key) if key >= 0 else -1
        start, end = key - len(frame.arg_open), number + len(str(_NUMBER)) + len(frame.arg_close)
        if number < 0 or not text.startswith(frame.arg_open, start) or \
                not text.startswith(frame.arg_close, end - len(frame.arg_close)):
            return None
        return start, end
    keyed = text.find(json.dumps(_KEY), named)
    opens = text.rfind("{", named, keyed) if keyed >= 0 else -1
    if opens < 0:
        return None
    try:
        arguments, end = json.JSONDecoder().raw_decode(text, opens)
    except json.JSONDecodeError:
        return None
    return (opens, end) if arguments == _ARGUMENTS else None


Event = tuple[str, str]  # ("reasoning", text), ("name", the tool's name), ("arguments", text), ("content", text)


class ForcedReply:
    """A forced reply read as it is generated (fed piece by piece, then finished): its thinking, then each call:
    the tool's name once the call's head is complete, then the arguments' JSON text, as it is sampled less what
    may still be the frame's closing or link to another call (held back until the next piece decides); for a
    frame whose arguments are tagged, once the call is whole (the next call's head has begun, or the reply
    ended).  With ``parallel`` (and a frame that links calls) a reply may
    hold several calls.  Text that never became a call (``max_tokens`` cut it before the name) comes out as
    content at the end."""

    def __init__(self, frame: CallFrame, functions: list[dict[str, Any]], markers: Markers | None,
                 parallel: bool = False) -> None:
        self.frame = frame
        self.functions = {fn["name"]: fn for fn in functions}
        self.parallel = parallel and bool(frame.link)
        self.splitter = ReasoningSplitter(markers) if markers is not None else None
        self.answer = ""  # the text after the thinking
        self.names: list[str] = []  # the calls' names, as their heads complete
        self.sent = 0  # how much of the answer is out (as heads, arguments or links)
        self.arguments_at = 0  # where the current call's arguments begin in the answer
        self.started = False  # whether the current call's arguments have begun
        self.linked = False  # whether a link was read and the next call's head is awaited
        self.searched = 0  # how far a tagged reply was searched for a link

    def feed(self, text: str) -> list[Event]:
        return self._advance(self.splitter.feed(text) if self.splitter else [("content", text)], final=False)

    def finish(self) -> list[Event]:
        return self._advance(self.splitter.finish() if self.splitter else [], final=True)

    def _advance(self, pieces: Sequence[tuple[str, str]], final: bool) -> list[Event]:
        out: list[Event] = [("reasoning", piece) for kind, piece in pieces if kind == "reasoning"]
        self.answer += "".join(piece for kind, piece in pieces if kind == "content")
        if not self.names:
            answer = self.answer.lstrip()
            found = self.frame.match_head(answer, list(self.functions))
            if found is None:
                if final and self.answer:
                    out.append(("content", self.answer))
                return out
            self.names.append(found[0])
            self.sent = len(self.answer) - len(answer) + found[1]
            out.append(("name", found[0]))
        if isinstance(self.frame, TaggedFrame):  # read once each call is whole (not a copy of it per token)
            return out + self._tagged_calls(self.frame, final)
        while self._json_arguments(out, final):
            pass
        return out

    def _json_arguments(self, out: list[Event], final: bool) -> bool:
        """Send what is sure of the current call's arguments; True when another call has begun."""
        if self.linked:
            found = self.frame.match_head(self.answer[self.sent:], list(self.functions), linked=True)
            if found is None:
                return False
            self.names.append(found[0])
            self.sent += found[1]
            self.linked, self.started = False, False
            out.append(("name", found[0]))
        tail = self.answer[self.sent:]
        if not self.started:  # the space a grammar lets in before the arguments is not theirs
            self.sent += len(tail) - len(tail.lstrip())
            tail = tail.lstrip()
            self.started, self.arguments_at = bool(tail), self.sent
        if self.parallel:
            for at in self.frame.links_at(tail):
                if _whole_json(self.answer[self.arguments_at:self.sent + at]):  # not inside a string argument
                    if at:
                        out.append(("arguments", tail[:at]))
                    self.sent += at + len(self.frame.link or "")
                    self.linked = True
                    return True
        body = self.frame.without_closing(tail) if final else \
            tail[:len(tail) - self.frame.held_back(tail, self.parallel)]
        if body:
            out.append(("arguments", body))
            self.sent += len(body)
        return False

    def _tagged_calls(self, frame: TaggedFrame, final: bool) -> list[Event]:
        """The arguments of each call whose end is known, written in ``frame``: a call followed by the link
        and the next call's whole head (the link cannot be written inside a value: a value cannot hold its
        closing tag's first character), and at the end the last call."""
        out: list[Event] = []
        while True:
            fn = self.functions[self.names[-1]]
            if not final:  # a call ends where a link begins: look only where one may have been completed
                since = max(self.sent, self.searched - len(frame.link or ""))
                self.searched = len(self.answer)
                if not self.parallel or not frame.links_at(self.answer[since:]):
                    return out
            found = frame.arguments_at(self.answer, self.sent, fn)
            if found is None:
                return out
            arguments, at = found
            links = frame.links_at(self.answer[at:]) if self.parallel else []
            if links and links[0] == 0:
                after = at + len(frame.link or "")
                head = frame.match_head(self.answer[after:], list(self.functions), linked=True)
                if head is None:
                    if not final:  # the next head is still being written: look again from the link
                        self.searched = at
                        return out
                    out.append(("arguments", json.dumps(arguments)))
                    return out
                out += [("arguments", json.dumps(arguments)), ("name", head[0])]
                self.names.append(head[0])
                self.sent = self.searched = after + head[1]
                continue
            if final and self.answer[at:].strip() == frame.closing.strip():
                out.append(("arguments", json.dumps(arguments)))
            return out


def _whole_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def calls_of(events: Sequence[Event]) -> list[tuple[str, str]]:
    """(name, arguments' text) of each call in a forced reply's ``events``."""
    calls: list[tuple[str, str]] = []
    for kind, piece in events:
        if kind == "name":
            calls.append((piece, ""))
        elif kind == "arguments":
            calls[-1] = (calls[-1][0], calls[-1][1] + piece)
    return calls


def read_forced_reply(text: str, reply: ForcedReply) -> tuple[str, list[dict[str, Any]]]:
    """(the thinking, the calls) of a whole forced reply; a call cut short (``max_tokens``) is left out."""
    events = reply.feed(text) + reply.finish()
    thinking = "".join(t for kind, t in events if kind == "reasoning")
    made = []
    for name, arguments in calls_of(events):
        try:
            made.append(make_tool_call(name, json.loads(arguments)))
        except json.JSONDecodeError:
            pass
    return thinking, made
