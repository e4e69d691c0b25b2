"""``chatml-function-calling``: tool use for any ChatML model, without a tool-aware template.

The offered functions are described in the system message (name, description,
parameter schema) together with the reply syntax ``functions.NAME:`` followed
by the JSON arguments; the reply is parsed back into ``tool_calls``, and a
named or required tool is forced by grammar, as for every format.
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_chat_format import ChatFormatterResponse

from .formats import NAMED_FORMATS, message_text


def describe_tools(tools: list[dict[str, Any]]) -> str:
    lines = ["You can call these functions:"]
    for tool in tools:
        fn = tool.get("function", {})
        lines.append(f"functions.{fn.get('name')}: {fn.get('description', '').strip()}")
        lines.append(f"  parameters (JSON schema): {json.dumps(fn.get('parameters', {}), ensure_ascii=False)}")
    lines.append("To call a function, reply with only `functions.<name>:` on one line and the JSON arguments "
                 "on the next. Otherwise, answer normally.")
    return "\n".join(lines)


def format_chatml_function_calling(*, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                                   **kwargs: Any) -> ChatFormatterResponse:
    """ChatML, with the tools described in the system message and tool calls written back as text."""
    rendered: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:  # earlier calls, in the syntax the model is asked for
            text = "\n".join(f"functions.{c['function']['name']}:\n{c['function']['arguments']}" for c in calls)
            rendered.append({"role": "assistant", "content": text})
        else:
            rendered.append(message)
    if tools:
        description = describe_tools(tools)
        if rendered and rendered[0].get("role") == "system":
            rendered[0] = {"role": "system", "content": f"{message_text(rendered[0])}\n\n{description}"}
        else:
            rendered.insert(0, {"role": "system", "content": description})
    return NAMED_FORMATS["chatml"](messages=rendered, **kwargs)
