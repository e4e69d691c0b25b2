"""Checkpoints of the part of a sequence's memory that cannot drop a suffix.

A KV cache can forget the tokens after any position, so reusing a prefix of
what a sequence holds is a ``seq_rm``.  A recurrent state (Mamba, RWKV, the
recurrent layers of a hybrid model) and a sliding-window cache that has
already pruned old cells cannot: they only know the state after the last
token.  A checkpoint is llama.cpp's partial state of the sequence
(``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``) taken after its first ``n_tokens``
tokens; putting it back and cutting the attention part at ``n_tokens`` makes
the sequence hold exactly that prefix again (llama-server's context
checkpoints do the same).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Checkpoint:
    """llama.cpp's partial state of one sequence after its first ``n_tokens`` tokens.

    ``on_device``: the state's tensors stayed in llama.cpp's per-sequence
    device buffers (``LLAMA_STATE_SEQ_FLAGS_ON_DEVICE``) and ``state`` only
    describes them; such a checkpoint can be put back only into the sequence
    it was taken from, and only until that sequence takes another one.
    """

    n_tokens: int
    state: bytes = attrs.field(repr=lambda s: f"<{len(s)} bytes>")
    seq_id: int = -1
    on_device: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.state)
