"""Tiny random multimodal models: a text GGUF plus an ``mmproj`` GGUF per projector type of llama.cpp's mtmd.

No vision-language model is on the package index, so tests write their own with the ``gguf`` package:
a small text model (the first 1024 tokens of a real vocabulary from one of llama.cpp's
``models/ggml-vocab-*.gguf``, a working tokenizer of its own, plus the special tokens the projector's
prompt layout needs) and a projector file whose keys and tensor names are the ones ``tools/mtmd/clip.cpp``
of the pinned source reads.  The weights are seeded noise: the models load, tokenize media into chunks
and run through llama.cpp's real encoder graphs, and say nothing about quality.  Every file is under
400 KB.

Each pair (``MTMD_MODEL_WRITERS``):

``gemma3``
    a gemma3 text model (``<start_of_image>``/``<end_of_image>`` added to the llama SPM vocabulary) and a
    SigLIP encoder with ``mm.input_projection.weight``/``mm.soft_emb_norm.weight``; a 64x64 image gives
    16 tokens (8x8 patches, average-pooled by ``clip.vision.projector.scale_factor`` = 2).
``mlp``
    LLaVA-1.5: a llama text model and a CLIP encoder (class embedding) with a two-layer GELU MLP
    (``mm.0``, ``mm.2``); the image is resized to 32x32, 16 tokens.
``idefics3``
    SmolVLM: a llama text model over the GPT-2 vocabulary with SmolVLM's special tokens
    (``<fake_token_around_image>``, ``<global-img>``, ``<row_R_col_C>``), a SigLIP encoder with a
    pixel-shuffle projector (``mm.model.fc.weight``).  ``clip.vision.preproc_image_size`` = 64 cuts a
    square image into 2x2 tiles of 32x32 plus an overview: 5 image chunks of 4 tokens.
``qwen2vl_merger``
    a ``qwen2vl`` (M-RoPE) text model and a Qwen2-VL encoder (two patch kernels, M-RoPE in the encoder,
    2x2 merger); any image size rounded to 16 pixels, one token per 16x16 pixels, ``n_pos`` =
    max(width, height) / 16 of them.
``qwen2a``
    Qwen2-Audio: a qwen2 text model (``<|audio_bos|>``/``<|audio_eos|>`` added) and a Whisper encoder
    (two conv1d, 128 mel bins) with a linear projector; every started 30 s of 16 kHz audio is one chunk
    of 750 tokens.
``ultravox``, ``ultravox-stack4``
    Ultravox: a llama text model and a Whisper encoder whose frames are stacked by 8 (Ultravox's value)
    or 4 before a SwiGLU projector; no begin/end tokens.  With 8, a 30 s chunk counts 187 tokens and
    encodes to 188, and the pinned build aborts the process (see :func:`write_ultravox_mmproj`); with 4
    it counts and encodes 375.

Facts of the pinned source these follow: the projector's output width must equal the text model's
``n_embd`` (else ``mtmd_init_from_file`` returns NULL); the encoders' ``feed_forward_length`` differs
from their ``embedding_length`` (clip.cpp swaps ``ffn_up``/``ffn_down`` of legacy files when
``ffn_down`` is ``[n_embd, ...]``); ``clip.vision.image_mean``/``image_std`` are required; conv kernels
are F16, as convert_hf_to_gguf.py writes them.  Every text model carries a chat template that renders
the messages' contents only, so ``llama-mtmd-cli -p PROMPT`` (which always applies the template) sees
exactly ``PROMPT``.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import wave
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .assets import vocab_file
from .tiny_models import _finish

__all__ = [
    "MTMD_MODEL_WRITERS",
    "RAW_CHAT_TEMPLATE",
    "TinyTextSpec",
    "mtmd_model_paths",
    "write_png",
    "write_tiny_text_model",
    "write_wav",
]

# Renders only the contents, so a prompt reaches the model unchanged through any chat-template path.
RAW_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

_TOKEN_TYPE_CONTROL = 3  # llama_token_type: matched only when special tokens are parsed
_SMOLVLM_TOKENS = ("<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>",
                   *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)))


@dataclass(frozen=True)
class TinyTextSpec:
    """A tiny text model for a projector: the architecture, the vocabulary and the tokens added to it."""

    arch: str = "llama"  # llama, qwen2 (q/k/v biases), qwen2vl (M-RoPE) or gemma3
    vocab: str = "llama-spm"  # a models/ggml-vocab-<name>.gguf of the pinned source ...
    n_vocab: int = 1024  # ... cut to its first n_vocab tokens, which keeps the file under 1 MB
    extra_tokens: tuple[str, ...] = ()
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 64
    seed: int = 2024
    chat_template: str = RAW_CHAT_TEMPLATE

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:12]


class _Weights:
    """Seeded random F32 weights; shapes are numpy's (ggml's reversed: rows are outputs)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, *shape: int, scale: float = 0.2) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(self, n: int) -> np.ndarray:
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)

    def conv(self, *shape: int, scale: float = 0.2) -> np.ndarray:
        return self.mat(*shape, scale=scale).astype(np.float16)


def _copy_tokenizer(writer: Any, vocab_path: Path, n_keep: int, extra_tokens: tuple[str, ...]) -> int:
    """Copy the ``tokenizer.*`` keys of a vocab GGUF cut to its first ``n_keep`` tokens; returns the
    vocabulary size.

    The cut keeps a working tokenizer: an SPM vocabulary keeps its byte tokens (ids 3-258) to fall back
    on, a BPE one its 256 byte symbols and the merges whose parts and result survive.  Appended after the
    cut, with their type and score: special tokens past it (GPT-2's ``<|endoftext|>``; their
    ``*_token_id`` keys follow them), SPM's ``▁``, and ``extra_tokens`` (as control tokens where the
    vocabulary lacks them)."""
    import gguf

    fields = _tokenizer_fields(vocab_path)
    tokens: list[str] = fields["tokenizer.ggml.tokens"][0]
    types: list[int] = fields["tokenizer.ggml.token_type"][0]
    scores: list[float] | None = fields.get("tokenizer.ggml.scores", (None,))[0]
    kept = tokens[:n_keep]
    present = set(kept)
    special_ids = {key: int(value) for key, (value, _) in fields.items() if key.endswith("_token_id")}
    index = {text: i for i, text in enumerate(tokens)}
    # SPM's lone "▁" (a space before a special token or at a segment's end) would otherwise fall back
    # to the bytes of "▁", which detokenize as "▁", not as a space
    spm_space = ["\u2581"] if fields["tokenizer.ggml.model"][0] == "llama" else []
    appended: dict[str, tuple[int, float]] = {}  # text -> (token type, score)
    for text in [*(tokens[i] for i in special_ids.values()), *spm_space, *extra_tokens]:
        if text in present or text in appended:
            continue
        i = index.get(text)
        appended[text] = (_TOKEN_TYPE_CONTROL, 0.0) if i is None else (types[i], scores[i] if scores else 0.0)
    new_id = {text: len(kept) + k for k, text in enumerate(appended)}
    arrays: dict[str, list[Any]] = {
        "tokenizer.ggml.tokens": kept + list(appended),
        "tokenizer.ggml.token_type": types[:n_keep] + [kind for kind, _ in appended.values()],
    }
    if scores is not None:
        arrays["tokenizer.ggml.scores"] = scores[:n_keep] + [score for _, score in appended.values()]
    if "tokenizer.ggml.merges" in fields:
        arrays["tokenizer.ggml.merges"] = [
            merge for merge in fields["tokenizer.ggml.merges"][0]
            if (parts := merge.split(" ", 1)) and all(p in present for p in parts) and "".join(parts) in present]
    for key, (value, kinds) in fields.items():
        if kinds[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, arrays.get(key, value), kinds[0], sub_type=kinds[-1])
        elif key in special_ids and special_ids[key] >= n_keep:
            writer.add_key_value(key, new_id[tokens[special_ids[key]]], kinds[0])
        else:
            writer.add_key_value(key, value, kinds[0])
    return len(arrays["tokenizer.ggml.tokens"])


@functools.lru_cache(maxsize=4)
def _tokenizer_fields(vocab_path: Path) -> dict[str, tuple[Any, list[Any]]]:
    """The ``tokenizer.*`` keys of a vocab GGUF as (value, types), read once: GGUFReader takes seconds
    on a 32000-token vocabulary and three of the pairs share one."""
    import gguf

    reader = gguf.GGUFReader(str(vocab_path))
    return {key: (fld.contents(), list(fld.types)) for key, fld in reader.fields.items()
            if key.startswith("tokenizer.")}


def write_tiny_text_model(path: Path, spec: TinyTextSpec) -> Path:
    """Write the random text model of ``spec`` (F32)."""
    import gguf

    if spec.arch not in ("llama", "qwen2", "qwen2vl", "gemma3"):
        raise ValueError(f"arch must be llama, qwen2, qwen2vl or gemma3, got {spec.arch!r}")
    w = _Weights(spec.seed)
    n_embd, head_dim = spec.n_embd, spec.n_embd // spec.n_head
    kv = spec.n_head_kv * head_dim
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch=spec.arch)
    writer.add_name(f"tiny-{spec.arch}-text")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    if spec.arch == "qwen2vl":  # M-RoPE: the rotary pairs split over (t, h, w, extra) positions
        quarter = head_dim // 8
        writer.add_rope_dimension_sections([head_dim // 2 - 2 * quarter, quarter, quarter, 0])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = _copy_tokenizer(writer, vocab_file(spec.vocab), spec.n_vocab, spec.extra_tokens)
    writer.add_vocab_size(n_vocab)
    writer.add_chat_template(spec.chat_template)

    # a large embedding scale keeps greedy decoding clear of near-ties (as in tiny_models)
    writer.add_tensor("token_embd.weight", w.mat(n_vocab, n_embd, scale=1.0))
    for i in range(spec.n_layer):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", w.norm(n_embd))
        writer.add_tensor(f"{blk}.attn_q.weight", w.mat(n_embd, n_embd))
        writer.add_tensor(f"{blk}.attn_k.weight", w.mat(kv, n_embd))
        writer.add_tensor(f"{blk}.attn_v.weight", w.mat(kv, n_embd))
        if spec.arch in ("qwen2", "qwen2vl"):
            writer.add_tensor(f"{blk}.attn_q.bias", w.mat(n_embd, scale=0.1))
            writer.add_tensor(f"{blk}.attn_k.bias", w.mat(kv, scale=0.1))
            writer.add_tensor(f"{blk}.attn_v.bias", w.mat(kv, scale=0.1))
        writer.add_tensor(f"{blk}.attn_output.weight", w.mat(n_embd, n_embd))
        writer.add_tensor(f"{blk}.ffn_norm.weight", w.norm(n_embd))
        writer.add_tensor(f"{blk}.ffn_gate.weight", w.mat(spec.n_ff, n_embd))
        writer.add_tensor(f"{blk}.ffn_up.weight", w.mat(spec.n_ff, n_embd))
        writer.add_tensor(f"{blk}.ffn_down.weight", w.mat(n_embd, spec.n_ff))
        if spec.arch == "gemma3":
            writer.add_tensor(f"{blk}.attn_q_norm.weight", w.norm(head_dim))
            writer.add_tensor(f"{blk}.attn_k_norm.weight", w.norm(head_dim))
            writer.add_tensor(f"{blk}.post_attention_norm.weight", w.norm(n_embd))
            writer.add_tensor(f"{blk}.post_ffw_norm.weight", w.norm(n_embd))
    writer.add_tensor("output_norm.weight", w.norm(n_embd))
    # untied: with the output tied to the embedding, the residual stream of a random model is dominated
    # by the current token's own embedding and greedy decoding repeats it forever
    writer.add_tensor("output.weight", w.mat(n_vocab, n_embd, scale=0.5))
    return _finish(writer, tmp, path)


@dataclass(frozen=True)
class _Encoder:
    """A projector file's encoder: its modality, hyperparameters and extra keys."""

    projector: str
    modality: str = "vision"  # or "audio"
    n_embd: int = 32
    n_ff: int = 48  # differs from n_embd: see the module docstring
    n_head: int = 4
    n_layer: int = 2
    extra_keys: tuple[tuple[str, Any], ...] = field(default=())


def _open_mmproj(path: Path, enc: _Encoder, n_embd_text: int) -> tuple[Any, Path]:
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch="clip")
    writer.add_name(f"tiny-{enc.projector}-mmproj")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_bool(f"clip.has_{enc.modality}_encoder", True)
    writer.add_string("clip.projector_type", enc.projector)
    prefix = f"clip.{enc.modality}"
    writer.add_uint32(f"{prefix}.embedding_length", enc.n_embd)
    writer.add_uint32(f"{prefix}.feed_forward_length", enc.n_ff)
    writer.add_uint32(f"{prefix}.block_count", enc.n_layer)
    writer.add_uint32(f"{prefix}.projection_dim", n_embd_text)
    writer.add_uint32(f"{prefix}.attention.head_count", enc.n_head)
    writer.add_float32(f"{prefix}.attention.layer_norm_epsilon", 1e-6)
    if enc.modality == "vision":
        writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
        writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    for key, value in enc.extra_keys:
        if isinstance(value, bool):
            writer.add_bool(key, value)
        else:
            writer.add_uint32(key, value)
    return writer, tmp


def _add_layers(writer: Any, w: _Weights, enc: _Encoder, prefix: str, *, k_bias: bool = True) -> None:
    """Pre-norm transformer blocks as clip.cpp's ``build_vit`` reads them (LayerNorm with bias, biased
    projections, a two-matrix GELU feed-forward)."""
    n, ff = enc.n_embd, enc.n_ff
    for i in range(enc.n_layer):
        blk = f"{prefix}.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(f"{blk}.{name}.weight", w.mat(n, n))
            if name != "attn_k" or k_bias:
                writer.add_tensor(f"{blk}.{name}.bias", w.mat(n, scale=0.1))
        for name in ("ln1", "ln2"):
            writer.add_tensor(f"{blk}.{name}.weight", w.norm(n))
            writer.add_tensor(f"{blk}.{name}.bias", w.mat(n, scale=0.1))
        writer.add_tensor(f"{blk}.ffn_up.weight", w.mat(ff, n))
        writer.add_tensor(f"{blk}.ffn_up.bias", w.mat(ff, scale=0.1))
        writer.add_tensor(f"{blk}.ffn_down.weight", w.mat(n, ff))
        writer.add_tensor(f"{blk}.ffn_down.bias", w.mat(n, scale=0.1))


def _add_vision_stem(writer: Any, w: _Weights, enc: _Encoder, patch: int, n_pos: int, *,
                     bias: bool = True) -> None:
    """The patch-embedding convolution (ggml ``[patch, patch, 3, n_embd]``) and learned positions."""
    writer.add_tensor("v.patch_embd.weight", w.conv(enc.n_embd, 3, patch, patch))
    if bias:
        writer.add_tensor("v.patch_embd.bias", w.mat(enc.n_embd, scale=0.1))
    if n_pos:
        writer.add_tensor("v.position_embd.weight", w.mat(n_pos, enc.n_embd, scale=0.5))


def _add_post_ln(writer: Any, w: _Weights, prefix: str, n: int) -> None:
    writer.add_tensor(f"{prefix}.post_ln.weight", w.norm(n))
    writer.add_tensor(f"{prefix}.post_ln.bias", w.mat(n, scale=0.1))


def write_gemma3_mmproj(path: Path, n_embd_text: int, *, seed: int = 31) -> Path:
    """SigLIP + Gemma 3's soft-embedding norm and input projection: 64x64 images, 8x8 patches pooled 2x2."""
    image, patch, merge = 64, 8, 2
    enc = _Encoder("gemma3", extra_keys=(("clip.vision.image_size", image), ("clip.vision.patch_size", patch),
                                          ("clip.vision.projector.scale_factor", merge), ("clip.use_gelu", True)))
    w = _Weights(seed)
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_vision_stem(writer, w, enc, patch, (image // patch) ** 2)
    _add_layers(writer, w, enc, "v")
    _add_post_ln(writer, w, "v", enc.n_embd)
    writer.add_tensor("mm.soft_emb_norm.weight", w.norm(enc.n_embd))
    # used transposed: ggml [n_embd_text, n_embd]; clip_n_mmproj_embd reads its ne[0]
    writer.add_tensor("mm.input_projection.weight", w.mat(enc.n_embd, n_embd_text, scale=0.5))
    return _finish(writer, tmp, path)


def write_mlp_mmproj(path: Path, n_embd_text: int, *, seed: int = 32) -> Path:
    """LLaVA-1.5: a CLIP encoder (class embedding, pre-norm) and the ``mm.0``/``mm.2`` GELU MLP; 32x32 images."""
    image, patch = 32, 8
    enc = _Encoder("mlp", extra_keys=(("clip.vision.image_size", image), ("clip.vision.patch_size", patch)))
    w = _Weights(seed)
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_vision_stem(writer, w, enc, patch, (image // patch) ** 2 + 1, bias=False)
    writer.add_tensor("v.class_embd", w.mat(enc.n_embd, scale=0.5))
    writer.add_tensor("v.pre_ln.weight", w.norm(enc.n_embd))
    writer.add_tensor("v.pre_ln.bias", w.mat(enc.n_embd, scale=0.1))
    _add_layers(writer, w, enc, "v")
    writer.add_tensor("mm.0.weight", w.mat(n_embd_text, enc.n_embd))
    writer.add_tensor("mm.0.bias", w.mat(n_embd_text, scale=0.1))
    writer.add_tensor("mm.2.weight", w.mat(n_embd_text, n_embd_text, scale=0.5))
    writer.add_tensor("mm.2.bias", w.mat(n_embd_text, scale=0.1))
    return _finish(writer, tmp, path)


def write_idefics3_mmproj(path: Path, n_embd_text: int, *, seed: int = 33) -> Path:
    """SmolVLM: SigLIP tiles of 32x32 (4x4 patches, pixel-shuffled 2x2), images up to 64 pixels a side."""
    image, patch, merge = 32, 8, 2
    enc = _Encoder("idefics3", extra_keys=(("clip.vision.image_size", image), ("clip.vision.patch_size", patch),
                                            ("clip.vision.projector.scale_factor", merge),
                                            ("clip.vision.preproc_image_size", 2 * image), ("clip.use_gelu", True)))
    w = _Weights(seed)
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_vision_stem(writer, w, enc, patch, (image // patch) ** 2)
    _add_layers(writer, w, enc, "v")
    _add_post_ln(writer, w, "v", enc.n_embd)
    writer.add_tensor("mm.model.fc.weight", w.mat(n_embd_text, enc.n_embd * merge * merge))
    return _finish(writer, tmp, path)


def write_qwen2vl_mmproj(path: Path, n_embd_text: int, *, seed: int = 34) -> Path:
    """Qwen2-VL: two patch kernels (still image and its temporal pair), M-RoPE in the encoder, the 2x2
    merger (``mm.0``/``mm.2`` over 4 * n_embd); 8-pixel patches, so one token per 16x16 pixels."""
    patch = 8
    enc = _Encoder("qwen2vl_merger", extra_keys=(("clip.vision.image_size", 64), ("clip.vision.patch_size", patch)))
    w = _Weights(seed)
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_vision_stem(writer, w, enc, patch, 0, bias=False)
    writer.add_tensor("v.patch_embd.weight.1", w.conv(enc.n_embd, 3, patch, patch))
    _add_layers(writer, w, enc, "v")
    _add_post_ln(writer, w, "v", enc.n_embd)
    merged = 4 * enc.n_embd
    writer.add_tensor("mm.0.weight", w.mat(merged, merged, scale=0.1))
    writer.add_tensor("mm.0.bias", w.mat(merged, scale=0.1))
    writer.add_tensor("mm.2.weight", w.mat(n_embd_text, merged, scale=0.2))
    writer.add_tensor("mm.2.bias", w.mat(n_embd_text, scale=0.1))
    return _finish(writer, tmp, path)


def _add_whisper_encoder(writer: Any, w: _Weights, enc: _Encoder, n_mel: int) -> None:
    """Whisper's encoder: two conv1d (the second with stride 2), 1500 positions, no bias on attn_k."""
    n = enc.n_embd
    # conv kernels are ggml [kernel, in, out]; their biases [1, out] broadcast over the frames
    writer.add_tensor("a.conv1d.1.weight", w.conv(n, n_mel, 3))
    writer.add_tensor("a.conv1d.1.bias", w.mat(n, 1, scale=0.1))
    writer.add_tensor("a.conv1d.2.weight", w.conv(n, n, 3))
    writer.add_tensor("a.conv1d.2.bias", w.mat(n, 1, scale=0.1))
    writer.add_tensor("a.position_embd.weight", w.mat(1500, n, scale=0.5))
    _add_layers(writer, w, enc, "a", k_bias=False)
    _add_post_ln(writer, w, "a", n)


def write_qwen2a_mmproj(path: Path, n_embd_text: int, *, seed: int = 35) -> Path:
    """Qwen2-Audio: Whisper (128 mel bins), average pooling by 2 and a linear projector: 750 tokens per
    30 s chunk."""
    n_mel = 128
    enc = _Encoder("qwen2a", modality="audio", extra_keys=(("clip.audio.num_mel_bins", n_mel),))
    w = _Weights(seed)
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_whisper_encoder(writer, w, enc, n_mel)
    writer.add_tensor("mm.a.fc.weight", w.mat(n_embd_text, enc.n_embd, scale=0.5))
    writer.add_tensor("mm.a.fc.bias", w.mat(n_embd_text, scale=0.1))
    return _finish(writer, tmp, path)


def write_ultravox_mmproj(path: Path, n_embd_text: int, *, stack_factor: int = 8, seed: int = 36) -> Path:
    """Ultravox: Whisper (128 mel bins), frames stacked by ``stack_factor``, an RMS-normed SwiGLU projector.

    In the pinned build a stack factor that leaves an odd number of stacked mel frames per 30 s chunk
    (3000 / stack_factor; Ultravox's own 8 gives 375) makes the encoder emit one token more than
    ``mtmd_tokenize`` counted (188, not 187), and ``clip_image_batch_encode`` aborts the process: the
    tokenization succeeds, the encoding kills the caller."""
    n_mel = 128
    enc = _Encoder("ultravox", modality="audio", extra_keys=(("clip.audio.num_mel_bins", n_mel),
                                                              ("clip.audio.projector.stack_factor", stack_factor)))
    w = _Weights(seed)
    stacked, hidden = enc.n_embd * stack_factor, n_embd_text
    writer, tmp = _open_mmproj(path, enc, n_embd_text)
    _add_whisper_encoder(writer, w, enc, n_mel)
    writer.add_tensor("mm.a.norm_pre.weight", w.norm(stacked))
    writer.add_tensor("mm.a.mlp.1.weight", w.mat(2 * hidden, stacked, scale=0.1))  # halved by the SwiGLU
    writer.add_tensor("mm.a.norm_mid.weight", w.norm(hidden))
    writer.add_tensor("mm.a.mlp.2.weight", w.mat(n_embd_text, hidden, scale=0.5))
    return _finish(writer, tmp, path)


# name -> (text model, projector writer)
MTMD_MODEL_WRITERS: dict[str, tuple[TinyTextSpec, Callable[..., Path]]] = {
    "gemma3": (TinyTextSpec(arch="gemma3", extra_tokens=("<start_of_image>", "<end_of_image>")),
               write_gemma3_mmproj),
    "mlp": (TinyTextSpec(arch="llama"), write_mlp_mmproj),
    "idefics3": (TinyTextSpec(arch="llama", vocab="gpt-2", extra_tokens=_SMOLVLM_TOKENS), write_idefics3_mmproj),
    "qwen2vl_merger": (TinyTextSpec(arch="qwen2vl", extra_tokens=("<|vision_start|>", "<|vision_end|>")),
                       write_qwen2vl_mmproj),
    # after 750 near-identical audio tokens the attention of a random model averages them away and greedy
    # decoding soon falls into a short cycle, with most seeds of a single token: this seed's 16 differ
    "qwen2a": (TinyTextSpec(arch="qwen2", extra_tokens=("<|audio_bos|>", "<|audio_eos|>"), seed=2027),
               write_qwen2a_mmproj),
    "ultravox": (TinyTextSpec(arch="llama"), write_ultravox_mmproj),
    "ultravox-stack4": (TinyTextSpec(arch="llama"), functools.partial(write_ultravox_mmproj, stack_factor=4)),
}


def mtmd_model_paths(name: str) -> tuple[Path, Path]:
    """``(text_model, mmproj)`` of the tiny pair ``name`` of :data:`MTMD_MODEL_WRITERS`, written once into
    the cache (the names carry a hash of this module, so a changed writer writes new files)."""
    from ..default_model import cache_dir

    if name not in MTMD_MODEL_WRITERS:
        raise ValueError(f"unknown tiny mtmd model {name!r}; valid: {', '.join(MTMD_MODEL_WRITERS)}")
    spec, write_mmproj = MTMD_MODEL_WRITERS[name]
    version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]
    folder = cache_dir() / "tiny-models"
    text = folder / f"mtmd-{name}-text-{spec.key()}-{version}.gguf"
    mmproj = folder / f"mtmd-{name}-mmproj-{version}.gguf"
    if not text.exists():
        write_tiny_text_model(text, spec)
    if not mmproj.exists():
        write_mmproj(mmproj, spec.n_embd)
    return text, mmproj


def write_png(path: Path, width: int, height: int, *, seed: int = 0) -> Path:
    """An 8-bit RGB PNG of seeded noise over a gradient, written with zlib and struct only."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
    pixels = ((base + rng.integers(0, 64, base.shape)) % 256).astype(np.uint8)
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))  # filter type 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, truecolour, no interlace
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))
    return path


def write_wav(path: Path, seconds: float, *, sample_rate: int = 16000, frequency: float = 440.0) -> Path:
    """A mono 16-bit PCM WAV of a sine tone, written with the ``wave`` module."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    samples = (0.3 * np.sin(2 * np.pi * frequency * t) * 32767).astype("<i2")
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(samples.tobytes())
    return path
