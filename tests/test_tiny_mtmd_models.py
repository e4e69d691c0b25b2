"""The tiny multimodal pairs of llama_cpp.testing: they load in mtmd, tokenize media into the chunks each
projector type gives real models, and llama-mtmd-cli generates on them the tokens a direct replay of its
decode path through the C API generates (the oracle the multimodal engine will be held to)."""

from __future__ import annotations

import ctypes

import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lowlevel import load_model
from oracle import assert_llama_mtmd_cli_begins_with, tool

from llama_cpp import llama_cpp as C
from llama_cpp import mtmd_cpp as M

N_BATCH = 2048  # llama-mtmd-cli's defaults: -b 2048, -ub 512
N_UBATCH = 512
THREADS = 2


@dataclass
class Pair:
    """A loaded text model, its llama context and its mtmd context."""

    model: Any
    lctx: Any
    mctx: Any

    @property
    def vocab(self) -> Any:
        return C.llama_model_get_vocab(self.model)

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = C.llama_token_to_piece(self.vocab, token, buf, 256, 0, True)
        assert n >= 0
        return buf.raw[:n]


@contextmanager
def open_pair(paths: tuple[Path, Path], n_ctx: int = 4096) -> Iterator[Pair]:
    text, mmproj = paths
    model = load_model(text)
    cparams = C.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = n_ctx, N_BATCH, N_UBATCH
    cparams.n_threads = cparams.n_threads_batch = THREADS
    lctx = C.llama_init_from_model(model, cparams)
    mparams = M.mtmd_context_params_default()
    mparams.n_threads = THREADS
    mparams.warmup = False
    mctx = M.mtmd_init_from_file(str(mmproj).encode(), model, mparams)
    assert lctx and mctx  # handles are ints; NULL is None
    try:
        yield Pair(model, lctx, mctx)
    finally:
        M.mtmd_free(mctx)
        C.llama_free(lctx)
        C.llama_model_free(model)


@contextmanager
def tokenized(pair: Pair, prompt: str, media: list[Path]) -> Iterator[Any]:
    """``mtmd_tokenize`` of ``prompt`` (special tokens added and parsed, as llama-mtmd-cli does) with the
    media files, whose bitmaps come from ``mtmd_helper_bitmap_init_from_file``."""
    bitmaps = [M.mtmd_helper_bitmap_init_from_file(pair.mctx, str(m).encode(), False,
                                                   M.mtmd_helper_init_opt_default()).bitmap for m in media]
    assert all(bitmaps)
    chunks = M.mtmd_input_chunks_init()
    encoded = prompt.encode()  # kept alive: the struct below only points at it
    text = M.mtmd_input_text(text=encoded, text_len=len(encoded), add_special=True, parse_special=True)
    try:
        handles = (ctypes.c_void_p * len(bitmaps))(*bitmaps)
        assert M.mtmd_tokenize(pair.mctx, chunks, ctypes.byref(text), handles, len(bitmaps)) == 0
        yield chunks
    finally:
        M.mtmd_input_chunks_free(chunks)
        for bitmap in bitmaps:
            M.mtmd_bitmap_free(bitmap)


def layout(pair: Pair, chunks: Any) -> list[Any]:
    """Each chunk as ``b"text"`` (its tokens' pieces) or ``("image"|"audio", n_tokens, n_pos)``."""
    kinds = {M.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image", M.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio"}
    out: list[Any] = []
    for i in range(M.mtmd_input_chunks_size(chunks)):
        chunk = M.mtmd_input_chunks_get(chunks, i)
        kind = M.mtmd_input_chunk_get_type(chunk)
        if kind == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            tokens = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            out.append(b"".join(pair.piece(t) for t in tokens[0:n.value]))
        else:
            out.append((kinds[kind], M.mtmd_input_chunk_get_n_tokens(chunk), M.mtmd_input_chunk_get_n_pos(chunk)))
    return out


def greedy_replay(pair: Pair, chunks: Any, n_predict: int) -> list[int]:
    """llama-mtmd-cli's path through the C API: every chunk by ``mtmd_helper_eval_chunk_single`` (logits
    for the last one only), then greedy decoding that never picks an end-of-generation token (its
    ``--temp 0 --ignore-eos``), one token per ``llama_decode`` at explicit positions."""
    n_chunks = M.mtmd_input_chunks_size(chunks)
    n_past = C.llama_pos(0)
    for i in range(n_chunks):
        chunk = M.mtmd_input_chunks_get(chunks, i)
        assert M.mtmd_helper_eval_chunk_single(pair.mctx, pair.lctx, chunk, n_past.value, 0, N_BATCH,
                                               i == n_chunks - 1, ctypes.byref(n_past)) == 0
    n_vocab = C.llama_vocab_n_tokens(pair.vocab)
    eog = np.array([C.llama_vocab_is_eog(pair.vocab, t) for t in range(n_vocab)])
    batch = C.llama_batch_init(1, 0, 1)
    tokens: list[int] = []
    try:
        for _ in range(n_predict):
            logits = np.ctypeslib.as_array(C.llama_get_logits_ith(pair.lctx, -1), shape=(n_vocab,))
            token = int(np.argmax(np.where(eog, -np.inf, logits)))
            tokens.append(token)
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = \
                token, n_past.value, 1, 0, 1
            n_past.value += 1
            assert C.llama_decode(pair.lctx, batch) == 0
    finally:
        C.llama_batch_free(batch)
    return tokens


# name -> (media, prompt, the chunks mtmd_tokenize gives).  mtmd tokenizes each text segment on its own, so
# the SPM vocabulary (all but idefics3) puts its space prefix at the start of every segment: " now" after
# the media is "▁" + "▁now".
Media = Callable[[Callable[..., Path], Callable[..., Path]], list[Path]]
CASES: dict[str, tuple[Media, str, list[Any]]] = {
    # SigLIP: 64x64 -> 8x8 patches, pooled 2x2 -> 16 tokens between Gemma 3's image tokens
    "gemma3": (lambda png, wav: [png(64, 64)], "Look <__media__> now",
               [b"<s> Look <start_of_image>", ("image", 16, 16), b"<end_of_image>  now"]),
    # LLaVA-1.5: the image is resized to 32x32 -> 4x4 patches, no begin/end tokens
    "mlp": (lambda png, wav: [png(48, 40)], "Look <__media__> now",
            [b"<s> Look ", ("image", 16, 16), b"  now"]),
    # SmolVLM: 2x2 tiles of 32x32 (each 4 tokens after the pixel shuffle), then the overview
    "idefics3": (lambda png, wav: [png(64, 64)], "Look <__media__> now",
                 [b"Look <fake_token_around_image><row_1_col_1>", ("image", 4, 4),
                  b"<fake_token_around_image><row_1_col_2>", ("image", 4, 4),
                  b"\n<fake_token_around_image><row_2_col_1>", ("image", 4, 4),
                  b"<fake_token_around_image><row_2_col_2>", ("image", 4, 4),
                  b"\n\n<fake_token_around_image><global-img>", ("image", 4, 4),
                  b"<fake_token_around_image> now"]),
    # Qwen2-VL: 64x32 -> 4x2 merged tokens; with M-RoPE the chunk advances the position by max(4, 2)
    "qwen2vl_merger": (lambda png, wav: [png(64, 32)], "Look <__media__> now",
                       [b"<s> Look <|vision_start|>", ("image", 8, 4), b"<|vision_end|>  now"]),
    # Qwen2-Audio: one second is padded to a 30 s Whisper window: 3000 mel frames -> 750 tokens
    "qwen2a": (lambda png, wav: [wav(1.0)], "Hear <__media__> now",
               [b"<s> Hear <|audio_bos|>", ("audio", 750, 750), b"<|audio_eos|>  now"]),
    # Ultravox with its frames stacked by 4: 3000 mel frames / 4 / 2 = 375 tokens, no begin/end tokens
    "ultravox-stack4": (lambda png, wav: [wav(1.0)], "Hear <__media__> now",
                        [b"<s> Hear ", ("audio", 375, 375), b"  now"]),
}
CAPABILITIES = {"qwen2a": (False, True), "ultravox-stack4": (False, True)}  # (vision, audio); others: vision


@pytest.fixture(scope="module")
def media(tiny_png: Callable[..., Path], tiny_wav: Callable[..., Path]) -> Callable[[str], list[Path]]:
    return lambda name: CASES[name][0](tiny_png, tiny_wav)


@pytest.mark.parametrize("name", list(CASES))
def test_pair_loads_with_its_capabilities(tiny_mtmd_model: Callable[[str], tuple[Path, Path]], name: str) -> None:
    with open_pair(tiny_mtmd_model(name)) as pair:
        vision, audio = CAPABILITIES.get(name, (True, False))
        assert (M.mtmd_support_vision(pair.mctx), M.mtmd_support_audio(pair.mctx)) == (vision, audio)
        assert M.mtmd_decode_use_mrope(pair.mctx) == (name == "qwen2vl_merger")
        # Gemma 3 attends over an image's tokens both ways (mtmd_helper_decode_image_chunk switches the
        # llama context to non-causal attention for that chunk)
        assert M.mtmd_decode_use_non_causal(pair.mctx, None) == (name == "gemma3")
        assert M.mtmd_get_audio_sample_rate(pair.mctx) == (16000 if audio else -1)


@pytest.mark.parametrize("name", list(CASES))
def test_media_tokenizes_into_the_projectors_chunks(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                    media: Callable[[str], list[Path]], name: str) -> None:
    _, prompt, expected = CASES[name]
    with open_pair(tiny_mtmd_model(name)) as pair, tokenized(pair, prompt, media(name)) as chunks:
        assert layout(pair, chunks) == expected
        # only M-RoPE takes fewer positions than tokens
        n_tokens, n_pos = M.mtmd_helper_get_n_tokens(chunks), M.mtmd_helper_get_n_pos(chunks)
        assert n_tokens - n_pos == (8 - 4 if name == "qwen2vl_merger" else 0)


def test_qwen2a_cuts_audio_into_30_second_chunks(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                 tiny_wav: Callable[..., Path]) -> None:
    with open_pair(tiny_mtmd_model("qwen2a")) as pair, tokenized(pair, "<__media__>.", [tiny_wav(31.0)]) as chunks:
        assert [c for c in layout(pair, chunks) if isinstance(c, tuple)] == [("audio", 750, 750)] * 2


def test_qwen2vl_positions_follow_the_image_grid(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                 tiny_png: Callable[..., Path]) -> None:
    with open_pair(tiny_mtmd_model("qwen2vl_merger")) as pair, \
            tokenized(pair, "<__media__>.", [tiny_png(64, 96)]) as chunks:
        image = next(M.mtmd_input_chunks_get(chunks, i) for i in range(M.mtmd_input_chunks_size(chunks))
                     if M.mtmd_input_chunk_get_type(M.mtmd_input_chunks_get(chunks, i)) != M.MTMD_INPUT_CHUNK_TYPE_TEXT)
        tokens = M.mtmd_input_chunk_get_tokens_image(image)
        assert (M.mtmd_image_tokens_get_nx(tokens), M.mtmd_image_tokens_get_ny(tokens)) == (4, 6)
        assert (M.mtmd_input_chunk_get_n_tokens(image), M.mtmd_input_chunk_get_n_pos(image)) == (24, 6)


@pytest.mark.parametrize("name", list(CASES))
def test_llama_mtmd_cli_generates_the_replayed_greedy_tokens(
        tiny_mtmd_model: Callable[[str], tuple[Path, Path]], media: Callable[[str], list[Path]], name: str) -> None:
    n_predict = 12
    _, prompt, _ = CASES[name]
    paths = tiny_mtmd_model(name)
    with open_pair(paths) as pair, tokenized(pair, prompt, media(name)) as chunks:
        tokens = greedy_replay(pair, chunks, n_predict)
        replayed = b"".join(pair.piece(t) for t in tokens)
    assert len(tokens) == n_predict and len(set(tokens)) > 1  # not stuck on one token
    assert_llama_mtmd_cli_begins_with(replayed, n_predict, *paths, media(name), prompt)


def test_ultravox_stacked_by_8_aborts_llama_cpp_when_encoding(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                              tiny_wav: Callable[..., Path]) -> None:
    """The pinned build's known failure, kept visible for the multimodal plugin (which must refuse such a
    projector before encoding) and for whoever updates llama.cpp: Ultravox's stack factor 8 counts 187
    tokens per 30 s chunk, its encoder emits 188, and clip.cpp aborts the process."""
    text, mmproj = tiny_mtmd_model("ultravox")
    with open_pair((text, mmproj)) as pair, tokenized(pair, "<__media__> now", [tiny_wav(1.0)]) as chunks:
        assert [c for c in layout(pair, chunks) if isinstance(c, tuple)] == [("audio", 187, 187)]
    proc = subprocess.run([str(tool("llama-mtmd-cli")), "-m", str(text), "--mmproj", str(mmproj), "--audio",
                           str(tiny_wav(1.0)), "-p", "Hear <__media__> now", "-n", "4", "-t", str(THREADS),
                           "--temp", "0", "--jinja", "--no-warmup"], capture_output=True, timeout=120)
    assert proc.returncode in (-signal.SIGABRT, 128 + signal.SIGABRT)
    assert b"expected output 187 tokens, got 188" in proc.stderr


@pytest.mark.parametrize("name", ["qwen2vl_merger", "idefics3", "qwen2a"])
def test_llama_mtmd_cli_with_several_media_equals_the_replay(
        tiny_mtmd_model: Callable[[str], tuple[Path, Path]], tiny_png: Callable[..., Path],
        tiny_wav: Callable[..., Path], name: str) -> None:
    """Two images of different shapes (M-RoPE grids 4x4 and 3x5; 2x2 tiles each for idefics3), or 31 s of
    audio (two 30 s chunks in a row, which llama-mtmd-cli encodes in one mtmd batch and the replay one
    chunk at a time)."""
    if name == "qwen2a":
        media, prompt = [tiny_wav(31.0)], "Hear <__media__> now"
    else:
        media, prompt = [tiny_png(64, 64, seed=1), tiny_png(48, 80, seed=2)], "A <__media__> B <__media__> C"
    paths = tiny_mtmd_model(name)
    with open_pair(paths) as pair, tokenized(pair, prompt, media) as chunks:
        replayed = b"".join(pair.piece(t) for t in greedy_replay(pair, chunks, 8))
    assert_llama_mtmd_cli_begins_with(replayed, 8, *paths, media, prompt)
