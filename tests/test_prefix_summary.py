"""The prefix summary a router reads: chained block hashes of what an engine can reuse (its sequences and its
prompt cache), equal across processes, following the engine's memory as it changes, and bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.engine.prefix_summary import block_hashes, chain_start, summarize
from llama_cpp.llama_cache import LlamaDiskCache, LlamaRAMCache

TOKENS = list(range(100, 200))


def test_equal_prefixes_hash_alike_in_every_process() -> None:
    code = ("import json; from llama_cpp.engine.prefix_summary import block_hashes, chain_start; "
            f"print(json.dumps(block_hashes({TOKENS}, chain_start('m', None), 16)))")
    other = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    mine = block_hashes(TOKENS, chain_start("m", None), 16)
    assert mine == other and len(mine) == 6  # whole blocks only
    assert block_hashes(TOKENS[:48], chain_start("m", None), 16) == mine[:3]  # a hash names its prefix
    assert block_hashes(TOKENS, chain_start("other model", None), 16)[0] != mine[0]
    assert block_hashes(TOKENS, chain_start("m", ("lora", 0.5)), 16)[0] != mine[0]
    changed = block_hashes([*TOKENS[:20], 7, *TOKENS[21:]], chain_start("m", None), 16)
    assert changed[0] == mine[0] and all(a != b for a, b in zip(changed[1:], mine[1:]))  # the chain carries it


def test_the_summary_keeps_the_shallowest_blocks_within_its_bound() -> None:
    prefixes = [([i, *TOKENS], None) for i in range(50)]  # 50 prompts that differ from their first token
    summary = summarize("m", prefixes, block_tokens=16, max_hashes=60)
    assert len(summary.hashes) == 60
    firsts = {block_hashes(tokens, chain_start("m", None), 16)[0] for tokens, _ in prefixes}
    assert firsts <= set(summary.hashes)  # every prompt's first block before anyone's second
    with pytest.raises(ValueError, match="block_tokens"):
        block_hashes(TOKENS, b"", 0)


@pytest.mark.parametrize("kind", ["ram", "disk"])
def test_the_summary_follows_the_engines_memory(tiny_model_path: Path, tmp_path: Path, kind: str) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, n_threads=1, verbose=False) as llm:
        prompt = llm.tokenize(b" ".join(b"word%d" % i for i in range(60)))
        llm.create_completion(prompt, max_tokens=4, temperature=0)
        adapters = next(s.ledger.adapters for s in llm.scheduler.slots if s.ledger.adapters is not None)
        ours = block_hashes(prompt, chain_start(llm.scheduler.ctx.origin.model, adapters), 32)
        summary = llm.prefix_summary()
        assert summary.held(ours) == len(prompt) // 32 > 0
        cache = LlamaRAMCache(capacity_bytes=1 << 30) if kind == "ram" else LlamaDiskCache(tmp_path, 1 << 30)
        llm.set_cache(cache)
        llm.create_completion(prompt, max_tokens=4, temperature=0)  # stored in the cache as it ends
        llm.reset()  # the sequences forget it: the cache still holds it
        assert llm.prefix_summary().held(ours) == len(prompt) // 32
        cache.clear()
        assert llm.prefix_summary().held(ours) == 0 and llm.prefix_summary().hashes == ()
