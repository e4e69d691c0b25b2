"""State files and sessions: the origin of a state, the file format, save_session / load_session.

Every refused file is refused before llama.cpp sees its state: the tests spy
on ``Context.set_seq_state``, the one door into llama.cpp's state reader.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import struct
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from llama_cpp import Llama, state_file
from llama_cpp.engine import SequenceSnapshot
from llama_cpp.engine.checkpoints import Checkpoint
from llama_cpp.engine.origin import ForeignStateError, StateOrigin, model_fingerprint

PROMPT = "Once upon a time, in a land far away, there lived"


def _llama(path: Path, **kw: Any) -> Llama:
    return Llama(str(path), n_ctx=kw.pop("n_ctx", 512), n_threads=2, verbose=False, **kw)


def _greedy(llm: Llama, prompt: str, n: int = 12) -> str:
    return llm.create_completion(prompt, max_tokens=n, temperature=0.0)["choices"][0]["text"]


@pytest.fixture(scope="module")
def session(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """A session file after PROMPT and its greedy reply, the reply, and how the text continues."""
    path = tmp_path_factory.mktemp("session") / "story.llseq"
    with _llama(tiny_model_path) as llm:
        first = _greedy(llm, PROMPT, 8)
        llm.save_session(path)
        expected = _greedy(llm, PROMPT + first)
    yield path, first, expected


def test_origins_tell_models_and_context_parameters_apart(tiny_model_path: Path,
                                                          tiny_model_factory: Callable[..., Path]) -> None:
    other = tiny_model_factory(seed=99)  # the same shape, other weights: llama.cpp would take its states
    assert model_fingerprint(tiny_model_path) == model_fingerprint(tiny_model_path)
    assert model_fingerprint(tiny_model_path) != model_fingerprint(other)
    with _llama(tiny_model_path) as a, _llama(tiny_model_path) as b, _llama(tiny_model_path, n_ctx=256) as c, \
            _llama(tiny_model_path, type_k=0) as d:  # F32 keys
        assert a.scheduler.ctx.origin == b.scheduler.ctx.origin
        assert "n_ctx_seq 512 vs 256" in a.scheduler.ctx.origin.differences(c.scheduler.ctx.origin)
        assert "type_k 1 vs 0" in a.scheduler.ctx.origin.differences(d.scheduler.ctx.origin)
        _greedy(a, PROMPT, 2)
        snapshot = a.snapshot_sequence()
        assert snapshot.origin == a.scheduler.ctx.origin
        c.create_completion("Hello", max_tokens=2)
        with pytest.raises(ForeignStateError, match="n_ctx_seq"):
            c.restore_sequence(snapshot)
        assert c.eval_tokens  # refused before anything changed: the sequence still holds its tokens


def test_a_session_continues_with_identical_greedy_text(session: tuple[Path, str, str], tiny_model_path: Path,
                                                        restored_states: list[bytes]) -> None:
    path, first, expected = session
    with _llama(tiny_model_path) as llm:
        llm.load_session(path)
        prompt = llm.tokenize(PROMPT.encode())
        assert len(restored_states) == 1 and llm.eval_tokens[:len(prompt)] == prompt
        evaluated = llm.scheduler.counters.n_prompt_tokens
        assert _greedy(llm, PROMPT + first) == expected
        reply = len(llm.tokenize((PROMPT + first).encode())) - len(llm.tokenize(PROMPT.encode()))
        assert llm.scheduler.counters.n_prompt_tokens - evaluated <= reply + 1  # the prompt came from the file


def test_the_file_is_what_docs_caches_md_says(session: tuple[Path, str, str]) -> None:
    data = session[0].read_bytes()
    magic, version, flags, meta_size, payload_size = struct.unpack_from("<8sIIQQ", data)
    assert (magic, version, flags) == (b"LLAMASEQ", 1, 0) and len(data) == 64 + meta_size + payload_size
    assert data[32:64] == hashlib.sha256(data[:32] + data[64:]).digest()
    header = state_file.read_header(session[0])
    n = len(header.tokens)
    tokens_at = 64 + meta_size - 4 - 4 * n  # the token array ends the meta section (no checkpoints here)
    assert struct.unpack_from(f"<Q{n}i", data, tokens_at - 8) == (n, *header.tokens)
    assert header.state_size == payload_size and not header.checkpoints


def _rewrite(data: bytes, **fields: int) -> bytes:
    """``data`` with header fields replaced and its checksum made right again (a careful forger)."""
    magic, version, flags, meta_size, payload_size, _ = state_file.PREFIX.unpack_from(data)
    values = {"version": version, "flags": flags, "meta_size": meta_size, "payload_size": payload_size, **fields}
    head = struct.pack("<8sIIQQ", magic, values["version"], values["flags"], values["meta_size"],
                       values["payload_size"])
    return head + hashlib.sha256(head + data[64:]).digest() + data[64:]


def _token_count_at(data: bytes) -> tuple[int, int]:
    """(offset of the token count, number of tokens) in a file without checkpoints: the meta section
    ends with the count, the tokens and the (empty) checkpoint table's count."""
    n = len(state_file.read_header(io.BytesIO(data)).tokens)
    meta_size = struct.unpack_from("<Q", data, 16)[0]
    return 64 + meta_size - 4 - 4 * n - 8, n


def _token_count(data: bytes, count: int) -> bytes:
    at, _n = _token_count_at(data)
    return data[:at] + struct.pack("<Q", count) + data[at + 8:]


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _pickled_state(data: bytes) -> bytes:
    """The header as it was, llama.cpp's state replaced by a pickle, the checksum made right."""
    meta_size = struct.unpack_from("<Q", data, 16)[0]
    payload = pickle.dumps({"state": "not llama.cpp's"}, protocol=4)
    return _rewrite(data[:64 + meta_size] + payload, payload_size=len(payload))


DAMAGE: dict[str, tuple[Callable[[bytes], bytes], type[state_file.StateFileError], str]] = {
    "truncated": (lambda d: d[:len(d) // 2], state_file.TruncatedStateFile, "truncated"),
    "header cut": (lambda d: d[:40], state_file.TruncatedStateFile, "header"),
    "one flipped byte": (lambda d: _flip(d, len(d) - 100), state_file.CorruptStateFile, "sha256"),
    "a flipped token": (lambda d: _flip(d, _token_count_at(d)[0] + 8), state_file.CorruptStateFile, "sha256"),
    "a pickle": (lambda d: pickle.dumps({"tokens": [1, 2, 3]}), state_file.PickledStateFile, "pickle"),
    "a pickle inside": (_pickled_state, state_file.PickledStateFile, "pickle"),
    "wrong magic": (lambda d: b"GGUF" + d[4:], state_file.NotAStateFile, "not a llama_cpp state file"),
    "empty": (lambda d: b"", state_file.NotAStateFile, "not a llama_cpp state file"),
    "newer version": (lambda d: _rewrite(d, version=2), state_file.UnsupportedStateFileVersion, "version 2"),
    "huge meta": (lambda d: _rewrite(d, meta_size=1 << 62), state_file.CorruptStateFile, "meta section"),
    "bytes after the end": (lambda d: _rewrite(d + b"\0" * 8), state_file.CorruptStateFile, "after the end"),
    "token count bomb": (lambda d: _rewrite(_token_count(d, 1 << 60)), state_file.CorruptStateFile, "tokens"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_session_files_are_refused_and_the_sequence_stays_usable(
        damage: str, session: tuple[Path, str, str], tiny_model_path: Path, tmp_path: Path,
        restored_states: list[bytes]) -> None:
    change, error, words = DAMAGE[damage]
    path = tmp_path / "damaged.llseq"
    path.write_bytes(change(session[0].read_bytes()))
    with _llama(tiny_model_path) as llm:
        _greedy(llm, "The weather today", 4)
        held = list(llm.eval_tokens)
        with pytest.raises(error, match=words) as info:
            llm.load_session(path)
        assert isinstance(info.value, ValueError) and not restored_states
        assert llm.eval_tokens == held  # untouched
        assert _greedy(llm, PROMPT + session[1]) == session[2]


@pytest.mark.parametrize("other", ["another model", "another n_ctx", "another KV type"])
def test_foreign_session_files_are_refused(other: str, session: tuple[Path, str, str], tiny_model_path: Path,
                                           tiny_model_factory: Callable[..., Path], restored_states: list[bytes]) -> None:
    made = {"another model": lambda: _llama(tiny_model_factory(seed=99)),
            "another n_ctx": lambda: _llama(tiny_model_path, n_ctx=1024),
            "another KV type": lambda: _llama(tiny_model_path, type_v=0)}[other]
    with made() as llm:
        cold = _greedy(llm, PROMPT + session[1])
        llm.reset()
        with pytest.raises(state_file.ForeignStateFile, match="another model or context") as info:
            llm.load_session(session[0])
        assert isinstance(info.value, ForeignStateError) and not restored_states
        assert _greedy(llm, PROMPT + session[1]) == cold


def test_writing_is_atomic_and_needs_an_origin(tmp_path: Path) -> None:
    origin = StateOrigin("ab" * 32, (("n_ctx_seq", 512),))
    snapshot = SequenceSnapshot(tokens=(1, 2, 3), state=b"\1\0\0\0" + b"s" * 60, origin=origin)
    path = tmp_path / "x.llseq"
    size = state_file.write_state_file(path, snapshot)
    assert size == path.stat().st_size and [p.name for p in tmp_path.iterdir()] == ["x.llseq"]
    assert state_file.read_state_file(path, origin=origin) == snapshot
    with pytest.raises(ValueError, match="origin is None"):
        state_file.write_state_file(path, SequenceSnapshot(tokens=(1,), state=b"x"))


def test_checkpoints_out_of_order_are_refused() -> None:
    """The ledger relies on a snapshot's checkpoints being in increasing order within its tokens."""
    origin = StateOrigin(model="0" * 64, context=(("n_ctx_seq", 512),))
    for lengths in ((5, 3), (3, 3), (0,), (9,)):
        snapshot = SequenceSnapshot(tokens=tuple(range(8)), state=b"\xd8\x3c\x14\xaf state", origin=origin,
                                    checkpoints=tuple(Checkpoint(n, b"partial") for n in lengths))
        data = b"".join(state_file.encode(snapshot).parts)
        with pytest.raises(state_file.CorruptStateFile, match="increasing order"):
            state_file.read_state_file(io.BytesIO(data))


def test_sequences_report_what_each_holds_and_one_can_be_erased(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, n_threads=1, verbose=False) as llm:
        assert [(s.seq_id, s.n_tokens, s.busy) for s in llm.sequences()] == [(0, 0, False), (1, 0, False)]
        llm.create_completion("Once upon a time", max_tokens=4, temperature=0)
        held = {s.seq_id: s.n_tokens for s in llm.sequences()}
        used = next(seq for seq, n in held.items() if n)
        assert held[used] == len(llm.tokenize(b"Once upon a time")) + 4 - 1  # the last token is never fed back
        assert llm.erase_sequence(used) == held[used] and all(s.n_tokens == 0 for s in llm.sequences())
        stream = llm.create_completion("Once upon a time", max_tokens=8, temperature=0, stream=True)
        next(stream)
        busy = next(s.seq_id for s in llm.sequences() if s.busy)
        with pytest.raises(RuntimeError, match="in use"):
            llm.erase_sequence(busy)
        stream.close()
        with pytest.raises(ValueError, match="seq_id"):
            llm.erase_sequence(5)
