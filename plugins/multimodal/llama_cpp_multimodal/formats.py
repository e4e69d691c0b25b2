"""What a media file is, from its first bytes; the cheap checks of its header; conversion to PNG.

mtmd decides by magic bytes too: WAV, MP3 and FLAC go to miniaudio, everything else to stb_image (PNG,
JPEG, BMP, GIF are the formats it is meant for). Sniffing here, before mtmd, lets a wrong or unreadable
file be refused with a message that names the content part instead of a NULL bitmap deep in a handler.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import attrs

from .errors import MediaError

IMAGE = "image"
AUDIO = "audio"

#: Pillow decoders trusted with conversion: pure-Python or well-fuzzed ones; never EPS (runs Ghostscript).
CONVERTIBLE_BY_PILLOW = ("WEBP", "TIFF", "ICO", "PPM", "TGA", "PSD")
CONVERT_EXTRA = "pip install 'llama-cpp-multimodal[convert]'"


@attrs.frozen
class MediaFormat:
    """A format by name, its kind, and whether mtmd reads it as it is."""

    name: str
    kind: str
    mtmd_reads: bool


FORMATS = {f.name: f for f in (
    MediaFormat("png", IMAGE, True), MediaFormat("jpeg", IMAGE, True),
    MediaFormat("bmp", IMAGE, True), MediaFormat("gif", IMAGE, True),
    MediaFormat("webp", IMAGE, False), MediaFormat("tiff", IMAGE, False),
    MediaFormat("wav", AUDIO, True), MediaFormat("mp3", AUDIO, True), MediaFormat("flac", AUDIO, True),
    MediaFormat("ogg", AUDIO, False),
)}

#: Media types (``data:image/png;...``, ``Content-Type``) by the format they declare.
MEDIA_TYPES = {
    "image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/pjpeg": "jpeg",
    "image/bmp": "bmp", "image/x-bmp": "bmp", "image/x-ms-bmp": "bmp", "image/gif": "gif",
    "image/webp": "webp", "image/tiff": "tiff",
    "audio/wav": "wav", "audio/wave": "wav", "audio/x-wav": "wav", "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/flac": "flac", "audio/x-flac": "flac", "audio/ogg": "ogg",
}

#: Media types that claim nothing about the content.
GENERIC_MEDIA_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})


def readable_by_mtmd(kind: str) -> str:
    """``"PNG, JPEG, BMP, GIF"``: the formats of ``kind`` mtmd reads, for messages."""
    return ", ".join(f.name.upper() for f in FORMATS.values() if f.kind == kind and f.mtmd_reads)


def _mp3_frame_header(data: bytes, at: int) -> bool:
    """An MPEG audio frame header at ``at``: sync, and no reserved version, layer, bitrate or rate."""
    if len(data) < at + 4:
        return False
    b1, b2 = data[at + 1], data[at + 2]
    return (data[at] == 0xFF and b1 & 0xE0 == 0xE0 and (b1 >> 3) & 3 != 1 and (b1 >> 1) & 3 != 0
            and b2 >> 4 != 15 and (b2 >> 2) & 3 != 3)


def sniff(data: bytes) -> MediaFormat | None:
    """The format ``data`` starts like, or None."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        name = "png"
    elif head.startswith(b"\xff\xd8\xff"):
        name = "jpeg"
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        name = "gif"
    elif head.startswith(b"BM") and len(data) >= 18 and struct.unpack_from("<I", data, 14)[0] in (
            12, 40, 52, 56, 64, 108, 124):
        name = "bmp"
    elif head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        name = "webp"
    elif head[:4] in (b"II*\x00", b"MM\x00*"):
        name = "tiff"
    elif head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        name = "wav"
    elif head.startswith(b"fLaC"):
        name = "flac"
    elif head.startswith(b"ID3") or _mp3_frame_header(data, 0):
        name = "mp3"
    elif head.startswith(b"OggS"):
        name = "ogg"
    else:
        return None
    return FORMATS[name]


def check_declared(media_type: str, actual: MediaFormat) -> None:
    """Refuse content whose declared media type contradicts its bytes (``image/png`` holding a JPEG)."""
    media_type = media_type.split(";")[0].strip().lower()
    if media_type in GENERIC_MEDIA_TYPES:
        return
    named = MEDIA_TYPES.get(media_type)
    matches = named == actual.name if named is not None else media_type.split("/")[0] == actual.kind
    if not matches:
        raise MediaError(f"declared as {media_type}, but the bytes are {actual.name.upper()}")


def check_header(fmt: MediaFormat, data: bytes) -> None:
    """Refuse a file of a format mtmd reads whose header is truncated or inconsistent.

    Only what is cheap: the decoders in mtmd still see the whole file and may refuse it later.
    """
    problem = _HEADER_CHECKS[fmt.name](data)
    if problem:
        raise MediaError(f"corrupt {fmt.name.upper()}: {problem}")


def _png(data: bytes) -> str | None:
    if len(data) < 33 or data[8:16] != b"\x00\x00\x00\rIHDR":
        return "no IHDR chunk after the signature"
    if zlib.crc32(data[12:29]) != struct.unpack_from(">I", data, 29)[0]:
        return "IHDR checksum mismatch"
    width, height = struct.unpack_from(">II", data, 16)
    if not width or not height:
        return f"size {width}x{height}"
    if data.rfind(b"IEND") < 33:
        return "truncated (no IEND chunk)"
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the frame header (SOFn), walking the segments before the first scan."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # no length field
            at += 2
        elif marker in (0xD9, 0xDA):  # the end, or a scan, before any frame header
            return None
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if at + 9 > len(data):
                return None
            height, width = struct.unpack_from(">HH", data, at + 5)
            return width, height
        else:
            length = struct.unpack_from(">H", data, at + 2)[0]
            if length < 2:
                return None
            at += 2 + length
    return None


def _jpeg(data: bytes) -> str | None:
    size = _jpeg_size(data)
    if size is None:
        return "no frame header before the image data"
    if not size[0] or not size[1]:
        return f"size {size[0]}x{size[1]}"
    return None if data.rfind(b"\xff\xd9") > 2 else "truncated (no end-of-image marker)"


def _gif(data: bytes) -> str | None:
    if len(data) < 13:
        return "truncated header"
    width, height = struct.unpack_from("<HH", data, 6)
    return None if width and height else f"size {width}x{height}"


def _bmp(data: bytes) -> str | None:
    if len(data) < 26:
        return "truncated header"
    pixels_at, header_size = struct.unpack_from("<II", data, 10)
    width, height = struct.unpack_from("<HH" if header_size == 12 else "<ii", data, 18)
    if not width or not height:
        return f"size {width}x{height}"
    return None if 14 + header_size <= pixels_at < len(data) else f"pixel data offset {pixels_at} out of range"


def _wav(data: bytes) -> str | None:
    at, fmt_seen = 12, False
    while at + 8 <= len(data):
        chunk, size = data[at:at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if chunk == b"fmt ":
            if size < 16 or at + 8 + 16 > len(data):
                return f"fmt chunk of {size} bytes"
            _tag, channels, rate, _byte_rate, block_align, _bits = struct.unpack_from("<HHIIHH", data, at + 8)
            if not channels or not rate or not block_align:
                return f"{channels} channels at {rate} Hz, block align {block_align}"
            fmt_seen = True
        elif chunk == b"data":
            # a streamed file may leave the data size at 0 or 0xFFFFFFFF; decoders cope, so do we
            return None if fmt_seen else "data chunk before the fmt chunk"
        at += 8 + size + (size & 1)
    return "no data chunk" if fmt_seen else "no fmt chunk"


def _flac(data: bytes) -> str | None:
    if len(data) < 8 + 34 or data[4] & 0x7F != 0 or data[5:8] != b"\x00\x00\x22":
        return "no STREAMINFO block after the signature"
    return None


def _mp3(data: bytes) -> str | None:
    if data.startswith(b"ID3"):
        if len(data) < 10 or any(b & 0x80 for b in data[6:10]):
            return "bad ID3 tag header"
        size = 10 + ((data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]) + (10 if data[5] & 0x10 else 0)
        return None if _mp3_frame_header(data, size) else "no MPEG audio frame after the ID3 tag"
    return None


def image_size(fmt: MediaFormat, data: bytes) -> tuple[int, int]:
    """Width and height from the header of a PNG, JPEG, BMP or GIF that passed :func:`check_header`.

    What stb_image will allocate for, whatever the file's size: a small file can declare a huge image.
    """
    if fmt.name == "png":
        return struct.unpack_from(">II", data, 16)
    if fmt.name == "gif":
        return struct.unpack_from("<HH", data, 6)
    if fmt.name == "jpeg":
        size = _jpeg_size(data)
        if size is None:
            raise ValueError("a JPEG that passed check_header has no frame header")
        return size
    width, height = struct.unpack_from("<HH" if struct.unpack_from("<I", data, 14)[0] == 12 else "<ii", data, 18)
    return abs(width), abs(height)


def check_pixels(width: int, height: int, max_pixels: int) -> None:
    """Refuse an image with more pixels than ``max_pixels`` (a decompression bomb, or just too large)."""
    if width * height > max_pixels:
        raise MediaError(f"{width}x{height} pixels, more than MediaPolicy.max_pixels ({max_pixels})")


_HEADER_CHECKS = {"png": _png, "jpeg": _jpeg, "gif": _gif, "bmp": _bmp, "wav": _wav, "flac": _flac, "mp3": _mp3}


def convert_to_png(data: bytes, sniffed: MediaFormat | None, max_pixels: int) -> bytes:
    """An image mtmd cannot read (WebP, TIFF...) re-encoded as PNG with Pillow, the ``convert`` extra.

    Only the first frame; RGBA if the image has transparency, else RGB. The size is checked before the
    pixels are decoded, and Pillow's own decompression-bomb warning is an error: the input is untrusted.
    """
    what = sniffed.name.upper() if sniffed else "this image format"
    try:
        from PIL import Image
    except ImportError:
        raise MediaError(f"{what} is not read by mtmd ({readable_by_mtmd(IMAGE)}); converting it needs Pillow: "
                         f"{CONVERT_EXTRA}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=CONVERTIBLE_BY_PILLOW) as image:
                width, height = image.size
                check_pixels(width, height, max_pixels)
                image.load()
                alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
                out = io.BytesIO()
                image.convert("RGBA" if alpha else "RGB").save(out, format="PNG")
    except MediaError:
        raise
    # a decoder fed untrusted bytes can fail in any way (OSError, SyntaxError, struct.error, bomb checks...);
    # every one of them means the same thing to the caller
    except Exception as exc:  # noqa: BLE001
        raise MediaError(f"{what} cannot be read (mtmd reads {readable_by_mtmd(IMAGE)}; Pillow converts "
                         f"{', '.join(CONVERTIBLE_BY_PILLOW)}): {exc}") from exc
    return out.getvalue()
