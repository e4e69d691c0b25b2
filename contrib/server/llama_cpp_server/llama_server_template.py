"""llama-server's render-only chat routes: ``POST /apply-template`` and ``POST /chat/completions/input_tokens``.

A client asks what prompt a chat body becomes (to show it, to cache it, to post it to ``/completion``
itself) or how many tokens it takes (to fit a conversation into the context) without generating.  Both
render through the model's own chat handler (:meth:`llama_cpp.Llama.render_chat_prompt`), so the text is
the one ``/v1/chat/completions`` would generate from for the same body, and the count is that text's
tokens as the chat route evaluates them.
"""

from __future__ import annotations

from typing import Any

from llama_cpp.engine.normalize import text_prompt_tokens
from llama_cpp.llama_chat_format import ChatFormatterResponse

from .errors import APIError
from .requests import chat_prompt_arguments
from .schemas import ChatRequest


def rendered_prompt(llm: Any, body: ChatRequest) -> ChatFormatterResponse:
    """``body``'s messages rendered by ``llm``'s chat handler; 501 for a handler that renders only while it
    generates (a script's own function, functionary's)."""
    try:
        return llm.render_chat_prompt(**chat_prompt_arguments(body))
    except NotImplementedError as exc:
        raise APIError(501, f"{exc}: this model's chat format cannot show its prompt alone") from None


def apply_template(llm: Any, body: ChatRequest) -> dict[str, Any]:
    """``/apply-template``'s answer, as llama-server's: ``{"prompt": the rendered text}``, without the BOS a
    template writes first when the tokenizer adds BOS itself (llama.cpp takes it off the rendered text; the
    tokens the chat evaluates are the same either way)."""
    rendered = rendered_prompt(llm, body)
    prompt = rendered.prompt
    if rendered.added_special and llm.add_bos_token():
        bos = llm.detokenize([llm.token_bos()], special=True).decode("utf-8", "replace")
        prompt = prompt.removeprefix(bos)
    return {"prompt": prompt}


def input_tokens(llm: Any, body: ChatRequest) -> dict[str, Any]:
    """``/chat/completions/input_tokens``'s answer, as llama-server's: the prompt's token count (BOS as the
    chat route adds it) and ``object: response.input_tokens``.  A body with media parts is refused: its
    count depends on the projector's tokens per image, which only the generation computes here."""
    if any(isinstance(m.get("content"), list) and any(isinstance(p, dict) and p.get("type") != "text"
                                                      for p in m["content"]) for m in body.messages):
        raise APIError(400, "messages: counting the tokens of media parts is not implemented here (send text "
                       "parts only)", param="messages")
    rendered = rendered_prompt(llm, body)
    tokens = text_prompt_tokens(llm, rendered.prompt, starts_with_bos=rendered.added_special)
    return {"input_tokens": len(tokens), "object": "response.input_tokens"}
