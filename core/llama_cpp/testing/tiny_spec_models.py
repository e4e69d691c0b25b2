"""Tiny random GGUF models for testing speculative decoding.

Each function writes a model that goes through llama.cpp's real code path for
one kind of speculation (EAGLE3, DFlash/DSpark/DFlash2, MTP built into the
target or in its own file, a hybrid recurrent target) in milliseconds.  Like
:mod:`.tiny_models`, the weights are seeded random F32 numbers, so drafts are
rarely accepted; what a test gets from them is the plumbing (loading, the
target-draft handshake, drafting, verification, rollback), not quality.

Every model here copies the tokenizer of the ``llama-spm`` vocab (the default
of :class:`TinyLlamaSpec`) and has ``n_embd = 64``, because llama.cpp refuses a
draft whose vocabulary differs from the target's, and the EAGLE3/DFlash drafts
take the target's hidden states (and its token embedding and output head, which
they do not carry) at the target's width.  The EAGLE3 and DFlash drafts pair
with :data:`TARGET_SPEC`, a 4-layer llama written by
:func:`write_tiny_llama_target`; the glm4moe and qwen35 models are targets that
carry their own NextN (MTP) block.

Verified against the pinned llama.cpp (832db0699007) with its own tools, one
process at a time.  ``S`` is ``-p "Hello world" -n 16 --temp 0 -t 2 -c 256``;
each run exited 0, printed the target's own greedy text (the same as
``llama-completion`` gives without a draft), and ended with ``n_predict = 17``
and the ``n_drafted``/``n_accept`` shown (random drafts are never accepted, so
every round goes through the rejection path)::

    llama-speculative-simple -m target.gguf -md eagle3.gguf --spec-type draft-eagle3 S   # 48 / 0
    llama-speculative-simple -m target.gguf -md dflash.gguf --spec-type draft-dflash S   # 48 / 0
    llama-speculative-simple -m target.gguf -md dspark.gguf --spec-type draft-dspark S   # 48 / 0
    llama-speculative-simple -m target.gguf -md dspark.gguf S      # auto-detects draft-dspark: 48 / 0
    llama-speculative-simple -m target.gguf -md dspark.gguf --spec-type draft-dspark \\
        --spec-draft-n-max 4 --spec-draft-p-min 0.5 S                # confidence head cuts: 10 / 0
    llama-speculative-simple -m target.gguf -md dflash2.gguf --spec-type draft-dflash S  # 48 / 0 (DFlash2)
    llama-speculative-simple -m glm4moe.gguf --spec-type draft-mtp S                     # 48 / 0
    llama-speculative-simple -m glm4moe.gguf -md glm4moe-nextn.gguf --spec-type draft-mtp S        # 48 / 0
    llama-speculative-simple -m glm4moe-trunk.gguf -md glm4moe-nextn.gguf --spec-type draft-mtp S  # 48 / 0
    llama-speculative-simple -m qwen35.gguf --spec-type draft-mtp S  # 48 / 0, "bounded partial
                                                                     # sequence removal", n_rs_seq = 3

where target.gguf = :func:`write_tiny_llama_target`, eagle3.gguf =
:func:`write_tiny_eagle3_draft`, dflash/dspark/dflash2.gguf =
:func:`write_tiny_dflash_draft` (default, ``markov=True``,
``selector_top_k=4``), glm4moe/glm4moe-trunk.gguf = :func:`write_tiny_glm4moe_mtp`
(``parts="full"``/``"trunk"``), glm4moe-nextn.gguf =
:func:`write_tiny_glm4moe_nextn_only`, qwen35.gguf = :func:`write_tiny_qwen35_hybrid`.
Every target (target, glm4moe, glm4moe-trunk, qwen35) also runs through
``llama-completion -m TARGET -p hi -n 8 --temp 0 -t 2 -c 256 -no-cnv``.  The
EAGLE3/DFlash drafts log "requires ctx_other to be set (this warning is normal
during memory fitting)" once: the memory fit tries them without the target.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .assets import vocab_file
from .tiny_models import TinyLlamaSpec, _copy_tokenizer, _finish, write_tiny_llama

__all__ = [
    "TARGET_SPEC",
    "write_tiny_dflash_draft",
    "write_tiny_eagle3_draft",
    "write_tiny_glm4moe_mtp",
    "write_tiny_glm4moe_nextn_only",
    "write_tiny_llama_target",
    "write_tiny_qwen35_hybrid",
]

VOCAB = "llama-spm"
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 128

# The llama target the EAGLE3 and DFlash drafts pair with: 4 layers, so three
# distinct layers (1, 2, 3) can feed the draft.
TARGET_SPEC = TinyLlamaSpec(vocab=VOCAB, n_embd=N_EMBD, n_layer=4, n_head=N_HEAD, n_head_kv=N_HEAD_KV, n_ff=N_FF)


class _Weights:
    """Seeded random F32 weights; shapes are numpy's (ggml's reversed: rows = outputs)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, *shape: int, scale: float = 0.2) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(self, n: int = N_EMBD) -> np.ndarray:
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)


def _open(path: Path, arch: str, *, n_layer: int, n_ff: int = N_FF, n_ctx_train: int = 4096) -> tuple[Any, Path, int]:
    """Start a GGUF with the hyperparameters and tokenizer every model here shares; returns (writer, tmp, n_vocab)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch=arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = _copy_tokenizer(writer, vocab_file(VOCAB))
    writer.add_vocab_size(n_vocab)
    return writer, tmp, n_vocab


def _default_target_layers(target_n_layer: int) -> list[int]:
    """Three target layers spread low/middle/high, as EAGLE3 wants; ids index layer inputs, so all < n_layer."""
    if target_n_layer < 3:
        raise ValueError("the target needs at least 3 layers to feed 3 distinct layers to the draft")
    return [1, target_n_layer // 2, target_n_layer - 1]


def write_tiny_llama_target(path: Path) -> Path:
    """Write the 4-layer llama target (:data:`TARGET_SPEC`) that the EAGLE3 and DFlash drafts pair with."""
    return write_tiny_llama(path, TARGET_SPEC)


def write_tiny_eagle3_draft(path: Path, *, target_n_layer: int = 4, seed: int = 4242) -> Path:
    """Write a one-layer ``eagle3`` draft for :data:`TARGET_SPEC`.

    llama.cpp requires exactly 3 ``eagle3.target_layers`` and a
    ``eagle3.target_hidden_size``; ``fc`` fuses the 3 target layers
    (3 * 64 -> 64) and the attention reads [embedding; fused] (128 wide).  The
    file has no ``token_embd``/``output``, so the draft borrows the target's
    through the target context, the common setup for a same-vocab EAGLE3.
    """
    layers = _default_target_layers(target_n_layer)
    w = _Weights(seed)
    writer, tmp, _ = _open(path, "eagle3", n_layer=1)
    writer.add_array("eagle3.target_layers", layers)
    writer.add_uint32("eagle3.target_hidden_size", N_EMBD)

    kv = N_HEAD_KV * HEAD_DIM
    writer.add_tensor("fc.weight", w.mat(N_EMBD, len(layers) * N_EMBD))
    writer.add_tensor("blk.0.attn_norm.weight", w.norm())
    writer.add_tensor("blk.0.attn_norm_2.weight", w.norm())  # hidden_norm on the fused target features
    writer.add_tensor("blk.0.attn_q.weight", w.mat(N_EMBD, 2 * N_EMBD))
    writer.add_tensor("blk.0.attn_k.weight", w.mat(kv, 2 * N_EMBD))
    writer.add_tensor("blk.0.attn_v.weight", w.mat(kv, 2 * N_EMBD))
    writer.add_tensor("blk.0.attn_output.weight", w.mat(N_EMBD, N_EMBD))
    writer.add_tensor("blk.0.ffn_norm.weight", w.norm())
    writer.add_tensor("blk.0.ffn_gate.weight", w.mat(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_up.weight", w.mat(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_down.weight", w.mat(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", w.norm())
    return _finish(writer, tmp, path)


def write_tiny_dflash_draft(path: Path, *, block_size: int = 4, markov: bool = False, selector_top_k: int = 0,
                            target_n_layer: int = 4, n_layer: int = 1, mask_token_id: int = 0,
                            markov_rank: int = 8, selector_rank: int = 8, conv_kernel: int = 3,
                            conv_group: int = 16, seed: int = 5353) -> Path:
    """Write a ``dflash`` draft for :data:`TARGET_SPEC` (it borrows the target's embedding and output head).

    A DFlash draft denoises a block ``[last token, <mask> * (block_size - 1)]``
    in one pass, so it needs ``dflash.block_size`` and
    ``tokenizer.ggml.mask_token_id``.  ``markov=True`` adds the DSpark heads
    (``markov_w1``/``markov_w2``/``conf_proj``): llama.cpp tells DSpark from
    DFlash by ``markov_w1.weight``.  ``selector_top_k > 0`` makes it a DFlash2
    draft: the per-layer block convolutions and the selector tensors, with their
    metadata (``n_embd`` must be at least ``top_k * (top_k + 1)``).
    """
    if selector_top_k and N_EMBD < selector_top_k * (selector_top_k + 1):
        raise ValueError(f"selector_top_k={selector_top_k} is too large for n_embd={N_EMBD}")
    layers = _default_target_layers(target_n_layer)
    w = _Weights(seed)
    writer, tmp, n_vocab = _open(path, "dflash", n_layer=n_layer)
    writer.add_array("dflash.target_layers", layers)
    writer.add_uint32("dflash.block_size", block_size)
    writer.add_mask_token_id(mask_token_id)
    if selector_top_k:
        writer.add_uint32("dflash.selector_top_k", selector_top_k)
        writer.add_uint32("dflash.selector_rank", selector_rank)
        writer.add_uint32("dflash.conv_kernel_size", conv_kernel)
        writer.add_uint32("dflash.conv_group_size", conv_group)

    kv = N_HEAD_KV * HEAD_DIM
    writer.add_tensor("fc.weight", w.mat(N_EMBD, len(layers) * N_EMBD))
    writer.add_tensor("enc.output_norm.weight", w.norm())  # hidden_norm after fc
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", w.norm())
        writer.add_tensor(f"blk.{i}.attn_q.weight", w.mat(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w.mat(kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w.mat(kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w.mat(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_q_norm.weight", w.norm(HEAD_DIM))
        writer.add_tensor(f"blk.{i}.attn_k_norm.weight", w.norm(HEAD_DIM))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", w.norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w.mat(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w.mat(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w.mat(N_EMBD, N_FF))
        if selector_top_k:
            projected = 2 * conv_kernel * (N_EMBD // conv_group)
            for part in ("attn", "ffn"):  # the conv bases have no ".weight" suffix in llama.cpp
                writer.add_tensor(f"blk.{i}.{part}_conv_base", w.mat(2, conv_kernel, N_EMBD, scale=0.1))
                writer.add_tensor(f"blk.{i}.{part}_conv_proj.weight", w.mat(projected, N_EMBD, scale=0.05))
    writer.add_tensor("output_norm.weight", w.norm())
    if markov:
        writer.add_tensor("markov_w1.weight", w.mat(n_vocab, markov_rank))
        writer.add_tensor("markov_w2.weight", w.mat(n_vocab, markov_rank))
        writer.add_tensor("conf_proj.weight", w.mat(1, N_EMBD + markov_rank))
        writer.add_tensor("conf_proj.bias", w.mat(1))
    if selector_top_k:
        writer.add_tensor("selector_predecessor.weight", w.mat(n_vocab, selector_rank))
        writer.add_tensor("selector_successor.weight", w.mat(n_vocab, selector_rank))
        writer.add_tensor("selector_hidden.weight", w.mat(selector_rank, N_EMBD))
    return _finish(writer, tmp, path)


def _nextn_tensors(w: _Weights, il: int) -> Iterator[tuple[str, np.ndarray]]:
    """The NextN-specific tensors of MTP block ``il``: it mixes [enorm(embedding); hnorm(hidden)] back to n_embd."""
    yield f"blk.{il}.nextn.eh_proj.weight", w.mat(N_EMBD, 2 * N_EMBD)
    yield f"blk.{il}.nextn.enorm.weight", w.norm()
    yield f"blk.{il}.nextn.hnorm.weight", w.norm()
    yield f"blk.{il}.nextn.shared_head_norm.weight", w.norm()


def _glm4moe_tensors(n_vocab: int, n_trunk: int, n_expert: int, n_ff_exp: int, seed: int
                     ) -> Iterator[tuple[str, np.ndarray, str]]:
    """Every tensor of the tiny glm4moe, tagged "shared", "trunk" or "nextn"; always drawn in the same order."""
    w = _Weights(seed)
    kv = N_HEAD_KV * HEAD_DIM
    yield "token_embd.weight", w.mat(n_vocab, N_EMBD, scale=1.0), "shared"
    yield "output_norm.weight", w.norm(), "shared"
    yield "output.weight", w.mat(n_vocab, N_EMBD, scale=0.5), "shared"
    for i in range(n_trunk + 1):
        part = "trunk" if i < n_trunk else "nextn"
        yield f"blk.{i}.attn_norm.weight", w.norm(), part
        yield f"blk.{i}.attn_q.weight", w.mat(N_EMBD, N_EMBD), part
        yield f"blk.{i}.attn_k.weight", w.mat(kv, N_EMBD), part
        yield f"blk.{i}.attn_v.weight", w.mat(kv, N_EMBD), part
        yield f"blk.{i}.attn_q.bias", w.mat(N_EMBD, scale=0.02), part
        yield f"blk.{i}.attn_k.bias", w.mat(kv, scale=0.02), part
        yield f"blk.{i}.attn_v.bias", w.mat(kv, scale=0.02), part
        yield f"blk.{i}.attn_output.weight", w.mat(N_EMBD, N_EMBD), part
        yield f"blk.{i}.post_attention_norm.weight", w.norm(), part
        if i == 0:  # the leading dense block
            yield f"blk.{i}.ffn_gate.weight", w.mat(N_FF, N_EMBD), part
            yield f"blk.{i}.ffn_up.weight", w.mat(N_FF, N_EMBD), part
            yield f"blk.{i}.ffn_down.weight", w.mat(N_EMBD, N_FF), part
        else:  # MoE: routed experts with a sigmoid router and its bias, plus one shared expert
            yield f"blk.{i}.ffn_gate_inp.weight", w.mat(n_expert, N_EMBD), part
            yield f"blk.{i}.exp_probs_b.bias", w.mat(n_expert, scale=0.02), part
            yield f"blk.{i}.ffn_gate_exps.weight", w.mat(n_expert, n_ff_exp, N_EMBD), part
            yield f"blk.{i}.ffn_up_exps.weight", w.mat(n_expert, n_ff_exp, N_EMBD), part
            yield f"blk.{i}.ffn_down_exps.weight", w.mat(n_expert, N_EMBD, n_ff_exp), part
            yield f"blk.{i}.ffn_gate_shexp.weight", w.mat(n_ff_exp, N_EMBD), part
            yield f"blk.{i}.ffn_up_shexp.weight", w.mat(n_ff_exp, N_EMBD), part
            yield f"blk.{i}.ffn_down_shexp.weight", w.mat(N_EMBD, n_ff_exp), part
        if part == "nextn":
            for name, value in _nextn_tensors(w, i):
                yield name, value, part


def write_tiny_glm4moe_mtp(path: Path, *, parts: str = "full", n_trunk: int = 2, n_expert: int = 4,
                           n_expert_used: int = 2, n_ff_exp: int = 32, seed: int = 6464) -> Path:
    """Write a ``glm4moe`` target (dense block 0, MoE after it) with one NextN (MTP) block after its trunk.

    ``parts`` picks what goes in the file: ``"full"`` (trunk + NextN: a target
    whose own MTP block drafts, ``--spec-type draft-mtp``), ``"trunk"`` (the
    NextN block left out; llama.cpp still accepts the file as it says
    ``nextn_predict_layers = 1``), or ``"nextn"`` (only the shared tensors and
    the NextN block: an external MTP draft, loaded with ``-md``).  The weights
    are drawn in the same order whatever ``parts`` is, so a "nextn" file holds
    exactly the block of the "full" file of the same seed.
    """
    import gguf

    keep = {"full": {"shared", "trunk", "nextn"}, "trunk": {"shared", "trunk"}, "nextn": {"shared", "nextn"}}
    if parts not in keep:
        raise ValueError(f"parts must be one of {sorted(keep)}, got {parts!r}")
    writer, tmp, n_vocab = _open(path, "glm4moe", n_layer=n_trunk + 1)
    writer.add_nextn_predict_layers(1)
    writer.add_rope_dimension_count(HEAD_DIM // 2)  # GLM rotates half of each head
    writer.add_leading_dense_block_count(1)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(n_expert_used)
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(n_ff_exp)
    writer.add_expert_weights_scale(1.0)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    for name, value, part in _glm4moe_tensors(n_vocab, n_trunk, n_expert, n_ff_exp, seed):
        if part in keep[parts]:
            writer.add_tensor(name, value)
    return _finish(writer, tmp, path)


def write_tiny_glm4moe_nextn_only(path: Path, **kwargs: Any) -> Path:
    """Write only the NextN block of :func:`write_tiny_glm4moe_mtp` (same seed, same block): an external MTP GGUF."""
    return write_tiny_glm4moe_mtp(path, parts="nextn", **kwargs)


def write_tiny_qwen35_hybrid(path: Path, *, seed: int = 3535) -> Path:
    """Write a ``qwen35`` target: a gated-delta-net layer, a gated attention layer, then one NextN block.

    The recurrent layer's state cannot be cut back to an earlier position, so
    speculation against this target (its MTP block, or a draft) must use
    checkpoints to roll back rejected drafts, the path a plain-attention target
    never takes.  The delta net has 2 key heads and 4 value heads of 16
    (``ssm.inner_size`` = 4 * 16); attention uses interleaved M-RoPE sections.
    """
    d_state, n_group, n_v_heads, d_conv = 16, 2, 4, 4
    d_inner = d_state * n_v_heads
    conv_dim = 2 * n_group * d_state + d_inner
    kv = N_HEAD_KV * HEAD_DIM
    w = _Weights(seed)
    writer, tmp, n_vocab = _open(path, "qwen35", n_layer=3)
    writer.add_nextn_predict_layers(1)
    writer.add_full_attention_interval(2)  # layer 0 recurrent, layer 1 attention
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_dimension_sections([3, 3, 2, 0])
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(n_v_heads)
    writer.add_ssm_group_count(n_group)

    writer.add_tensor("token_embd.weight", w.mat(n_vocab, N_EMBD, scale=1.0))
    writer.add_tensor("output_norm.weight", w.norm())
    writer.add_tensor("output.weight", w.mat(n_vocab, N_EMBD, scale=0.5))
    for i in range(3):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", w.norm())
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", w.norm())
        if i == 0:  # gated delta net
            writer.add_tensor(f"blk.{i}.attn_qkv.weight", w.mat(conv_dim, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_gate.weight", w.mat(d_inner, N_EMBD))
            writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", w.mat(conv_dim, d_conv, scale=0.5))
            writer.add_tensor(f"blk.{i}.ssm_dt.bias", w.mat(n_v_heads, scale=0.1))
            writer.add_tensor(f"blk.{i}.ssm_a", -np.exp(w.mat(n_v_heads, scale=0.3)))  # -exp(A_log): decay
            writer.add_tensor(f"blk.{i}.ssm_beta.weight", w.mat(n_v_heads, N_EMBD))
            writer.add_tensor(f"blk.{i}.ssm_alpha.weight", w.mat(n_v_heads, N_EMBD))
            writer.add_tensor(f"blk.{i}.ssm_norm.weight", w.norm(d_state))
            writer.add_tensor(f"blk.{i}.ssm_out.weight", w.mat(N_EMBD, d_inner))
        else:  # attention whose Q projection also carries the output gate, hence 2 * n_embd rows
            writer.add_tensor(f"blk.{i}.attn_q.weight", w.mat(2 * N_EMBD, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_k.weight", w.mat(kv, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_v.weight", w.mat(kv, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_output.weight", w.mat(N_EMBD, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", w.norm(HEAD_DIM))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", w.norm(HEAD_DIM))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w.mat(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w.mat(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w.mat(N_EMBD, N_FF))
        if i == 2:
            for name, value in _nextn_tensors(w, i):
                writer.add_tensor(name, value)
    return _finish(writer, tmp, path)


SPEC_MODEL_WRITERS: dict[str, Callable[[Path], Path]] = {
    "target": write_tiny_llama_target,
    "eagle3": write_tiny_eagle3_draft,
    "dflash": write_tiny_dflash_draft,
    "dspark": lambda path: write_tiny_dflash_draft(path, markov=True),
    "dflash2": lambda path: write_tiny_dflash_draft(path, selector_top_k=4),
    "glm4moe": write_tiny_glm4moe_mtp,
    "glm4moe-trunk": lambda path: write_tiny_glm4moe_mtp(path, parts="trunk"),
    "glm4moe-nextn": write_tiny_glm4moe_nextn_only,
    "qwen35": write_tiny_qwen35_hybrid,
}


def spec_model_path(name: str) -> Path:
    """The tiny model ``name`` of :data:`SPEC_MODEL_WRITERS`, written once into the cache (the file name
    carries a hash of this module, so a changed writer writes a new file)."""
    from ..default_model import cache_dir

    if name not in SPEC_MODEL_WRITERS:
        raise ValueError(f"unknown tiny speculative model {name!r}; valid: {', '.join(SPEC_MODEL_WRITERS)}")
    version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]
    path = cache_dir() / "tiny-models" / f"spec-{name}-{version}.gguf"
    return path if path.exists() else SPEC_MODEL_WRITERS[name](path)
