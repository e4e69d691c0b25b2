"""Functionary: MeetKai's function-calling models, in their three prompt generations.

* ``functionary``: the first models. ``system:``/``user:``/``assistant:``
  blocks; a call is ``assistant to=functions.NAME:`` followed by the JSON
  arguments and ``</s>``.
* ``functionary-v1`` (v1.x models): the same blocks closed by special tokens
  (``<|END_OF_USER|>``...); a call is ``<|START_OF_FUNCTION_CALL|>NAME:``
  followed by the arguments and ``<|END_OF_FUNCTION_CALL|>``.
* ``functionary-v2`` (v2.x models): every message is
  ``<|from|>ROLE\\n<|recipient|>TO\\n<|content|>TEXT``; the assistant writes to
  ``all`` (text) or to a function (a call), possibly several in one turn,
  and ends its turn with ``<|stop|>``.

All three describe the offered functions as a TypeScript namespace
(:mod:`.typescript_schema`) in a first system message, followed by the
system prompt the models were trained with.  The reference llama-cpp-python
renders v1/v2 with the model's Hugging Face tokenizer (``transformers``);
here the prompts are written directly, and when the vocabulary holds one
generation's special tokens that generation is used whichever of
``functionary-v1``/``-v2`` was named, as the reference does.

A named or required call is constrained: the call's opening is written into
the prompt (the name chosen by grammar among the offered ones for
"required"), then the arguments are generated under the grammar of the
function's parameter schema.  With "auto" the model's reply is parsed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from llama_cpp.chat_messages import require_text
from llama_cpp.llama_chat_format import chunks_to_chat_chunks, completion_to_chat_completion
from llama_cpp.llama_grammar import LlamaGrammar, json_schema_grammar

from .formats import message_role, message_text
from .handler import completion_arguments, response_format_grammar, tokenize_prompt, tools_of, user_stops
from .streaming import CallSyntax, stream_auto_reply, stream_forced_call
from .call_values import make_tool_call, tool_names
from .typescript_schema import functions_namespace

# the system prompt functionary models were trained with (it follows the function definitions)
SYSTEM_PROMPT = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                 "helpful, detailed, and polite answers to the user's questions. The assistant calls functions "
                 "with appropriate input when necessary")

Call = tuple[str, str]  # (function name, JSON arguments)


@dataclass(frozen=True)
class Turn:
    """One message reduced to what functionary prompts distinguish."""

    role: str  # system, user, assistant or tool
    text: str
    calls: tuple[Call, ...] = ()
    name: str = ""  # a tool result's function


def _turns(messages: list[dict[str, Any]]) -> list[Turn]:
    """OpenAI messages as turns; a tool result is named by the call it answers (``tool_call_id``)."""
    called: dict[str, str] = {}
    turns = []
    for message in messages:
        role = message_role(message)
        calls: list[Call] = []
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            calls.append((fn.get("name", ""), _arguments_text(fn.get("arguments"))))
            called[call.get("id", "")] = fn.get("name", "")
        if message.get("function_call"):  # the legacy single call
            fn = message["function_call"]
            calls.append((fn.get("name", ""), _arguments_text(fn.get("arguments"))))
        name = message.get("name") or called.get(message.get("tool_call_id", ""), "") if role == "tool" else ""
        turns.append(Turn(role, message_text(message), tuple(calls), name or ""))
    return turns


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)


def _functions(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [t["function"] for t in tools or () if isinstance(t, dict) and t.get("type", "function") == "function"
            and "function" in t]


# -- the three prompt generations -------------------------------------------------

def render_v0(turns: list[Turn], functions: list[dict[str, Any]]) -> str:
    out = [f"system:\n{functions_namespace(functions)}\n"] if functions else []
    out.append(f"system:\n{SYSTEM_PROMPT}\n")
    for turn in turns:
        if turn.role == "system":
            out.append(f"system:\n{turn.text}\n")
        elif turn.role == "user":
            out.append(f"user:\n</s>{turn.text}</s>\n")
        elif turn.role == "tool":
            out.append(f"function name=functions.{turn.name}:\n{turn.text}\n")
        else:
            if turn.text:
                out.append(f"assistant:\n{turn.text}\n")
            out += [f"assistant to=functions.{name}:\n{args}</s>\n" for name, args in turn.calls]
    out.append("assistant")
    return "".join(out)


def render_v1(turns: list[Turn], functions: list[dict[str, Any]]) -> str:
    out = [f"system:\n{functions_namespace(functions)}<|END_OF_SYSTEM|>\n"] if functions else []
    out.append(f"system:\n{SYSTEM_PROMPT}<|END_OF_SYSTEM|>\n")
    for turn in turns:
        if turn.role == "system":
            out.append(f"system:\n{turn.text}<|END_OF_SYSTEM|>\n")
        elif turn.role == "user":
            out.append(f"user:\n{turn.text}<|END_OF_USER|>\n")
        elif turn.role == "tool":
            out.append(f"function name={turn.name}:\n{turn.text}<|END_OF_FUNCTION_RESULT|>\n")
        elif not turn.calls:
            out.append(f"assistant:\n{turn.text}<|END_OF_ASSISTANT|>\n")
        else:  # v1 writes one call per assistant block: the text goes with the first
            for i, (name, args) in enumerate(turn.calls):
                text = f"{turn.text}\n" if turn.text and i == 0 else ""
                out.append(f"assistant:\n{text}<|START_OF_FUNCTION_CALL|>{name}:\n{args}<|END_OF_FUNCTION_CALL|>\n")
    out.append("assistant:\n")
    return "".join(out)


def render_v2(turns: list[Turn], functions: list[dict[str, Any]]) -> str:
    def message(sender: str, recipient: str, text: str) -> str:
        return f"<|from|>{sender}\n<|recipient|>{recipient}\n<|content|>{text}"

    out = [message("system", "all", functions_namespace(functions)), message("system", "all", SYSTEM_PROMPT)]
    for turn in turns:
        if turn.role in ("system", "user"):
            out.append(message(turn.role, "all", turn.text))
        elif turn.role == "tool":
            out.append(message(turn.name, "all", turn.text))
        else:
            parts = ([message("assistant", "all", turn.text)] if turn.text else [])
            parts += [message("assistant", name, args) for name, args in turn.calls]
            if parts:
                parts[-1] += "<|stop|>"
                out += parts
    return "\n".join(out) + "\n<|from|>assistant\n<|recipient|>"


# -- reading an "auto" reply --------------------------------------------------------

_JSON = json.JSONDecoder()


def _calls_after(text: str, opening: re.Pattern[str], names: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """Calls written as ``opening`` (capturing the name) followed by JSON arguments; the text before them."""
    calls, first = [], None
    for match in opening.finditer(text):
        rest = text[match.end():]
        stripped = rest.lstrip()
        try:
            arguments, _end = _JSON.raw_decode(stripped)
        except json.JSONDecodeError:
            continue
        if match.group(1) in names:
            calls.append(make_tool_call(match.group(1), arguments))
            first = match.start() if first is None else first
    return (text if first is None else text[:first]), calls


_V0_CALL = re.compile(r"(?:^|\n)(?:assistant)?\s*to=functions\.([A-Za-z0-9_.\-]+):\s*\n?")
_V1_CALL = re.compile(r"<\|START_OF_FUNCTION_CALL\|>\s*([A-Za-z0-9_.\-]+)\s*:\s*\n?")


def parse_v0(text: str, names: list[str]) -> tuple[str, list[dict[str, Any]]]:
    content, calls = _calls_after(text, _V0_CALL, names)
    return content.removeprefix(":").strip(), calls


def parse_v1(text: str, names: list[str]) -> tuple[str, list[dict[str, Any]]]:
    content, calls = _calls_after(text, _V1_CALL, names)
    return content.strip(), calls


def parse_v2(text: str, names: list[str]) -> tuple[str, list[dict[str, Any]]]:
    texts, calls = [], []
    for segment in text.split("<|from|>assistant\n<|recipient|>"):
        recipient, _, body = segment.partition("\n<|content|>")
        recipient, body = recipient.strip(), body.removesuffix("<|stop|>").strip()
        if recipient in names:
            try:
                calls.append(make_tool_call(recipient, json.loads(body)))
                continue
            except json.JSONDecodeError:
                pass
        texts.append(body if recipient == "all" else segment.strip())
    return "\n".join(t for t in texts if t), calls


@dataclass(frozen=True)
class Dialect:
    """How one functionary generation writes prompts, text answers and calls."""

    name: str
    render: Callable[[list[Turn], list[dict[str, Any]]], str]  # the prompt, ending where the assistant writes
    text_opening: str  # what opens a text answer
    call_opening: tuple[str, str]  # the text before and after the function's name that opens a call
    stops: tuple[str, ...]  # what ends the assistant's turn
    parse: Callable[[str, list[str]], tuple[str, list[dict[str, Any]]]]
    marker: str  # a special token only this generation's vocabulary has ("" for the first)
    call_markers: tuple[str, ...]  # what opens a call after some text

    def streaming_syntax(self) -> CallSyntax:
        return CallSyntax(markers=self.call_markers, opening=self.text_opening, bare_json=False)


DIALECTS = {
    "functionary": Dialect("functionary", render_v0, ":\n", (" to=functions.", ":\n"), ("user:", "</s>"),
                           parse_v0, "", ("\nassistant to=functions.", "to=functions.")),
    "functionary-v1": Dialect("functionary-v1", render_v1, "", ("<|START_OF_FUNCTION_CALL|>", ":\n"),
                              ("<|END_OF_ASSISTANT|>", "<|END_OF_FUNCTION_CALL|>"), parse_v1,
                              "<|START_OF_FUNCTION_CALL|>", ("<|START_OF_FUNCTION_CALL|>",)),
    "functionary-v2": Dialect("functionary-v2", render_v2, "all\n<|content|>", ("", "\n<|content|>"),
                              ("<|stop|>", "\n<|from|>user", "\n<|from|>system"), parse_v2, "<|recipient|>",
                              ("\n<|from|>", "<|from|>")),
}


def dialect_for(llama: Any, requested: str) -> Dialect:
    """The v1/v2 generation whose special tokens the model's vocabulary has, else the one requested."""
    if requested != "functionary":
        for dialect in (DIALECTS["functionary-v1"], DIALECTS["functionary-v2"]):
            if len(llama.tokenize(dialect.marker.encode(), add_bos=False, special=True)) == 1:
                return dialect
    return DIALECTS[requested]


def _name_grammar(names: list[str]) -> LlamaGrammar:
    return LlamaGrammar.from_string("root ::= " + " | ".join(json.dumps(n) for n in names))


def complete_functionary(llama: Any, dialect: Dialect, messages: list[dict[str, Any]],
                         request: dict[str, Any]) -> dict[str, Any] | Iterator[dict[str, Any]]:
    require_text(messages)
    tools, tool_choice = tools_of(request)
    functions = _functions(tools) if tool_choice != "none" else []
    names = tool_names(tools) if tool_choice != "none" else []
    prompt = dialect.render(_turns(messages), functions)
    stream = bool(request.get("stream"))
    arguments = completion_arguments(request)
    stops = user_stops(request, *dialect.stops)

    def complete(text: str, **overrides: Any) -> Any:
        kwargs = {"stop": stops, "stream": False, "grammar": None, **arguments, **overrides}
        return llama.create_completion(tokenize_prompt(llama, text, False), **kwargs)

    if not names:  # a plain answer (response_format and a user grammar apply to it)
        grammar = request.get("grammar") or response_format_grammar(request.get("response_format"))
        result = complete(prompt + dialect.text_opening, grammar=grammar, stream=stream)
        return chunks_to_chat_chunks(result) if stream else completion_to_chat_completion(result)

    if tool_choice == "auto":
        result = complete(prompt, grammar=request.get("grammar"), stream=stream)
        if stream:
            return stream_auto_reply(result, lambda text: dialect.parse(text, names), dialect.streaming_syntax())
        content, calls = dialect.parse(result["choices"][0]["text"], names)
        if not calls:
            result["choices"][0]["text"] = content
            chat = completion_to_chat_completion(result)
        else:
            message: dict[str, Any] = {"role": "assistant", "content": content or None, "tool_calls": calls}
            if len(calls) == 1:
                message["function_call"] = dict(calls[0]["function"])
            chat = completion_to_chat_completion(result, message=message, finish_reason="tool_calls")
        return chat

    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if name not in names:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools: {', '.join(names)}")
    else:  # "required": the model picks the function, among the offered ones only
        before, _after = dialect.call_opening
        picked = complete(prompt + before, grammar=_name_grammar(names), max_tokens=None, logprobs=None)
        name = picked["choices"][0]["text"]
    schema = next(fn.get("parameters") for fn in functions if fn["name"] == name) or {"type": "object"}
    before, after = dialect.call_opening
    result = complete(prompt + before + name + after, grammar=json_schema_grammar(schema), stream=stream)
    if stream:
        return stream_forced_call(result, name)
    # the grammar makes the arguments valid JSON, unless max_tokens cut them short (finish_reason "length")
    call = make_tool_call(name, result["choices"][0]["text"])
    forced_message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call],
                                      "function_call": dict(call["function"])}
    finish = "tool_calls" if result["choices"][0]["finish_reason"] == "stop" else result["choices"][0]["finish_reason"]
    return completion_to_chat_completion(result, message=forced_message, finish_reason=finish)


def functionary_handler(requested: str) -> Callable[..., Any]:
    def handler(*, llama: Any, messages: list[dict[str, Any]], **request: Any) -> Any:
        return complete_functionary(llama, dialect_for(llama, requested), messages, request)

    return handler
