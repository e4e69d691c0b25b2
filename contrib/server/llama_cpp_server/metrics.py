"""``/metrics`` in Prometheus' text format, under llama-server's names where they mean the same thing.

Per loaded model (label ``model``): prompt tokens and predicted tokens with their seconds (an engine's
requests summed: admission to first token, first token to the end), decodes, busy sequences per decode,
requests processing and deferred (submitted to the engine and waiting there for a sequence, as llama-server
counts the tasks it defers; a request still being rendered and tokenized is in neither).
"""

from __future__ import annotations

from llama_cpp.engine import EngineStats

from .models import ModelPool

# name -> (type, help); the names are llama-server's (tools/server), with its "llamacpp:" prefix
_METRICS = {
    "prompt_tokens_total": ("counter", "Number of prompt tokens processed."),
    "prompt_seconds_total": ("counter", "Prompt process time"),
    "tokens_predicted_total": ("counter", "Number of generation tokens processed."),
    "tokens_predicted_seconds_total": ("counter", "Predict process time"),
    "n_decode_total": ("counter", "Total number of llama_decode() calls"),
    "n_busy_slots_per_decode": ("counter", "Average number of busy slots per llama_decode() call"),
    "prompt_tokens_seconds": ("gauge", "Average prompt throughput in tokens/s."),
    "predicted_tokens_seconds": ("gauge", "Average generation throughput in tokens/s."),
    "requests_processing": ("gauge", "Number of requests processing."),
    "requests_deferred": ("gauge", "Number of requests deferred."),
}


def _values(stats: EngineStats) -> dict[str, float]:
    return {
        "prompt_tokens_total": stats.n_prompt_tokens,
        "prompt_seconds_total": stats.seconds_prompt,
        "tokens_predicted_total": stats.n_generated_tokens,
        "tokens_predicted_seconds_total": stats.seconds_generating,
        "n_decode_total": stats.n_decodes,
        "n_busy_slots_per_decode": stats.busy_per_decode,
        "prompt_tokens_seconds": stats.prompt_tokens_per_second,
        "predicted_tokens_seconds": stats.generated_tokens_per_second,
        "requests_processing": stats.busy_sequences,
        "requests_deferred": stats.waiting,
    }


def render_metrics(pool: ModelPool) -> str:
    """The exposition text for every loaded model."""
    samples = [(served.name, _values(served.llama.scheduler.stats())) for served in pool.loaded]
    lines = []
    for name, (kind, help_text) in _METRICS.items():
        lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}"]
        for model, values in samples:
            label = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            value = values[name]
            lines.append(f'llamacpp:{name}{{model="{label}"}} {value if isinstance(value, int) else repr(float(value))}')
    return "\n".join(lines) + "\n"
