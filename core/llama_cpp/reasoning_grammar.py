"""A structured-output grammar that lets a reasoning model think first.

``response_format`` constrains the reply from its first token, which would forbid the thinking block of
a reasoning model (or, with the block opened by the prompt, force the JSON into it).  With reasoning
content split out, the response format's grammar is given a prefix: an optional thinking block (the
rest of an opened one), any text without the end marker, then the end marker and a little whitespace,
then the original grammar.  llama-server builds its response-format grammar the same way.  A user's own
``grammar`` is left as it is, as llama-server leaves it: it constrains the whole reply.

A chat handler that builds a grammar of its own (a forced tool call) gives it the same prefix: while it
runs, :func:`current_thinking` holds the markers of the request's split (:func:`thinking_first`, set by
``create_chat_completion``).

The "any text without the end marker" rule is the automaton that matches a marker (Knuth-Morris-Pratt),
written as GBNF rules: one per character of the marker matched so far.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from .llama_grammar import LlamaGrammar, gbnf_literal
from .reasoning_split import Markers

ROOT = "reasoning-root"
_THINKING: contextvars.ContextVar[Markers | None] = contextvars.ContextVar("llama_cpp_thinking", default=None)
_PREFIX = "reasoning-"


def class_char(ch: str) -> str:
    """``ch`` as it is written inside a GBNF character class."""
    if ch in "]\\^-[":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if ord(ch) < 0x20:
        return f"\\x{ord(ch):02x}"
    return ch


def _next_state(marker: str, matched: int, ch: str) -> int:
    """How much of ``marker`` is matched after ``ch`` follows ``matched`` matched characters."""
    text = marker[:matched] + ch
    for k in range(min(len(text), len(marker)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


def text_without(name: str, marker: str) -> list[str]:
    """GBNF rules: ``name`` matches any text that does not contain ``marker``."""
    rules = []
    for i in range(len(marker)):
        state = name if i == 0 else f"{name}-{i}"
        alternatives = []
        seen = set()
        if i + 1 < len(marker):  # the next character of the marker: one further (the last one is refused)
            alternatives.append(f"{gbnf_literal(marker[i])} {name}-{i + 1}")
        seen.add(marker[i])
        for ch in dict.fromkeys(marker):  # other characters of the marker may restart a partial match
            if ch in seen:
                continue
            k = _next_state(marker, i, ch)
            if k > 0:
                alternatives.append(f"{gbnf_literal(ch)} {name if k == 0 else f'{name}-{k}'}")
                seen.add(ch)
        excluded = "".join(class_char(c) for c in sorted(seen))
        alternatives.append(f"[^{excluded}] {name}")
        rules.append(f"{state} ::= ({' | '.join(alternatives)})?")
    return rules


def with_reasoning_prefix(grammar: LlamaGrammar, markers: Markers) -> LlamaGrammar:
    """``grammar`` after an optional thinking block (the rest of the block when the prompt opened it), between
    the family's answer markers where it has them (optional, as in llama.cpp's grammars)."""
    body = _PREFIX + "body"
    space = f"{_PREFIX}space"
    end = gbnf_literal(markers.end)
    if markers.content_start:
        end += f" ({space} {gbnf_literal(markers.content_start)})?"
    if markers.opened:
        block = f"{body} {end}"
    elif markers.leading_content_start:  # the thinking, or an answer that opens with its marker
        block = f"({gbnf_literal(markers.start)} {body} {end} | {gbnf_literal(markers.leading_content_start)})?"
    else:
        block = f"({gbnf_literal(markers.start)} {body} {end})?"
    answer = grammar.root
    if markers.content_end:
        answer = f"{answer} ({space} {gbnf_literal(markers.content_end)})?"
    rules = [f"{ROOT} ::= {block} {space} {answer}", f"{space} ::= [ \\t\\n\\r]{{0,20}}",
             *text_without(body, markers.end)]
    return LlamaGrammar(_grammar=grammar.grammar.rstrip() + "\n" + "\n".join(rules) + "\n", _root=ROOT)


@contextlib.contextmanager
def thinking_first(markers: Markers | None) -> Iterator[None]:
    """While a chat handler runs: the thinking block its reply may begin with (None: the request splits no
    reasoning, so a grammar constrains the reply from its first token)."""
    token = _THINKING.set(markers)
    try:
        yield
    finally:
        _THINKING.reset(token)


def current_thinking() -> Markers | None:
    """The markers :func:`thinking_first` set for the running handler (None outside it)."""
    return _THINKING.get()


def after_thinking(grammar: LlamaGrammar) -> LlamaGrammar:
    """``grammar`` after the running request's thinking block, if it splits reasoning."""
    markers = current_thinking()
    return grammar if markers is None else with_reasoning_prefix(grammar, markers)


__all__ = ["ROOT", "after_thinking", "class_char", "current_thinking", "text_without", "thinking_first",
           "with_reasoning_prefix"]
