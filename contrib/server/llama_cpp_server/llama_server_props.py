"""llama-server's ``GET /props`` (what a client reads before it sends anything) and ``POST /props``."""

from __future__ import annotations

import functools
from typing import Any

import llama_cpp_native
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from .errors import APIError, json_body


def props(llm: Any, name: str, model_path: str, n_seq: int, modalities: dict[str, bool],
          settings: dict[str, Any], slots_endpoint: bool, props_endpoint: bool,
          chat_template: str | None) -> dict[str, Any]:
    """llama-server's ``GET /props``: a request's default settings (its ``params``, which lack the per-request
    lists), the per-sequence context, the sequences, the model and its chat template (``chat_template``, the
    one given in place of the model's, else the model's)."""
    params = {key: value for key, value in settings.items()
              if key not in ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy",
                             "grammar_triggers", "preserved_tokens")}

    def piece(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    template = chat_template or llm.metadata.get("tokenizer.chat_template", "")
    bos, eos = piece(llm.token_bos()), piece(llm.token_eos())
    answer = {"default_generation_settings": {"n_ctx": llm.scheduler.ctx.n_ctx_seq, "params": params},
              "total_slots": n_seq, "model_alias": name, "model_path": model_path, "modalities": modalities,
              "endpoint_slots": slots_endpoint, "endpoint_props": props_endpoint, "endpoint_metrics": True,
              "chat_template": template, "bos_token": bos, "eos_token": eos,
              "build_info": f"b{llama_cpp_native.llama_build_number}-{llama_cpp_native.llama_commit}",
              "is_sleeping": False}
    if template:  # (a model without one is served by a named format, which has no capabilities to report)
        answer["chat_template_caps"] = dict(_caps_of(template, bos, eos))
    return answer


@functools.lru_cache(maxsize=16)
def _caps_of(template: str, bos: str, eos: str) -> dict[str, bool]:
    """llama.cpp's capabilities of a chat template (``supports_tools``, ``supports_system_role``...), which
    clients read to know what to send; found by rendering probe conversations, once per template."""
    return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos).capabilities()


def post_props(enabled: bool, body: bytes) -> dict[str, Any]:
    """llama-server's ``POST /props``: 501 unless the server was started with it (``props_endpoint``, its
    ``--props``), else ``{"success": true}``.  llama-server's changes no property (its handler has none to
    change at the pinned source) and ignores the body; here a property named in the body is a 400 naming it,
    so that a client never believes it changed something that stays as it was."""
    if not enabled:
        raise APIError(501, "this server does not change properties through POST /props (start it with "
                       "props_endpoint: true, llama-server's --props)")
    fields = json_body(body, empty={})
    if not isinstance(fields, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_body")
    for name in fields:
        raise APIError(400, f"{name}: not a property POST /props can change (llama-server changes none; "
                       "GET /props shows them)", param=str(name))
    return {"success": True}
