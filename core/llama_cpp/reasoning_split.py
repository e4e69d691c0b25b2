"""Splitting a reply into its thinking and its answer, as the reply is generated.

Only a block at the very beginning of the reply counts (leading whitespace aside), and only the first
one: a model that writes ``<think>`` later, or thinks twice, keeps that text in its answer, as
llama-server's parsers read replies.  A reply whose prompt opened the block (the template's generation
prompt ends with ``<think>``) begins inside it.  Where a family marks its answer too (gpt-oss's final
channel, Cohere2 MoE's ``<|START_TEXT|>`` ... ``<|END_TEXT|>``), the markers are dropped, and so is what
follows the answer's end marker: the closing markers of the turn, all that these formats allow there.

The whitespace a template writes after a marker (Qwen3's ``<think>\\n``, ``</think>\\n\\n``) is part of the
marker: as much of it as the reply repeats is dropped, no more, which is what llama-server's parsers,
derived from the template, drop.  A stream is fed piece by piece; text that may be the beginning of a
marker is held back until the next piece decides, so that no delta ever carries part of a marker.
"""

from __future__ import annotations

from typing import Literal

import attrs

Kind = Literal["reasoning", "content"]
Piece = tuple[Kind, str]


@attrs.frozen
class Markers:
    """The markers of one reply's reasoning block, with the whitespace the template writes after them;
    ``opened`` when the prompt opened the block, and ``opened_with`` the prompt's text after its ``start``
    (llama-server counts it as thinking); ``content_start`` and ``content_end`` around the answer, where the
    family marks it, and ``leading_content_start`` what opens an answer the reply begins with (the
    ``content_start`` less the part the prompt ends with: gpt-oss's ``<|channel|>final<|message|>`` after a
    prompt's ``<|start|>assistant``)."""

    start: str
    end: str
    content_start: str = ""
    content_end: str = ""
    leading_content_start: str = ""
    start_space: str = ""
    end_space: str = ""
    opened: bool = False
    opened_with: str = ""


def _common_prefix(text: str, space: str) -> int:
    n = 0
    while n < len(text) and n < len(space) and text[n] == space[n]:
        n += 1
    return n


def partial_tail(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (what may grow into it)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class ReasoningSplitter:
    """Feed the reply's text in pieces; get back ``("reasoning" | "content", text)`` pieces in order."""

    def __init__(self, markers: Markers) -> None:
        self.markers = markers
        self._pending = ""
        self._state = "reasoning-start" if markers.opened else "undecided"
        self._opened_with = markers.opened_with if markers.opened else ""
        self._fed = 0
        #: where the answer begins in the text fed (after the thinking block and its markers), once known
        self.answer_at: int | None = None

    @property
    def thinking(self) -> bool:
        """Whether the reply is in its thinking block now (begun, not ended)."""
        return self._state in ("start-space", "reasoning-start", "reasoning", "end-space")

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        self._fed += len(text)
        return self._advance(final=False)

    def finish(self) -> list[Piece]:
        """What is held back, once the reply is complete."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        m = self.markers
        while True:
            text = self._pending
            state = self._state
            if state == "undecided":
                rest = text.lstrip()
                if rest.startswith(m.start):
                    self._pending = rest[len(m.start):]
                    self._state = "start-space"
                    continue
                if m.leading_content_start and rest.startswith(m.leading_content_start):  # no thinking
                    self._pending = rest[len(m.leading_content_start):]
                    self._answer()
                    continue
                if not final and (not rest or m.start.startswith(rest) or m.leading_content_start.startswith(rest)):
                    return out  # still whitespace, or the beginning of a marker
                self._answer()
                continue
            if state == "start-space":
                n = _common_prefix(text, m.start_space)
                if n == len(text) and n < len(m.start_space) and not final:
                    return out
                self._pending = text[n:]
                self._state = "reasoning-start"
                continue
            if state == "reasoning-start":
                self._state = "reasoning"
                if self._opened_with:
                    out.append(("reasoning", self._opened_with))
                    self._opened_with = ""
                continue
            if state == "reasoning":
                at = text.find(m.end)
                if at >= 0:
                    if at:
                        out.append(("reasoning", text[:at]))
                    self._pending = text[at + len(m.end):]
                    self._state = "end-space"
                    continue
                keep = 0 if final else partial_tail(text, m.end)
                if len(text) > keep:
                    out.append(("reasoning", text[:len(text) - keep]))
                    self._pending = text[len(text) - keep:]
                return out
            if state == "end-space":
                n = _common_prefix(text, m.end_space)
                if n == len(text) and n < len(m.end_space) and not final:
                    return out
                self._pending = text[n:]
                self._answer("content-start" if m.content_start else "content")
                continue
            if state == "content-start":
                if text.startswith(m.content_start):
                    self._pending = text[len(m.content_start):]
                elif m.content_start.startswith(text) and not final:
                    return out
                self._state = "content"
                continue
            if state == "content" and m.content_end:
                at = text.find(m.content_end)
                if at >= 0:
                    if at:
                        out.append(("content", text[:at]))
                    self._pending = ""
                    self._state = "closed"
                    return out
                keep = 0 if final else partial_tail(text, m.content_end)
                if len(text) > keep:
                    out.append(("content", text[:len(text) - keep]))
                    self._pending = text[len(text) - keep:]
                return out
            if state == "closed":  # after the answer's end marker: the turn's closing markers
                self._pending = ""
                return out
            # content: everything passes
            if text:
                out.append(("content", text))
                self._pending = ""
            return out

    def _answer(self, state: str = "content") -> None:
        """The answer begins with what is pending."""
        self._state = state
        self.answer_at = self._fed - len(self._pending)


def split_reasoning(text: str, markers: Markers) -> tuple[str, str]:
    """A whole reply's (reasoning, content)."""
    splitter = ReasoningSplitter(markers)
    pieces = splitter.feed(text) + splitter.finish()
    return ("".join(t for kind, t in pieces if kind == "reasoning"),
            "".join(t for kind, t in pieces if kind == "content"))


__all__ = ["Markers", "ReasoningSplitter", "partial_tail", "split_reasoning"]
