"""``/metrics`` against llama-server's: the same content type and start-time header, the same metric names,
types and help texts, the same counts of reused prompt tokens and of the longest sequence, and after speculative
decoding the accepted tokens per draft position as llama-server's labelled counter."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from serving import llama_server, running, tiny_settings

from llama_cpp.testing import smollm2_path

# the same name, another meaning: the engine counts every llama_decode, drafts' and media's included
OWN_HELP = {"n_decode_total"}
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"
PROMPT = "one two three four five six seven eight. " * 6 + "one two three"


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[str, str]]:
    """(ours, llama-server's) on SmolLM2, both drafting with ngram-mod, after one repetitive completion."""
    model = smollm2_path(quiet=True)
    with running(tiny_settings(model, n_seq_max=1, n_ctx=1024, speculative={"engine": "ngram-mod"})) as ours, \
            llama_server(model, "-c", "1024", "-np", "1", "--metrics", "--spec-type", "ngram-mod") as theirs:
        for base in (ours, theirs):
            reply = httpx.post(f"{base}/completion", json={"prompt": PROMPT, "n_predict": 48, "temperature": 0},
                               timeout=120)
            assert reply.status_code == 200, reply.text
        yield ours, theirs


def described(text: str) -> dict[str, tuple[str, str]]:
    """name -> (type, help) of an exposition text."""
    helps = dict(re.findall(r"^# HELP llamacpp:(\S+) (.*)$", text, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE llamacpp:(\S+) (\S+)$", text, re.MULTILINE))
    assert set(helps) == set(types)
    return {name: (types[name], helps[name]) for name in types}


def test_the_headers_are_llama_servers(both: tuple[str, str]) -> None:
    ours, theirs = (httpx.get(f"{base}/metrics", timeout=10) for base in both)
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "text/plain; version=0.0.4"
    for reply in (ours, theirs):
        assert reply.headers["process-start-time-unix"].isdigit()


def test_the_names_types_and_help_texts_are_llama_servers(both: tuple[str, str]) -> None:
    ours, theirs = (described(httpx.get(f"{base}/metrics", timeout=10).text) for base in both)
    assert set(ours) == set(theirs)
    for name, (kind, help_text) in ours.items():
        assert kind == theirs[name][0], name
        assert name in OWN_HELP or help_text == theirs[name][1], name


def value(text: str, name: str) -> float:
    found = re.search(rf'^llamacpp:{name}(?:{{[^}}]*}})? (\S+)$', text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def test_reused_prompt_tokens_and_the_longest_sequence_count_as_llama_servers(both: tuple[str, str]) -> None:
    before = [value(httpx.get(f"{base}/metrics", timeout=10).text, "prompt_tokens_cached_total") for base in both]
    for base in both:  # the same prompt again: all of it but its last token is in memory
        reply = httpx.post(f"{base}/completion", json={"prompt": PROMPT, "n_predict": 4, "temperature": 0},
                           timeout=120)
        assert reply.status_code == 200, reply.text
    texts = [httpx.get(f"{base}/metrics", timeout=10).text for base in both]
    reused = [value(text, "prompt_tokens_cached_total") - was for text, was in zip(texts, before)]
    assert reused[0] == reused[1] > 0
    longest = [value(text, "n_tokens_max") for text in texts]
    assert longest[0] > 48 and abs(longest[0] - longest[1]) <= 16, longest  # drafts in memory until verified


def test_accepted_tokens_per_draft_position_after_speculation(both: tuple[str, str]) -> None:
    ours, theirs = (httpx.get(f"{base}/metrics", timeout=10).text for base in both)
    for text in (ours, theirs):
        positions = re.findall(rf'^llamacpp:{PER_POSITION}{{(?:model="[^"]*",)?position="(\d+)"}} (\d+)$', text,
                               re.MULTILINE)
        assert positions and [int(p) for p, _ in positions] == list(range(len(positions)))
        accepted = re.search(r'^llamacpp:spec_decode_num_accepted_tokens_total(?:{[^}]*})? (\S+)$', text,
                             re.MULTILINE)
        assert accepted and sum(int(n) for _, n in positions) == float(accepted.group(1)) > 0


def test_a_model_that_never_drafted_has_no_per_position_counter(serve: object) -> None:
    with serve() as base:  # type: ignore[operator]
        text = httpx.get(f"{base}/metrics", timeout=10).text
    assert PER_POSITION not in text and "llamacpp:spec_decode_num_drafts_total" in text

