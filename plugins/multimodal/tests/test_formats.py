"""Sniffing every format by its magic bytes, and the cheap header checks that catch corrupt files."""

from __future__ import annotations

import struct

import pytest

from media_samples import JPEG, MP3_FRAME, SAMPLES, png_bytes, wav_bytes
from llama_cpp_multimodal import MediaError, sniff
from llama_cpp_multimodal.formats import check_declared, check_header, image_size


@pytest.mark.parametrize(("sample", "name", "kind", "mtmd_reads"), [
    ("png", "png", "image", True), ("jpeg", "jpeg", "image", True), ("gif", "gif", "image", True),
    ("bmp", "bmp", "image", True), ("webp", "webp", "image", False), ("tiff", "tiff", "image", False),
    ("wav", "wav", "audio", True), ("mp3", "mp3", "audio", True), ("mp3-id3", "mp3", "audio", True),
    ("flac", "flac", "audio", True), ("ogg", "ogg", "audio", False),
])
def test_sniff_each_format(samples: dict[str, bytes], sample: str, name: str, kind: str, mtmd_reads: bool) -> None:
    fmt = sniff(samples[sample])
    assert fmt is not None and (fmt.name, fmt.kind, fmt.mtmd_reads) == (name, kind, mtmd_reads)
    if mtmd_reads:
        check_header(fmt, samples[sample])


@pytest.mark.parametrize("data", [b"", b"hello world", b"BM" + b"\x00" * 30, b"\xff\xff\xff\xff", b"RIFF\x00\x00\x00\x00AVI "])
def test_unknown_bytes_are_not_sniffed(data: bytes) -> None:
    assert sniff(data) is None


def _corrupt(name: str) -> bytes:
    png, wav = png_bytes(), wav_bytes()
    return {
        "png-truncated": png[:40],
        "png-no-ihdr": png[:8] + b"\x00" * 40,
        "png-bad-crc": png[:29] + b"\x00\x00\x00\x00" + png[33:],
        "jpeg-no-frame": b"\xff\xd8\xff\xe0" + b"\x00" * 30,
        "jpeg-scan-first": JPEG[:20] + JPEG[39:],
        "jpeg-zero-size": JPEG[:25] + b"\x00\x00" + JPEG[27:],
        "jpeg-truncated": JPEG[:-2],
        "gif-truncated": b"GIF89a\x01",
        "bmp-offset": b"BM" + struct.pack("<IHHI", 60, 0, 0, 5000) + struct.pack("<IiiHH", 40, 1, 1, 1, 24) + b"\x00" * 40,
        "wav-no-fmt": b"RIFF\x10\x00\x00\x00WAVEdata\x04\x00\x00\x00\x00\x00\x00\x00",
        "wav-zero-channels": wav[:22] + b"\x00\x00" + wav[24:],
        "wav-short-fmt": wav[:16] + b"\x08\x00\x00\x00" + wav[20:],
        "wav-no-data": wav[:36],
        "flac-no-streaminfo": b"fLaC\x84\x00\x00\x10" + b"\x00" * 40,
        "mp3-id3-no-frame": b"ID3\x04\x00\x00\x00\x00\x00\x05" + b"\x00" * 50,
    }[name]


@pytest.mark.parametrize("name", ["png-truncated", "png-no-ihdr", "png-bad-crc", "jpeg-no-frame",
                                  "jpeg-scan-first", "jpeg-zero-size", "jpeg-truncated", "gif-truncated",
                                  "bmp-offset", "wav-no-fmt", "wav-zero-channels", "wav-short-fmt", "wav-no-data",
                                  "flac-no-streaminfo", "mp3-id3-no-frame"])
def test_corrupt_headers_are_refused(name: str) -> None:
    data = _corrupt(name)
    fmt = sniff(data)
    assert fmt is not None and fmt.name == name.split("-")[0]
    with pytest.raises(MediaError, match=f"corrupt {fmt.name.upper()}"):
        check_header(fmt, data)


def test_a_streamed_wav_with_an_open_data_size_is_accepted() -> None:
    wav = wav_bytes()
    at = wav.index(b"data") + 4
    streamed = wav[:at] + b"\xff\xff\xff\xff" + wav[at + 4:]
    check_header(sniff(streamed), streamed)  # type: ignore[arg-type]


@pytest.mark.parametrize(("declared", "ok"), [
    ("image/png", True), ("IMAGE/PNG; charset=binary", True), ("application/octet-stream", True), ("", True),
    ("image/x-portable-anymap", True), ("image/jpeg", False), ("audio/wav", False), ("text/plain", False),
])
def test_declared_media_type_must_match_the_bytes(declared: str, ok: bool) -> None:
    png = sniff(png_bytes())
    assert png is not None
    if ok:
        check_declared(declared, png)
    else:
        with pytest.raises(MediaError, match="declared as .* but the bytes are PNG"):
            check_declared(declared, png)


def test_mp3_frame_sync_needs_a_valid_header() -> None:
    assert sniff(MP3_FRAME) is not None
    assert sniff(b"\xff\xf8" + MP3_FRAME[2:]) is None  # reserved layer
    assert sniff(b"\xff\xeb" + MP3_FRAME[2:]) is None  # reserved MPEG version


@pytest.mark.parametrize(("sample", "size"), [("png", (1, 1)), ("jpeg", (3, 2)), ("gif", (1, 1)), ("bmp", (1, 1))])
def test_image_size_from_the_header(sample: str, size: tuple[int, int]) -> None:
    data = SAMPLES[sample]
    assert image_size(sniff(data), data) == size  # type: ignore[arg-type]
