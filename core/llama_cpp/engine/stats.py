"""The engine's counters, and the statistics a server's metrics and the benchmarks read."""

from __future__ import annotations

import attrs


@attrs.define
class Counters:
    """Running totals, written by the engine's parts under its lock (or by the tick's driver alone)."""

    n_decodes: int = 0  # llama_decode calls (embeddings included)
    n_burst_decodes: int = 0  # of those, the ones a burst made after its tick's batch (engine.slot.Burst)
    n_tokens_decoded: int = 0  # batch rows decoded
    n_sequences_decoded: int = 0  # sequences served, summed over decodes
    n_prompt_tokens: int = 0  # prompt tokens evaluated (not reused from a prefix, a fork or a cache)
    n_prompt_cached: int = 0  # prompt tokens reused instead (from a prefix in memory, a fork's copy or a cache)
    n_tokens_max: int = 0  # the longest sequence seen in memory after a decode (prompt and generated tokens)
    n_generated_tokens: int = 0  # tokens handed to requests
    n_media_evaluated: int = 0  # media chunks put into memory (not reused from a prefix)
    n_preemptions: int = 0  # running requests suspended for more urgent ones (each resumes later)
    seconds_prompt: float = 0.0  # admission to first token, summed over finished requests
    seconds_generating: float = 0.0  # first token to the end, summed over finished requests


@attrs.frozen
class EngineStats(Counters):
    """The counters at one moment (``Scheduler.stats()``), with what is busy and waiting then."""

    busy_sequences: int = 0  # sequences serving a request now
    waiting: int = 0  # requests waiting for a sequence now (suspended ones included)

    @classmethod
    def of(cls, counters: Counters, busy_sequences: int, waiting: int) -> EngineStats:
        return cls(**attrs.asdict(counters), busy_sequences=busy_sequences, waiting=waiting)

    @property
    def busy_per_decode(self) -> float:
        return self.n_sequences_decoded / self.n_decodes if self.n_decodes else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_tokens / self.seconds_prompt if self.seconds_prompt else 0.0

    @property
    def generated_tokens_per_second(self) -> float:
        return self.n_generated_tokens / self.seconds_generating if self.seconds_generating else 0.0
