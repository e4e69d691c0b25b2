"""Scheduling on the server: tenants are API keys (or ``user`` without keys), ``priority`` is a body field,
and the policy comes from the settings.

The fair-share workload: three tenants, one sending 24 requests and two sending 4 each, on n_seq_max=4.
Under fcfs the small tenants wait behind the whole backlog of the big one; under fair-share each tenant gets
its share of sequences and of decoded tokens while all three have work.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_cpp_server.models import load_llama
from serving import assert_error, metric, tiny_settings, wait_until

KEYS = ["big-secret", "small-a-secret", "small-b-secret"]
TENANTS = ["key-1", "key-2", "key-3"]
N_TOKENS = 128  # long enough that sending the requests takes a small part of serving them


class Workload:
    """Streamed requests on threads, recording when each token and each end arrived, per tenant."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.lock = threading.Lock()
        self.tokens: list[tuple[float, str]] = []
        self.finished: list[tuple[float, str]] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def send(self, tenant_index: int, n: int) -> None:
        for i in range(n):
            thread = threading.Thread(target=self._one, args=(tenant_index, i))
            thread.start()
            self.threads.append(thread)

    def _one(self, tenant_index: int, i: int) -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": f"Request {i} of {tenant_index}"}],
                "max_tokens": N_TOKENS, "ignore_eos": True, "temperature": 0, "stream": True, "logprobs": True}
        headers = {"Authorization": f"Bearer {KEYS[tenant_index]}"}
        tenant = TENANTS[tenant_index]
        try:
            with httpx.stream("POST", f"{self.base}/v1/chat/completions", json=body, headers=headers,
                              timeout=120) as response:
                if response.status_code != 200:
                    self.errors.append(f"{response.status_code} {response.read()!r}")
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    n = len(((choices[0].get("logprobs") or {}).get("content")) or [])
                    now = time.monotonic()
                    with self.lock:
                        self.tokens.extend([(now, tenant)] * n)
        except httpx.HTTPError as exc:
            self.errors.append(repr(exc))
            return
        with self.lock:
            self.finished.append((time.monotonic(), tenant))

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=300)


def run_workload(serve: Callable[..., Any], policy: str) -> Workload:
    with serve(n_seq_max=4, api_keys=KEYS, scheduling_policy=policy, max_queue=64) as base:
        work = Workload(base)
        work.send(0, 24)
        auth = {"Authorization": f"Bearer {KEYS[0]}"}
        wait_until(lambda: metric(base, "requests_processing", auth) + metric(base, "requests_deferred", auth)
                   + len(work.finished) >= 24, "the big tenant's requests are all in the engine", timeout=30)
        work.send(1, 4)
        work.send(2, 4)
        work.join()
    assert not work.errors, work.errors
    assert len(work.finished) == 32
    assert len(work.tokens) == 32 * N_TOKENS
    return work


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def busy_period_shares(work: Workload) -> list[float]:
    """Tokens each tenant got from the small tenants' first token to the last small request's end."""
    small = [t for t, tenant in work.tokens if tenant != "key-1"]
    start, end = min(small), max(t for t, tenant in work.finished if tenant != "key-1")
    return [float(sum(1 for t, tenant in work.tokens if tenant == name and start <= t <= end)) for name in TENANTS]


def big_finish(work: Workload, nth: int) -> float:
    return sorted(t for t, tenant in work.finished if tenant == "key-1")[nth - 1]


def last_small_finish(work: Workload) -> float:
    return max(t for t, tenant in work.finished if tenant != "key-1")


def test_fair_share_serves_small_tenants_alongside_a_big_one_and_fcfs_does_not(serve: Callable[..., Any]) -> None:
    fair = run_workload(serve, "fair-share")
    assert last_small_finish(fair) < big_finish(fair, 12)
    assert jain(busy_period_shares(fair)) >= 0.9, busy_period_shares(fair)
    fcfs = run_workload(serve, "fcfs")
    assert last_small_finish(fcfs) > big_finish(fcfs, 12)  # starved behind the big tenant's backlog
    assert jain(busy_period_shares(fcfs)) < 0.9, busy_period_shares(fcfs)


def test_without_keys_the_user_field_names_the_tenant_and_priority_is_a_field(serve: Callable[..., Any]) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    with serve(scheduling={"policy": "priority", "aging": 2}) as base:
        ok = httpx.post(f"{base}/v1/chat/completions", json={**body, "priority": -5, "user": "alice"}, timeout=30)
        assert ok.status_code == 200, ok.text
        completion = httpx.post(f"{base}/v1/completions",
                                json={"model": "tiny", "prompt": "Hi", "max_tokens": 2, "priority": 3}, timeout=30)
        assert completion.status_code == 200, completion.text
        assert_error(httpx.post(f"{base}/v1/chat/completions", json={**body, "priority": "soon"}, timeout=30),
                     422, says="priority")
        assert_error(httpx.post(f"{base}/v1/chat/completions", json={**body, "priority": 2**40}, timeout=30),
                     422, says="priority")


def test_the_settings_choose_the_policy(chat_model_path: Path) -> None:
    settings = tiny_settings(chat_model_path, scheduling_policy="fair-share", scheduling={"weights": {"key-1": 3}})
    assert settings.scheduling == {"weights": {"key-1": 3}, "policy": "fair-share"}
    with load_llama(settings.model_list()[0], settings.server()) as llm:
        assert llm.scheduling_policy.name == "fair-share" and llm.scheduling_policy.weight("key-1") == 3
    with pytest.raises(ValueError, match="unknown scheduling policy 'lottery'; valid names: .*fair-share"):
        load_llama(tiny_settings(chat_model_path, scheduling_policy="lottery").model_list()[0], settings.server())
    with pytest.raises(ValueError, match="scheduling_policy 'fcfs' and scheduling's policy 'priority' disagree"):
        tiny_settings(chat_model_path, scheduling_policy="fcfs", scheduling={"policy": "priority"})
