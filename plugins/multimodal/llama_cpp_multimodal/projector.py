"""What an ``mmproj`` file says about itself, read before mtmd is given it.

A projector file is as untrusted as a model file.  Its header is read with ggml's own GGUF reader (no
tensor data is loaded), to name the projector type in errors and to refuse the files the pinned
llama.cpp would abort the process on, instead of letting them take the interpreter down.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs
from llama_cpp.native import capture_messages
from llama_cpp_native import ffi, lib


@attrs.frozen
class ProjectorInfo:
    """The header facts of an mmproj file that the handler needs."""

    path: str
    projector_type: str  # clip.projector_type, or the vision / audio one of a file with both
    audio_projector_type: str
    audio_stack_factor: int
    identity: str  # path, size and modification time: what makes two opens the same file
    vision: bool  # what mtmd_get_cap_from_file says the projector takes
    audio: bool

    @property
    def unsupported_reason(self) -> str | None:
        """Why mtmd of the pinned build must not be given this file (it would abort the process), or None.

        Ultravox stacks the Whisper encoder's 3000 frames by ``stack_factor`` and counts
        ``3000 / stack_factor / 2`` tokens per 30 s chunk with an integer division: with an odd quotient
        (Ultravox's own 8 gives 375) the encoder emits one token more than counted and ggml aborts.
        """
        kind = self.audio_projector_type or self.projector_type
        if kind == "ultravox" and self.audio_stack_factor > 0 and (3000 // self.audio_stack_factor) % 2:
            return (f"its ultravox audio projector stacks frames by {self.audio_stack_factor}, which the bundled "
                    f"llama.cpp cannot encode (it counts {3000 // self.audio_stack_factor // 2} tokens per "
                    f"30 s chunk and produces {(3000 // self.audio_stack_factor + 1) // 2}, then aborts)")
        return None


def _string(gguf: object, key: str) -> str:
    index = lib.gguf_find_key(gguf, key.encode())
    if index < 0 or lib.gguf_get_kv_type(gguf, index) != lib.GGUF_TYPE_STRING:
        return ""
    return ffi.string(lib.gguf_get_val_str(gguf, index)).decode("utf-8", "replace")


def _unsigned(gguf: object, key: str) -> int:
    index = lib.gguf_find_key(gguf, key.encode())
    if index < 0:
        return 0
    kind = lib.gguf_get_kv_type(gguf, index)
    if kind == lib.GGUF_TYPE_UINT32:
        return int(lib.gguf_get_val_u32(gguf, index))
    if kind == lib.GGUF_TYPE_INT32:
        return max(0, int(lib.gguf_get_val_i32(gguf, index)))
    return 0


def read_projector(path: str | os.PathLike[str]) -> ProjectorInfo:
    """The header of the mmproj file at ``path``; FileNotFoundError or ValueError (not a GGUF file)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"mmproj file not found: {str(p)!r}")
    with open(p, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError(f"mmproj {str(p)!r} is not a GGUF file")
    params = ffi.new("struct gguf_init_params *", {"no_alloc": True, "ctx": ffi.NULL})
    gguf = lib.gguf_init_from_file(str(p).encode(), params[0])
    if gguf == ffi.NULL:
        raise ValueError(f"mmproj {str(p)!r} is not a readable GGUF file")
    try:
        vision = _string(gguf, "clip.vision.projector_type")
        audio = _string(gguf, "clip.audio.projector_type")
        main = _string(gguf, "clip.projector_type") or vision or audio
        if not main:
            raise ValueError(f"{str(p)!r} is not a multimodal projector (mmproj) file: it has no "
                             "clip.projector_type (is it the text model?)")
        stat = p.stat()
        with capture_messages(quiet=True):  # clip's loader logs the file's details: not the caller's business
            caps = lib.mtmd_get_cap_from_file(str(p).encode())
        return ProjectorInfo(path=str(p), projector_type=main, audio_projector_type=audio,
                             audio_stack_factor=_unsigned(gguf, "clip.audio.projector.stack_factor"),
                             identity=f"{p.resolve()}:{stat.st_size}:{stat.st_mtime_ns}",
                             vision=bool(caps.inp_vision), audio=bool(caps.inp_audio))
    finally:
        lib.gguf_free(gguf)
