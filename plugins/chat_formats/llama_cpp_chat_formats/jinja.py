"""Rendering chat templates (Jinja) from untrusted GGUF files, in a sandbox.

A template comes from a model file, so it is untrusted code: it runs in
Jinja2's sandbox, which refuses access to Python internals (``__class__``,
``__globals__``...), and may not change the values it is given (the caller's
messages and tools); the lists and dicts it makes itself it may change, as
llama.cpp's own engine lets it (Kimi K2's templates queue tool call ids in a
list of their own).  What real templates need is provided: ``raise_exception``,
``strftime_now``, a ``tojson`` that does not HTML-escape, loop controls, and
the ``{% generation %}`` blocks of training templates (rendered as their body),
and a ``safe`` that returns plain text (nothing is escaped here: Jinja's
``Markup`` would HTML-escape what a template adds to it, as llama.cpp's engine
does not).
Templates are compiled on first use, so one unusual template never breaks
loading a model.

The sandbox bounds how long a rendering may run, which Jinja's own does not:
every loop step and every call (a macro calling itself twice, 40 deep, is
2**40 calls) spends one of ``MAX_STEPS``, and a template past it fails with a
``TemplateError`` instead of hanging the process.  Repeating a string or list
(``'x' * n``) and integer powers are sized before they are computed.  Other
ways for a template to ask for a huge string (a width argument, as in
``'x'.ljust(n)``) are not bounded.
"""

from __future__ import annotations

import contextvars
import datetime
import json
from typing import Any, Iterable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable
from llama_cpp.chat_messages import content_text
from llama_cpp.llama_chat_format import ChatFormatterResponse

from . import family_messages
from .handler import formatter_handler


class TemplateError(ValueError):
    """A chat template that cannot be compiled or rendered (or that tried to leave the sandbox)."""


class _GenerationBlocks(Extension):
    """``{% generation %}...{% endgeneration %}`` (used by training templates) renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the chat template refused the conversation: {message}")


def _plain_text(value: Any) -> str:
    """``safe``: with no escaping there is nothing to mark safe; a ``Markup`` would escape the strings
    added to it (functionary's ``"Use the function '"|safe + name`` wrote ``&#34;`` into prompts)."""
    return str(value)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _jsonable(value: Any) -> Any:
    """What json.dumps cannot take itself: Jinja's lazy sequences (map, select...) and undefined values."""
    if isinstance(value, jinja2.Undefined):
        return None
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False,
            separators: Any = None) -> str:
    """Like transformers' tojson: plain JSON, no HTML escaping (templates write it into prompts)."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                      separators=tuple(separators) if separators else None, default=_jsonable)


class _LenientUndefined(jinja2.ChainableUndefined):
    """Missing values render as nothing, also inside ``+`` and attribute chains.

    Templates are written against many engines (transformers, llama.cpp's own
    Jinja); some concatenate variables their engine happens to leave empty
    (firefunction's ``functions``) or read fields of another tool format
    (command-r's ``tool.description``).  Being lenient about missing values
    renders them as llama.cpp does; it opens nothing to the template.
    """

    def _refused(self) -> bool:
        return self._undefined_exception is jinja2.exceptions.SecurityError

    def __getattr__(self, name: str) -> Any:
        if self._refused() and not name.startswith("__"):
            self._fail_with_undefined_error()  # an attribute the sandbox refused stays refused
        return super().__getattr__(name)

    def __add__(self, other: Any) -> Any:
        if self._refused():
            self._fail_with_undefined_error()
        return other

    def __radd__(self, other: Any) -> Any:
        if self._refused():
            self._fail_with_undefined_error()
        return other

    def __str__(self) -> str:
        if self._refused():
            self._fail_with_undefined_error()
        return super().__str__()

    def __iter__(self) -> Any:
        if self._refused():
            self._fail_with_undefined_error()
        return super().__iter__()


# What one rendering may spend.  Most real templates take thousands of steps for a long conversation with
# many tools; Gemma 4's looks back over the conversation at every message: 2 million steps (7 s) for
# 2000 messages.  Ten million steps take 30 to 40 s; nothing real repeats more than a few spaces.
MAX_STEPS = 10_000_000
MAX_REPEATED = 10_000_000  # items a repetition ('x' * n, [0] * n) may make
MAX_POWER_BITS = 4_096  # size of an integer power (2 ** n)



class _Rendering:
    """One rendering's state: the steps it has left, and the containers its caller gave it (by identity),
    which it may not change."""

    __slots__ = ("steps_left", "given")

    def __init__(self, values: Any) -> None:
        self.steps_left = MAX_STEPS
        self.given = _containers(values)


def _containers(values: Any) -> frozenset[int]:
    """The ids of every list, dict, set and tuple reachable from ``values`` (alive through the rendering,
    so no object the template makes can share one)."""
    seen: set[int] = set()
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, (list, tuple, set, frozenset, dict)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value.values() if isinstance(value, dict) else value)
    return frozenset(seen)


_rendering: contextvars.ContextVar[_Rendering | None] = contextvars.ContextVar("template_rendering", default=None)


def _spend() -> None:
    rendering = _rendering.get()
    if rendering is None:  # rendered outside Jinja2ChatFormatter.render: not counted
        return
    rendering.steps_left -= 1
    if rendering.steps_left < 0:
        raise TemplateError(f"the chat template took more than {MAX_STEPS} loop steps and calls in one rendering: "
                            "refused (a template that would loop or recurse without end)")


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """What every ``{% for %}`` iterates (see ``_TemplateSandbox``): the same items, each a step."""
    for item in iterable:
        _spend()
        yield item


def _repeat(left: Any, right: Any) -> Any:
    sequence, times = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(sequence, (str, list, tuple)) and isinstance(times, int) and \
            len(sequence) * times > MAX_REPEATED:
        raise TemplateError(f"the chat template repeats {len(sequence)} items {times} times: more than "
                            f"{MAX_REPEATED} items are refused")
    return left * right


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and \
            exponent * base.bit_length() > MAX_POWER_BITS:
        raise TemplateError(f"the chat template raises {base} to the power {exponent}: refused (too large)")
    return base ** exponent


class _TemplateSandbox(SandboxedEnvironment):
    """Jinja's sandbox, with every loop and call counted against ``MAX_STEPS``, repetition and powers sized,
    and the values the caller gave the rendering unchangeable."""

    intercepted_binops = frozenset({"*", "**"})
    _sized = {"*": _repeat, "**": _power}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):  # for x in <iter>  ->  for x in _counted(<iter>)
            loop.iter = nodes.Call(nodes.ImportedName(f"{__name__}._counted"), [loop.iter], [], None, None,
                                   lineno=loop.lineno)
        return tree

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        if not modifies_known_mutable(obj, attr):
            return True
        rendering = _rendering.get()  # outside a counted rendering nothing may be changed
        return rendering is not None and id(obj) not in rendering.given

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        return self._sized.get(operator_name, self.binop_table[operator_name])(left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's names
        _spend()
        return super().call(__context, __obj, *args, **kwargs)


def make_environment() -> SandboxedEnvironment:
    env = _TemplateSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationBlocks],
        undefined=_LenientUndefined, autoescape=False,
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    env.filters["safe"] = _plain_text
    return env


_ENV = make_environment()

# the text that shows, in a probe's rendering, whether a template rendered a value in the form it was given
_PROBE = "template-probe-5f0c"


def _with_object_arguments(call: dict[str, Any], where: str) -> dict[str, Any]:
    """``call`` with its JSON-string arguments parsed, for a template that renders them as an object."""
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    arguments = fn["arguments"]
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise TemplateError(f"{where}.function.arguments must be a JSON object for this chat template, which "
                            f"renders the arguments as an object; got {arguments!r:.80}")
    return {**call, "function": {**fn, "arguments": parsed}}


def _system_merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without their leading system message, whose text goes in front of the next message's
    (a newline between, as llama.cpp joins them); alone, it is dropped."""
    system, rest = messages[0], messages[1:]
    if not rest:
        return []
    text = system.get("content")
    text = content_text(text) if isinstance(text, list) else str(text or "")
    first = rest[0]
    content = first.get("content")
    if isinstance(content, list):  # a template that renders the parts itself gets the text as one more part
        merged: Any = [{"type": "text", "text": text}, *content]
    else:
        merged = f"{text}\n{content or ''}"
    return [{**first, "content": merged}, *rest[1:]]


class Jinja2ChatFormatter:
    """Renders messages with a Jinja chat template (llama-cpp-python's ``Jinja2ChatFormatter``)."""

    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: list[int] | None = None, special_tokens_map: dict[str, str] | None = None) -> None:
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = list(stop_token_ids or [])
        self.special_tokens_map = dict(special_tokens_map or {})
        self._compiled: jinja2.Template | None = None
        self._takes_parts: bool | None = None
        self._takes_objects: bool | None = None
        self._takes_system: bool | None = None

    def _template(self) -> jinja2.Template:
        if self._compiled is None:
            try:
                self._compiled = _ENV.from_string(self.template)
            except jinja2.TemplateError as exc:
                raise TemplateError(f"the chat template does not compile: {exc}") from exc
        return self._compiled

    def render(self, messages: list[dict[str, Any]], **variables: Any) -> str:
        now = datetime.datetime.now()
        context = {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),  # as llama.cpp
                   **self.special_tokens_map, "eos_token": self.eos_token, "bos_token": self.bos_token, **variables}
        variables = {"messages": messages, **context}
        rendering = _rendering.set(_Rendering(variables))
        try:
            return self._template().render(**variables)
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the chat template was refused: it tried to reach Python internals or to change "
                                f"the values it was given ({exc})") from exc
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
        except RecursionError as exc:
            raise TemplateError("the chat template failed: it nests macro calls or blocks too deeply") from exc
        finally:
            _rendering.reset(rendering)

    def _probe(self, messages: list[dict[str, Any]], **variables: Any) -> str:
        """The template's rendering of a probe conversation, or "" where it refuses or fails on it."""
        try:
            return self.render(messages, add_generation_prompt=True, **variables)
        except TemplateError:
            return ""

    def takes_content_parts(self) -> bool:
        """Whether the template renders a list of text parts itself (Gemma 4's and Granite 4's iterate them);
        one that does not (SmolLM2's adds the content to a string) gets the parts' text as one string.
        llama.cpp asks each template the same (``supports_typed_content``, common/jinja/caps.cpp).  Asked
        once, when a list first comes."""
        if self._takes_parts is None:
            out = self._probe([{"role": "user", "content": [{"type": "text", "text": _PROBE}]}])
            # a template that prints the list itself (``{{ message.content }}``) shows the part's keys
            self._takes_parts = _PROBE in out and "'type'" not in out and '"type"' not in out
        return self._takes_parts

    def takes_object_arguments(self) -> bool:
        """Whether the template renders a tool call's arguments as an object (Qwen3-Coder's iterates their
        items, Llama 3.1's writes them with ``tojson``); one that does gets OpenAI's JSON string parsed, as
        llama.cpp does for such templates (``supports_object_arguments``, ``func_args_not_string``).
        Asked once, when a tool call first comes."""
        if self._takes_objects is None:
            arguments = {"arg": _PROBE}
            call = {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": arguments}}
            tool = {"type": "function", "function": {"name": "tool1", "description": "Tool description", "parameters": {
                "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
            out = self._probe([
                {"role": "user", "content": "User message"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
                {"role": "assistant", "content": "The tool response was 'tool response'"},
                {"role": "user", "content": "User message"},
            ], tools=[tool])
            # printed as Python's repr, the object was not what the template wanted (a repr elsewhere in the
            # prompt, of the tool's parameters, says nothing about the call)
            self._takes_objects = _PROBE in out and repr(arguments) not in out
        return self._takes_objects

    def takes_system_role(self) -> bool:
        """Whether the template renders a system message (Gemma 2's refuses one, others drop it); one that
        does not gets the system message's text in front of the next message's, as llama.cpp does for
        such templates (``supports_system_role``, ``system_message_not_supported``).  Asked once, when a
        system message first comes."""
        if self._takes_system is None:
            out = self._probe([{"role": "system", "content": _PROBE}, {"role": "user", "content": "User message"}])
            self._takes_system = _PROBE in out
        return self._takes_system

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` in the forms this template renders: lists of text parts as their text where it takes
        strings (:meth:`takes_content_parts`), tool-call arguments as objects where it takes objects
        (:meth:`takes_object_arguments`; arguments that are not a JSON object are a ValueError naming the
        call), a leading system message merged into the next message where it renders none
        (:meth:`takes_system_role`), then as llama.cpp's handler of the template's family hands them over
        (:mod:`.family_messages`).  Unchanged where none applies."""
        flatten = any(isinstance(m.get("content"), list) for m in messages) and not self.takes_content_parts()
        objects = any(m.get("tool_calls") for m in messages) and self.takes_object_arguments()
        merge = bool(messages) and messages[0].get("role") == "system" and not self.takes_system_role()
        if not (flatten or objects or merge):
            return family_messages.adapted(self.template, messages)
        out = []
        for i, message in enumerate(messages):
            if flatten and isinstance(message.get("content"), list):
                message = {**message, "content": content_text(message["content"])}
            if objects and message.get("tool_calls"):
                message = {**message, "tool_calls": [_with_object_arguments(call, f"messages[{i}].tool_calls[{k}]")
                                                     for k, call in enumerate(message["tool_calls"])]}
            out.append(message)
        return family_messages.adapted(self.template, _system_merged(out) if merge else out)

    def __call__(self, *, messages: list[dict[str, Any]], functions: Any = None, function_call: Any = None,
                 tools: Any = None, tool_choice: Any = None, add_generation_prompt: bool | None = None,
                 **kwargs: Any) -> ChatFormatterResponse:
        """Render; extra keywords become template variables (``enable_thinking``, ``documents``...).

        Variables that are None are left undefined, as transformers does:
        templates test ``tools is defined`` and then iterate.  Content parts and tool-call arguments reach
        the template in the form it renders (:meth:`template_messages`).
        """
        messages = self.template_messages(messages)
        variables = {"functions": functions, "function_call": function_call, "tools": tools,
                     "tool_choice": tool_choice, **kwargs}
        prompt = self.render(
            messages, add_generation_prompt=self.add_generation_prompt if add_generation_prompt is None
            else add_generation_prompt, **{k: v for k, v in variables.items() if v is not None},
        )
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token] if self.eos_token else None,
                                     added_special=bool(self.bos_token) and prompt.startswith(self.bos_token))

    def to_chat_handler(self) -> Any:
        """A chat handler that renders with this formatter (llama-cpp-python's method): structured output,
        tools and streaming as for the named formats."""
        return formatter_handler(self)
