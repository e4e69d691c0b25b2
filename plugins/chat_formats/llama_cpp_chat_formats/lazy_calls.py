"""An "auto" reply's tool calls, constrained once they begin: llama-server's lazy grammar.

With tools offered and ``tool_choice`` "auto" the model may answer in text or call; llama-server leaves the
text free and constrains a call from its opening marker on (a grammar that waits for a trigger word), so a
call that begins is written in the template's syntax, names an offered tool and follows its parameters'
schema.  Here the grammar is the forced call's (:mod:`.forced_calls`: the template's own frame, with its
link to further calls where ``parallel_tool_calls`` allows them), and its trigger the frame's opening
marker (``<tool_call>``, ``[TOOL_CALLS]``...).  Once the calls are written only the end of the turn can
follow, as under llama-server.

A reply may think first: the grammar waits for its trigger outside the thinking (the samplers' grammar
stage follows the block between ``reasoning_start`` and ``reasoning_end``, set here to the template's
markers unless the request set them), as llama-server's does; a marker written while the model thinks is
part of its thought.  No grammar is set where the template writes calls in no frame of its own
(:data:`.call_frames.JSON_FRAME`, whose opening is a bare ``{``, would constrain any JSON the model writes),
where the frame opens with no marker, or where the reply may make several calls and the frame has no link
between two (Kimi K2 and Cohere number their calls): a grammar of one call would take the others away.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llama_cpp.llama_grammar import LlamaGrammar

from .call_frames import JSON_FRAME, CallFrame
from .continuation import ThinkingMarkers, template_thinking_markers
from .forced_calls import ForcedReply, Formatter, template_frame
from .tool_calls import CALL_MARKERS


@dataclasses.dataclass(frozen=True)
class LazyCalls:
    """The grammar of an auto reply's calls (from the trigger on), the word that starts it, the sampling
    keywords that mark the thinking it waits outside of (empty where the template has none), and what reads
    the calls as they are written (:meth:`reader`)."""

    grammar: LlamaGrammar
    trigger: str
    thinking: dict[str, Any]
    frame: CallFrame
    functions: list[dict[str, Any]]
    parallel: bool

    def reader(self) -> ForcedReply:
        """A reader of the calls from the trigger on: the grammar wrote them, as it writes a forced reply."""
        return ForcedReply(self.frame, self.functions, None, self.parallel)


def lazy_calls(formatter: Formatter, variables: dict[str, Any], functions: list[dict[str, Any]],
               parallel_tool_calls: bool | None, prompt: str) -> LazyCalls | None:
    """The lazy grammar of an auto reply to ``prompt`` (rendered by ``formatter`` with template
    ``variables``) that may call ``functions`` (None where the module's docstring says)."""
    frame = template_frame(formatter, variables)
    if frame is JSON_FRAME:
        return None
    opening = frame.opening.lstrip()  # the grammar starts where the trigger is found
    trigger = max((m for m in CALL_MARKERS if opening.startswith(m)), key=len, default="")
    if not trigger:
        return None
    parallel = parallel_tool_calls is not False
    if parallel and not frame.link:  # one call a reply would take away the several calls the model may write
        return None
    frame = dataclasses.replace(frame, opening=opening)
    return LazyCalls(frame.grammar(functions, parallel), trigger,
                     _thinking_block(template_thinking_markers(formatter), prompt), frame, functions, parallel)


def _thinking_block(markers: ThinkingMarkers, prompt: str) -> dict[str, Any]:
    """The reasoning keywords for the template's thinking block: its markers, and whether ``prompt`` opened
    it (a template with an end marker alone, as Apriel's, has its reply begin inside the block)."""
    start, end = markers.start.strip(), markers.end.strip()
    if not end:
        return {}
    opened = not start or prompt.rstrip().endswith(start)
    return {"reasoning_end": end, "reasoning_start_in_prompt": opened, **({"reasoning_start": start} if start else {})}


__all__ = ["LazyCalls", "lazy_calls"]
