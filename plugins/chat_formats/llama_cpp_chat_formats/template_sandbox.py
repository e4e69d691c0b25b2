"""The sandbox chat templates render in: a GGUF's template is untrusted code.

Jinja2's sandbox refuses access to Python internals (``__class__``, ``__globals__``...); here a template
may also not change the values it is given (the caller's messages and tools), while the lists and dicts
it makes itself it may change, as llama.cpp's own engine lets it (Kimi K2's templates queue tool call
ids in a list of their own).  What real templates need is provided: ``raise_exception``,
``strftime_now``, a ``tojson`` that does not HTML-escape, loop controls, the ``{% generation %}`` blocks
of training templates (rendered as their body), and a ``safe`` that returns plain text (nothing is
escaped here: Jinja's ``Markup`` would HTML-escape what a template adds to it, as llama.cpp's engine
does not).

The sandbox also bounds how long a rendering may run, which Jinja's own does not: every loop step and
every call (a macro calling itself twice, 40 deep, is 2**40 calls) spends one of ``MAX_STEPS``, and a
template past it fails with a ``TemplateError`` instead of hanging the process.  Repeating a string or
list (``'x' * n``) and integer powers are sized before they are computed.  Other ways for a template to
ask for a huge string (a width argument, as in ``'x'.ljust(n)``) are not bounded.

A rendering is counted, and its caller's values are protected, inside :func:`rendering`.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
from typing import Any, Iterable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable


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


ENVIRONMENT = make_environment()


@contextlib.contextmanager
def rendering(values: Any) -> Iterator[None]:
    """Count the steps of the rendering that runs inside, and keep ``values`` (what it is given) unchanged."""
    token = _rendering.set(_Rendering(values))
    try:
        yield
    finally:
        _rendering.reset(token)
