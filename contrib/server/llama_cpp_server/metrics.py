"""``/metrics`` in Prometheus' text format, under llama-server's names where they mean the same thing.

Per loaded model (label ``model``): prompt tokens and predicted tokens with their seconds (an engine's
requests summed: admission to first token, first token to the end), decodes, busy sequences per decode,
requests processing and deferred (submitted to the engine and waiting there for a sequence, as llama-server
counts the tasks it defers; a request still being rendered and tokenized is in neither), and the speculative
decoding counters (``Llama.speculative_totals``: drafts, draft tokens, accepted ones, per draft position).
"""

from __future__ import annotations

from typing import Any

from llama_cpp.engine import EngineStats

from .models import ModelPool

# name -> (type, help): llama-server's names (tools/server, with its "llamacpp:" prefix), types and help texts,
# in its order (counters, then gauges)
_METRICS = {
    "prompt_tokens_total": ("counter", "Number of prompt tokens processed, excluding cached tokens"),
    "prompt_tokens_cached_total": ("counter", "Number of prompt tokens reused from the cache"),
    "prompt_seconds_total": ("counter", "Total time spent processing prompts"),
    "tokens_predicted_total": ("counter", "Number of generation tokens processed"),
    "tokens_predicted_seconds_total": ("counter", "Total time spent generating tokens"),
    "n_decode_total": ("counter", "Total number of llama_decode() calls"),
    "n_tokens_max": ("counter", "Largest observed sequence length (prompt + generation)"),
    "spec_decode_num_draft_tokens_total": ("counter", "Speculative: Total draft tokens generated"),
    "spec_decode_num_accepted_tokens_total": ("counter", "Speculative: Total draft tokens accepted by the target "
                                                         "model"),
    "spec_decode_num_drafts_total": ("counter", "Speculative: Total speculative decoding verification steps"),
    "prompt_tokens_seconds": ("gauge", "Average prompt throughput in tokens/s"),
    "predicted_tokens_seconds": ("gauge", "Average generation throughput in tokens/s"),
    "requests_processing": ("gauge", "Number of requests processing"),
    "requests_deferred": ("gauge", "Number of requests deferred"),
    "n_busy_slots_per_decode": ("gauge", "Average number of busy slots per llama_decode() call"),
}
_PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"
# llama-server's content type (Prometheus' text format, version 0.0.4), without a charset, as it sends it
CONTENT_TYPE = "text/plain; version=0.0.4"


def _values(stats: EngineStats, speculation: dict[str, Any]) -> dict[str, float]:
    return {
        "prompt_tokens_total": stats.n_prompt_tokens,
        "prompt_tokens_cached_total": stats.n_prompt_cached,
        "n_tokens_max": stats.n_tokens_max,
        "prompt_seconds_total": stats.seconds_prompt,
        "tokens_predicted_total": stats.n_generated_tokens,
        "tokens_predicted_seconds_total": stats.seconds_generating,
        "n_decode_total": stats.n_decodes,
        **{name: speculation[name] for name in _METRICS if name.startswith("spec_decode_")},
        "n_busy_slots_per_decode": stats.busy_per_decode,
        "prompt_tokens_seconds": stats.prompt_tokens_per_second,
        "predicted_tokens_seconds": stats.generated_tokens_per_second,
        "requests_processing": stats.busy_sequences,
        "requests_deferred": stats.waiting,
    }


def _label(model: str) -> str:
    return model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def render_metrics(pool: ModelPool) -> str:
    """The exposition text for every loaded model; the accepted draft tokens per draft position (llama-server's
    labelled counter, ``position``) once a model has speculated."""
    samples = []
    for served in pool.loaded:
        speculation = served.llama.speculative_totals
        samples.append((served.name, _values(served.llama.scheduler.stats(), speculation), speculation[_PER_POSITION]))
    lines = []
    for name, (kind, help_text) in _METRICS.items():
        lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}"]
        for model, values, _ in samples:
            lines.append(f'llamacpp:{name}{{model="{_label(model)}"}} {_number(values[name])}')
    if any(per_position for _, _, per_position in samples):
        lines += [f"# HELP llamacpp:{_PER_POSITION} Accepted tokens per draft position",
                  f"# TYPE llamacpp:{_PER_POSITION} counter"]
        for model, _, per_position in samples:
            lines += [f'llamacpp:{_PER_POSITION}{{model="{_label(model)}",position="{i}"}} {n}'
                      for i, n in enumerate(per_position)]
    return "\n".join(lines) + "\n"
