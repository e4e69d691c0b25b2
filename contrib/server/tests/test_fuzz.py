"""Schemathesis against the running server: every operation of its OpenAPI schema, fuzzed.

Each operation (but ``/models/sse``, a stream that never ends) gets generated requests, valid and invalid
for the schema (the coverage phase's boundary values and malformed bodies, then ``EXAMPLES`` random ones),
sent over HTTP to a server with an API key.  Every answer must not be a server error (5xx), must have a status, content type and headers the schema
documents for the operation, must match the documented body (each event of a stream too), and a keyed
route must refuse a request without the key or with a wrong one.

The servers are small: the tiny random chat model on a 256-token context (``n_ctx`` bounds a fuzzed
``max_tokens``), and for the embeddings and rerank routes a tiny embedding model or reranker as the
default model (a fuzzed ``model`` is almost never a real name; the default answers).  Hypothesis runs
derandomized without an example database, so every run sends the same requests: about 9,700, in a
minute and a half on two cores.  A failure is reported, not shrunk, as schemathesis' curl command.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (content_type_conformance, ignored_auth, not_a_server_error,
                                 response_headers_conformance, response_schema_conformance,
                                 status_code_conformance)
from serving import running, tiny_settings

from llama_cpp_server import Settings, create_app

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = 50  # per operation, in the fuzzing phase (the coverage phase's cases come on top)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, ignored_auth]
# no shrinking: each step is a request, and schemathesis prints every failure's request as a curl command
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
# one thread: ggml's threads wait for each other spinning, and on two cores busy with other tests a second
# thread made each decode of the tiny model take 0.2-1 s instead of 2 ms
SMALL = {"n_ctx": 256, "n_seq_max": 2, "n_threads": 1, "n_threads_batch": 1, "max_n": 2, "api_keys": [KEY],
         "request_timeout": 120.0}

calls: collections.Counter[str] = collections.Counter()  # requests per operation (the report below)


def _schema() -> Any:
    """The schema the servers below serve: FastAPI makes it from the routes and settings (the API key),
    without a model; each server's own /openapi.json is checked against it."""
    api = create_app(Settings(model="unused.gguf", api_keys=[KEY])).openapi()
    config = {"seed": 20240601, "output": {"sanitization": {"enabled": False}}}  # repros show max_tokens
    return schemathesis.openapi.from_dict(api, config=schemathesis.Config.from_dict(config))


SCHEMA = _schema()
ENDLESS = "/models/sse"  # a stream of status changes that never ends: test_openapi reads its first events
generation = SCHEMA.exclude(path=["/v1/embeddings", "/embeddings", "/v1/rerank", ENDLESS])
embedding = SCHEMA.include(path=["/v1/embeddings", "/embeddings"])
rerank = SCHEMA.include(path="/v1/rerank")


def _serving(settings: Settings) -> Iterator[str]:
    with running(settings) as base:
        served = httpx.get(f"{base}/openapi.json", headers=AUTH, timeout=10)
        assert served.status_code == 200 and served.json() == SCHEMA.raw_schema
        yield base


@pytest.fixture(scope="module")
def generation_base(fim_chat_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny chat model's server (with fill-in-the-middle tokens): every operation but the embeddings and
    rerank ones.  It serves every feature those routes have, since a 501 (not served) is a server error for
    schemathesis: slot files (in a folder of their own) and ``POST /props``."""
    yield from _serving(tiny_settings(fim_chat_model_path, slot_save_path=str(tmp_path_factory.mktemp("slots")),
                                      props_endpoint=True, **SMALL))


@pytest.fixture(scope="module")
def embedding_base(tiny_bert_factory: Callable[..., Path]) -> Iterator[str]:
    path = tiny_bert_factory(pooling="mean")
    yield from _serving(Settings(model=str(path), model_alias="embedder", embeddings=True, **SMALL))


@pytest.fixture(scope="module")
def rerank_base(tiny_reranker_path: Path) -> Iterator[str]:
    yield from _serving(Settings(model=str(tiny_reranker_path), model_alias="reranker", embeddings=True, **SMALL))


def _check(case: Any, base: str) -> None:
    calls[case.operation.label] += 1
    case.call_and_validate(base_url=base, headers=AUTH, checks=CHECKS, timeout=120)


@generation.parametrize()
@FUZZ
def test_generation_and_tokens(case: Any, generation_base: str) -> None:
    _check(case, generation_base)


@embedding.parametrize()
@FUZZ
def test_embeddings(case: Any, embedding_base: str) -> None:
    _check(case, embedding_base)


@rerank.parametrize()
@FUZZ
def test_rerank(case: Any, rerank_base: str) -> None:
    _check(case, rerank_base)


def test_zz_every_operation_was_fuzzed() -> None:
    """After the fuzz tests (pytest keeps a module's order): every operation but the endless stream got its
    requests, at least ``EXAMPLES`` each but /health's (nothing in it varies: no body, no key)."""
    if not calls:
        pytest.skip("the fuzz tests did not run")
    print("\nrequests per operation:", dict(sorted(calls.items())))
    assert len(calls) == len(list(SCHEMA.get_all_operations())) - 1 == 33, sorted(calls)
    assert all(n >= EXAMPLES for label, n in calls.items() if label != "GET /health"), calls
