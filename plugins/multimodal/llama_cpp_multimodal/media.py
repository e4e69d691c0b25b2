"""Media parts of chat messages, in OpenAI's shapes and the seed's, read into checked records.

A message's ``content`` is a string or a list of parts. Text parts stay strings; each media part becomes
a :class:`MediaInput`: its bytes (in a format mtmd reads, converted if needed), the format, and the
content id mtmd gives the bitmap (the SHA-256 of those bytes), by which the ledger and the caches key it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Collection, Iterable, Mapping, Union

import attrs

from . import sources
from .errors import MediaError
from .formats import (AUDIO, IMAGE, check_declared, check_header, check_pixels, convert_to_png, image_size,
                      readable_by_mtmd, sniff)
from .policy import MediaPolicy

#: Part type -> the kind of media it holds.
PART_KINDS = {"image_url": IMAGE, "image": IMAGE, "input_audio": AUDIO, "audio_url": AUDIO, "audio": AUDIO}
PART_TYPES = ("text", *PART_KINDS)
INPUT_AUDIO_FORMATS = ("wav", "mp3", "flac")

DEFAULT_POLICY = MediaPolicy()


@attrs.frozen
class MediaInput:
    """One image or audio clip, ready for mtmd.

    ``content_id`` is what ``mtmd_helper_bitmap_init_from_buf`` sets as the bitmap id (SHA-256 hex of the
    bytes it gets, which are ``data``): two parts with the same bytes are the same media wherever they
    came from, and one URL whose content changed is not.
    """

    kind: str
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    format: str
    source: str
    content_id: str = attrs.field(init=False)

    @content_id.default
    def _sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


ContentItem = Union[str, MediaInput]


def parse_content(content: str | Iterable[Any] | None, policy: MediaPolicy = DEFAULT_POLICY,
                  kinds: Collection[str] = (IMAGE, AUDIO)) -> list[ContentItem]:
    """A message's content as text strings and media, in order; MediaError names the part that fails.

    ``kinds``: the media the model's projector takes; a part of another kind is refused before it is read
    (no fetch), with the part named, rather than deep in mtmd after every part was loaded.
    """
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    return [parse_part(part, index, policy, kinds) for index, part in enumerate(content)]


def part_type(part: Any, index: int) -> str:
    """The type of a content part: its ``type``, or for a bare part (``{"image": ...}``) its one known key."""
    if not isinstance(part, Mapping):
        raise MediaError(f"content part {index} is a {type(part).__name__}; expected an object with a "
                         f"'type' of {', '.join(PART_TYPES)}")
    kind = part.get("type")
    if kind is None:
        keys = [key for key in PART_TYPES if key in part]
        if len(keys) != 1:
            raise MediaError(f"content part {index} has no 'type' and {len(keys)} of the keys "
                             f"{', '.join(PART_TYPES)}; expected one")
        kind = keys[0]
    if kind not in PART_TYPES:
        raise MediaError(f"content part {index} has type {kind!r}; allowed: {', '.join(PART_TYPES)}")
    if kind not in part:
        raise MediaError(f"content part {index} of type {kind!r} has no {kind!r} key")
    return kind


def parse_part(part: Any, index: int, policy: MediaPolicy = DEFAULT_POLICY,
               kinds: Collection[str] = (IMAGE, AUDIO)) -> ContentItem:
    """One content part: its text, or its media (of one of ``kinds``) read and checked under ``policy``."""
    kind = part_type(part, index)
    value = part[kind]
    if kind == "text":
        if not isinstance(value, str):
            raise MediaError(f"content part {index} (text): expected a string, not {type(value).__name__}")
        return value
    if PART_KINDS[kind] not in kinds:
        raise MediaError(f"content part {index} ({kind}): the model's projector does not take {PART_KINDS[kind]} "
                         f"input; it takes {' and '.join(kinds) or 'none'}")
    try:
        return _read_media(kind, value, policy)
    except MediaError as exc:
        raise MediaError(f"content part {index} ({kind}): {exc}") from exc


def _read_media(part_kind: str, value: Any, policy: MediaPolicy) -> MediaInput:
    kind = PART_KINDS[part_kind]
    if part_kind == "input_audio":
        return _input_audio(value, policy)
    if isinstance(value, Mapping) and "url" in value:
        value = value["url"]
    if isinstance(value, (bytes, bytearray, memoryview)) and part_kind in ("image", "audio"):
        data = bytes(value)
        if len(data) > policy.max_bytes:
            raise MediaError(f"{len(data)} bytes, more than MediaPolicy.max_bytes ({policy.max_bytes})")
        return media_from_bytes(kind, sources.Loaded(data, "", f"{len(data)} bytes"), policy)
    if value == "":
        raise MediaError("the URL is empty")
    if not isinstance(value, str):
        shapes = "a URL, a data: URI, a path or bytes" if part_kind in ("image", "audio") else "a URL string or {url}"
        raise MediaError(f"expected {shapes}, not {type(value).__name__}")
    return media_from_bytes(kind, sources.load(value, policy), policy)


def _input_audio(value: Any, policy: MediaPolicy) -> MediaInput:
    """OpenAI's ``{"data": <base64>, "format": "wav" | "mp3" | "flac"}``."""
    if not isinstance(value, Mapping) or not isinstance(value.get("data"), str):
        raise MediaError('expected {"data": <base64>, "format": ' + " | ".join(INPUT_AUDIO_FORMATS) + "}")
    declared = str(value.get("format", "")).lower()
    if declared not in INPUT_AUDIO_FORMATS:
        raise MediaError(f"format {value.get('format')!r}; allowed: {', '.join(INPUT_AUDIO_FORMATS)}")
    loaded = sources.load_data_uri(f"data:;base64,{value['data']}", policy)
    loaded = attrs.evolve(loaded, source=f"input_audio ({declared}, {len(loaded.data)} bytes)")
    media = media_from_bytes(AUDIO, loaded, policy)
    if media.format != declared:
        raise MediaError(f"declared as {declared}, but the bytes are {media.format.upper()}")
    return media


def media_from_bytes(kind: str, loaded: sources.Loaded, policy: MediaPolicy = DEFAULT_POLICY) -> MediaInput:
    """Check that ``loaded`` holds media of ``kind`` that mtmd can read, converting images where needed."""
    if not loaded.data:
        raise MediaError(f"{loaded.source} is empty")
    fmt = sniff(loaded.data)
    if fmt is not None and fmt.kind != kind:
        raise MediaError(f"expected {kind}, but {loaded.source} is {fmt.kind} ({fmt.name.upper()})")
    if fmt is not None and loaded.media_type:
        check_declared(loaded.media_type, fmt)
    if fmt is not None and fmt.mtmd_reads:
        check_header(fmt, loaded.data)
        if kind == IMAGE:
            check_pixels(*image_size(fmt, loaded.data), policy.max_pixels)
        return MediaInput(kind, loaded.data, fmt.name, loaded.source)
    if kind == AUDIO:
        what = fmt.name.upper() if fmt else "an unknown format"
        raise MediaError(f"{loaded.source} is {what}; audio must be {readable_by_mtmd(AUDIO)}")
    png = convert_to_png(loaded.data, fmt, policy.max_pixels)
    return MediaInput(kind, png, "png", f"{loaded.source}, converted to PNG")
