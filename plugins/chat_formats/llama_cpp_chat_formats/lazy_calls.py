"""An "auto" reply's tool calls, constrained once they begin: llama-server's lazy grammar.

With tools offered and ``tool_choice`` "auto" the model may answer in text or call; llama-server leaves the
text free and constrains a call from its opening marker on (a grammar that waits for a trigger word), so a
call that begins is written in the template's syntax, names an offered tool and follows its parameters'
schema.  Here the grammar is the forced call's (:mod:`.forced_calls`: the template's own frame, with its
link to further calls where ``parallel_tool_calls`` allows them), and its trigger the frame's opening
marker (``<tool_call>``, ``[TOOL_CALLS]``...).  Once the calls are written only the end of the turn can
follow, as under llama-server.

No grammar is set where the template writes calls in no frame of its own (:data:`.call_frames.JSON_FRAME`,
whose opening is a bare ``{``, would constrain any JSON the model writes), where the frame opens with no
marker, or where the reply may think first: a marker inside the thinking would start the grammar there and
end the reply in the middle of it (llama-server keeps its lazy grammar out of the thinking with a sampler
that follows the block; here such a reply stays unconstrained, its calls read back as before).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llama_cpp.llama_grammar import LlamaGrammar

from .call_frames import JSON_FRAME
from .continuation import template_thinking_markers
from .forced_calls import Formatter, template_frame
from .tool_calls import CALL_MARKERS


@dataclasses.dataclass(frozen=True)
class LazyCalls:
    """The grammar of an auto reply's calls (from the trigger on) and the word that starts it."""

    grammar: LlamaGrammar
    trigger: str


def lazy_calls(formatter: Formatter, variables: dict[str, Any], functions: list[dict[str, Any]],
               parallel_tool_calls: bool | None, prompt: str) -> LazyCalls | None:
    """The lazy grammar of an auto reply to ``prompt`` (rendered by ``formatter`` with template
    ``variables``) that may call ``functions`` (None where the module's docstring says)."""
    thinking = template_thinking_markers(formatter)
    if thinking.end and not prompt.rstrip().endswith(thinking.end.strip()):  # the reply may think
        return None
    frame = template_frame(formatter, variables)
    if frame is JSON_FRAME:
        return None
    opening = frame.opening.lstrip()  # the grammar starts where the trigger is found
    trigger = max((m for m in CALL_MARKERS if opening.startswith(m)), key=len, default="")
    if not trigger:
        return None
    parallel = bool(frame.link) and parallel_tool_calls is not False
    return LazyCalls(dataclasses.replace(frame, opening=opening).grammar(functions, parallel), trigger)


__all__ = ["LazyCalls", "lazy_calls"]
