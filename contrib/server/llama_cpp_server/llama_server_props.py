"""llama-server's ``GET /props``: what a client reads before it sends anything."""

from __future__ import annotations

from typing import Any

import llama_cpp_native


def props(llm: Any, name: str, model_path: str, n_seq: int, modalities: dict[str, bool],
          settings: dict[str, Any], slots_endpoint: bool) -> dict[str, Any]:
    """llama-server's ``GET /props``: a request's default settings (its ``params``, which lack the per-request
    lists), the per-sequence context, the sequences, the model and its chat template."""
    params = {key: value for key, value in settings.items()
              if key not in ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy",
                             "grammar_triggers", "preserved_tokens")}

    def piece(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    return {"default_generation_settings": {"n_ctx": llm.scheduler.ctx.n_ctx_seq, "params": params},
            "total_slots": n_seq, "model_alias": name, "model_path": model_path, "modalities": modalities,
            "endpoint_slots": slots_endpoint, "endpoint_props": False, "endpoint_metrics": True,
            "chat_template": llm.metadata.get("tokenizer.chat_template", ""),
            "bos_token": piece(llm.token_bos()), "eos_token": piece(llm.token_eos()),
            "build_info": f"b{llama_cpp_native.llama_build_number}-{llama_cpp_native.llama_commit}",
            "is_sleeping": False}
