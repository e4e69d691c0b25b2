"""Small media files built by hand: one per format, valid as far as the header checks look; and the
address check that lets the loopback test server pass as a public host (shared by the http tests)."""

from __future__ import annotations

import struct
import zlib
from typing import Callable

from llama_cpp_multimodal import refused_address_reason
from llama_cpp_multimodal.policy import IPAddress


def png_bytes(width: int = 1, height: int = 1) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def bmp_bytes() -> bytes:
    pixels = b"\x00\x00\xff\x00"  # one BGR pixel, padded to 4 bytes
    return (b"BM" + struct.pack("<IHHI", 14 + 40 + len(pixels), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, len(pixels), 2835, 2835, 0, 0) + pixels)


def wav_bytes(channels: int = 1, rate: int = 16000) -> bytes:
    samples = b"\x00\x00" * 16
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


# SOI, APP0 (JFIF), SOF0 (2x3, 3 components), SOS, a few bytes of scan, EOI: enough for every header check
JPEG = (b"\xff\xd8" + b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        + b"\xff\xc0\x00\x11\x08\x00\x02\x00\x03\x03\x01\x11\x00\x02\x11\x01\x03\x11\x01"
        + b"\xff\xda\x00\x0c\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00" + b"\x12\x34" + b"\xff\xd9")

MP3_FRAME = b"\xff\xfb\x90\x64" + b"\x00" * 413  # MPEG-1 layer III, 128 kbit/s, 44.1 kHz

SAMPLES = {
    "png": png_bytes(),
    "jpeg": JPEG,
    "gif": b"GIF89a\x01\x00\x01\x00\x00\x00\x00" + b"," + b"\x00" * 9 + b"\x02\x02D\x01\x00;",
    "bmp": bmp_bytes(),
    "webp": b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00",
    "tiff": b"II*\x00\x08\x00\x00\x00" + b"\x00" * 8,
    "wav": wav_bytes(),
    "mp3": MP3_FRAME * 2,
    "flac": b"fLaC\x80\x00\x00\x22" + b"\x00" * 34,
    "ogg": b"OggS\x00\x02" + b"\x00" * 22,
}
SAMPLES["mp3-id3"] = b"ID3\x04\x00\x00\x00\x00\x00\x05" + b"\x00" * 5 + MP3_FRAME


def treat_as_public(*public: str) -> Callable[[IPAddress], str | None]:
    """An address check that lets the test server's address pass as public, and checks all others as usual."""
    def check(ip: IPAddress) -> str | None:
        return None if str(ip) in public else refused_address_reason(ip)
    return check
