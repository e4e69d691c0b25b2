"""llama-server's ``/infill`` (what llama.vscode and llama.vim send): the code around a gap and other files
of the repository, laid out as llama-server lays out a fill-in-the-middle prompt, then answered as
``/completion``."""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from .errors import APIError
from .llama_server_completion import NativeCompletionRequest, NativePrompt
from .llama_server_text import Mixed, mixed_tokens


class ExtraContext(BaseModel):
    """One file of ``input_extra``: the repository context llama.vscode and llama.vim send before the gap.
    Other keys of a chunk are ignored, as llama-server ignores them: both plugins send each chunk's ``time``."""

    model_config = ConfigDict(extra="ignore")

    filename: str = "tmp"
    text: str


class NativeInfillRequest(NativeCompletionRequest):
    """The body of llama-server's ``/infill``: the code before and after the gap, other files of the
    repository, and an optional ``prompt`` placed right after the prefix (as llama-server places it)."""

    prompt: NativePrompt = ""
    input_prefix: Mixed
    input_suffix: Mixed
    input_extra: list[ExtraContext] = Field(default_factory=list)


def infill_prompt(body: NativeInfillRequest, llm: Any, n_batch: int, n_predict: int) -> list[int]:
    """llama-server's fill-in-the-middle layout: the repository's other files (newest last, cut from the
    front to what the context leaves), BOS, the prefix's end and the prompt, the suffix's start, then the
    middle token; ``n_batch`` and the server's ``n_predict`` size the parts as llama-server's ``-b`` and ``-n``."""
    fim = llm.fim_tokens()
    if fim.missing:
        raise APIError(501, "Infill is not supported by this model: it has no fill-in-the-middle "
                       f"{' and '.join(fim.missing)} token (use a code model with FIM tokens)", param="model")

    def text(value: str) -> list[int]:
        return llm.tokenize(value.encode("utf-8"), add_bos=False, special=False)

    extra: list[int] = [fim.repo, *text("myproject\n")] if fim.repo >= 0 else []
    for chunk in body.input_extra:
        extra += [fim.separator, *text(chunk.filename + "\n")] if fim.separator >= 0 else text(
            "\n\n--- snippet ---\n\n")
        extra += text(chunk.text)
    if fim.separator >= 0:
        extra += [fim.separator, *text("filename\n")]
    prefix = mixed_tokens(llm, body.input_prefix, add_bos=False, special=False, field="input_prefix")
    suffix = mixed_tokens(llm, body.input_suffix, add_bos=False, special=False, field="input_suffix")
    if isinstance(body.prompt, list) and any(isinstance(item, list) for item in body.prompt):
        raise APIError(400, "prompt: /infill takes one prompt (a text, or token ids and texts), not a list of "
                       "prompts", param="prompt")
    prompt = mixed_tokens(llm, cast(Mixed, body.prompt), add_bos=False, special=True, field="prompt")
    n_ctx = llm.scheduler.ctx.n_ctx_seq
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(len(extra), max(0, n_ctx - n_batch - 2 * n_predict))
    before = [fim.prefix, *prefix[len(prefix) - n_prefix:], *prompt]
    after = [fim.suffix, *suffix[:n_suffix]]
    head = [*extra[len(extra) - n_extra:], *([llm.token_bos()] if llm.add_bos_token() else [])]
    return [*head, *(after + before if llm.spm_infill else before + after), fim.middle]
