"""One mtmd context: a projector bound to one text model, turning rendered prompts into engine prompts.

``MtmdContext`` owns the ``mtmd_context`` pointer (freed exactly once, before the text model it was made
from); ``prompt()`` tokenizes a rendered prompt and its media into a
:class:`~llama_cpp.engine.media.MediaPrompt`, whose media chunks (:class:`MtmdChunk`) each own a copy of
mtmd's chunk and evaluate it through ``mtmd_helper_eval_chunk_single`` when the engine's prefill reaches
it.  mtmd's context is not thread-safe: tokenizing and encoding take the context's lock.  Tokenizing runs on
the caller's thread, so ``close()`` from another thread waits for it (the handle is a ``SharedHandle``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Sequence

from llama_cpp.native import NativeHandle, SharedHandle, capture_messages
from llama_cpp.engine.media import MediaChunk, MediaPrompt, media_entries, media_key
from llama_cpp_native import ffi, lib

from .errors import MediaError
from .media import MediaInput
from .projector import ProjectorInfo

# ``mtmd_helper_video_init_params.ffmpeg_bin_dir``: no program can live under the null device
_NO_PROGRAMS = ffi.new("char[]", os.devnull.encode())


class MtmdChunk(MediaChunk):
    """One image or audio chunk of a tokenized prompt (a copy of mtmd's chunk, owned here)."""

    __slots__ = ("key", "n_pos", "n_tokens", "kind", "_chunk", "_context")

    def __init__(self, context: MtmdContext, chunk: Any, key: int) -> None:
        self._context = context
        self._chunk = NativeHandle(lib.mtmd_input_chunk_copy(chunk), lib.mtmd_input_chunk_free, "media chunk")
        self.key = key
        self.n_pos = int(lib.mtmd_input_chunk_get_n_pos(chunk))
        self.n_tokens = int(lib.mtmd_input_chunk_get_n_tokens(chunk))
        self.kind = "audio" if lib.mtmd_input_chunk_get_type(chunk) == lib.MTMD_INPUT_CHUNK_TYPE_AUDIO else "image"

    def evaluate(self, ctx: Any, n_past: int, seq_id: int) -> None:
        self._context.evaluate(self._chunk.ptr, self.kind, ctx, n_past, seq_id, self.n_pos)

    def close(self) -> None:
        self._chunk.close()


class MtmdContext:
    """``mtmd_init_from_file(mmproj, text_model)``, its options, and the counters tests read."""

    def __init__(self, projector: ProjectorInfo, model: Any, *, n_threads: int, use_gpu: bool, marker: str,
                 image_min_tokens: int, image_max_tokens: int, batch_max_tokens: int, warmup: bool,
                 verbose: bool) -> None:
        params = lib.mtmd_context_params_default()
        params.use_gpu = bool(use_gpu)
        params.print_timings = bool(verbose)
        params.n_threads = int(n_threads)
        self._marker = ffi.new("char[]", marker.encode())  # the params only point at it
        params.media_marker = self._marker
        params.warmup = bool(warmup)
        params.image_min_tokens = int(image_min_tokens)
        params.image_max_tokens = int(image_max_tokens)
        params.batch_max_tokens = int(batch_max_tokens)
        self.model = model  # the engine Model: kept alive as long as this context refers to it
        with capture_messages(quiet=not verbose) as log:
            ptr = lib.mtmd_init_from_file(projector.path.encode(), model.ptr, params)
        if ptr == ffi.NULL:
            reason = log.reason("not an mmproj file of a supported projector, or its output width does not "
                                "match the text model's embedding width")
            raise ValueError(f"failed to load mmproj {projector.path!r} (projector "
                             f"{projector.projector_type or 'unknown'}): {reason}")
        self.handle = SharedHandle(ptr, lib.mtmd_free, "mtmd context")
        self.projector = projector
        self.marker = marker
        self.vision = bool(lib.mtmd_support_vision(ptr))
        self.audio = bool(lib.mtmd_support_audio(ptr))
        self.use_mrope = bool(lib.mtmd_decode_use_mrope(ptr))
        self.verbose = verbose
        self._options = f"{image_min_tokens}:{image_max_tokens}"
        self._lock = threading.Lock()
        self.n_encoded = 0  # media chunks encoded (mtmd_helper_eval_chunk_single calls)

    @property
    def closed(self) -> bool:
        return self.handle.closed

    def close(self) -> None:
        self.handle.close()

    def supports(self, kind: str) -> bool:
        return self.vision if kind == "image" else self.audio

    # -- tokenizing ---------------------------------------------------------------------
    def prompt(self, text: str, media: Sequence[MediaInput], *, add_bos: bool) -> MediaPrompt:
        """The engine prompt of ``text``, a rendered prompt with one marker per item of ``media`` (in order).

        Special tokens in the text are parsed; BOS goes first when ``add_bos`` and the vocabulary wants it.
        """
        segments = text.split(self.marker)
        if len(segments) - 1 != len(media):
            raise ValueError(f"the rendered prompt has {len(segments) - 1} media markers for {len(media)} media "
                             "parts: the chat template dropped or repeated a media part")
        for item in media:
            if not self.supports(item.kind):
                raise MediaError(f"{item.source}: this projector ({self.projector.projector_type}) does not take "
                                 f"{item.kind} input; it takes "
                                 f"{' and '.join(k for k in ('image', 'audio') if self.supports(k))}")
        with self._lock, self.handle.calling as ptr:
            bitmaps: list[Any] = []
            chunks = lib.mtmd_input_chunks_init()
            try:
                for item in media:  # inside the try: a part that fails frees the bitmaps made before it
                    bitmaps.append(self._bitmap(ptr, item))
                self._tokenize(ptr, chunks, segments, bitmaps, add_bos)
                return self._media_prompt(chunks, text)
            finally:
                lib.mtmd_input_chunks_free(chunks)
                for bitmap in bitmaps:
                    lib.mtmd_bitmap_free(bitmap)

    def _bitmap(self, ptr: Any, item: MediaInput) -> Any:
        # bytes stb_image cannot decode fall through to mtmd's video path, which pipes them to ffprobe and
        # ffmpeg from PATH: pointing it at a "directory" that holds no program keeps request bytes away
        # from any external decoder (the handler reads no video)
        opt = lib.mtmd_helper_init_opt_default()
        opt.video_params.ffmpeg_bin_dir = _NO_PROGRAMS
        with capture_messages(quiet=not self.verbose):
            wrapper = lib.mtmd_helper_bitmap_init_from_buf(ptr, item.data, len(item.data), False, opt)
        if wrapper.video_ctx != ffi.NULL:
            # a video's bitmap is lazy: its frames are read through the video context, so the two go together
            if wrapper.bitmap != ffi.NULL:
                lib.mtmd_bitmap_free(wrapper.bitmap)
            lib.mtmd_helper_video_free(wrapper.video_ctx)
            raise MediaError(f"{item.source}: mtmd read this {item.format.upper()} as a video, which is not supported")
        if wrapper.bitmap == ffi.NULL:
            raise MediaError(f"{item.source}: mtmd could not decode this {item.format.upper()} {item.kind}")
        lib.mtmd_bitmap_set_id(wrapper.bitmap, item.content_id.encode())
        return wrapper.bitmap

    def _tokenize(self, ptr: Any, chunks: Any, segments: list[str], bitmaps: list[Any], add_bos: bool) -> None:
        keep = []  # every buffer the parts point at, alive until mtmd_tokenize_from_parts returns
        parts = []
        for i, segment in enumerate(segments):
            encoded = ffi.new("char[]", segment.encode("utf-8"))
            text = ffi.new("mtmd_input_text *", {"text": encoded, "text_len": len(encoded) - 1,
                                                 "add_special": False, "parse_special": True})
            keep += [encoded, text]
            parts.append(ffi.new("mtmd_input_part *", {"text": text, "bitmap": ffi.NULL}))
            if i < len(bitmaps):
                parts.append(ffi.new("mtmd_input_part *", {"text": ffi.NULL, "bitmap": bitmaps[i]}))
        array = ffi.new("mtmd_input_part *[]", parts)
        with capture_messages(quiet=not self.verbose) as log:
            rc = lib.mtmd_tokenize_from_parts(ptr, chunks, array, len(parts), add_bos)
        if rc != 0:
            reason = log.reason("mtmd could not preprocess a media part")
            raise MediaError(f"the media could not be tokenized ({rc}): {reason}")

    def _media_prompt(self, chunks: Any, text: str) -> MediaPrompt:
        tokens: list[int] = []
        media: dict[int, MediaChunk] = {}
        seen: dict[str, int] = {}  # slices of one image (tiles, overview) are told apart by their order
        n_out = ffi.new("size_t *")
        for i in range(lib.mtmd_input_chunks_size(chunks)):
            chunk = lib.mtmd_input_chunks_get(chunks, i)
            if lib.mtmd_input_chunk_get_type(chunk) == lib.MTMD_INPUT_CHUNK_TYPE_TEXT:
                ids = lib.mtmd_input_chunk_get_tokens_text(chunk, n_out)
                tokens.extend(ids[0:n_out[0]])
                continue
            raw_id = lib.mtmd_input_chunk_get_id(chunk)
            content_id = ffi.string(raw_id).decode() if raw_id != ffi.NULL else ""
            ordinal = seen[content_id] = seen.get(content_id, -1) + 1
            key = media_key(content_id, str(ordinal), self.projector.identity, self._options)
            item = MtmdChunk(self, chunk, key)
            media[len(tokens)] = item
            tokens.extend(media_entries(key, item.n_pos))
        return MediaPrompt(tokens, media, text)

    # -- evaluating ---------------------------------------------------------------------
    def evaluate(self, chunk: Any, kind: str, ctx: Any, n_past: int, seq_id: int, n_pos: int) -> None:
        """Encode ``chunk`` and decode its embeddings into ``seq_id`` at ``n_past`` (engine thread)."""
        new_n_past = ffi.new("llama_pos *", n_past)
        with self._lock:
            ptr = self.handle.ptr
            with capture_messages(quiet=not self.verbose) as log:
                rc = lib.mtmd_helper_eval_chunk_single(ptr, ctx.ptr, chunk, n_past, seq_id, ctx.n_batch, False,
                                                       new_n_past)
            self.n_encoded += 1
        if rc != 0:
            raise RuntimeError(f"mtmd failed to evaluate an {kind} chunk ({rc}): "
                               f"{log.reason('no reason was logged')}")
        if new_n_past[0] != n_past + n_pos:
            raise RuntimeError(f"mtmd put the {kind} chunk at positions {n_past}..{new_n_past[0]}, expected "
                               f"{n_pos} positions")
