"""Every part shape, data: URIs, local files, kinds and conversion: each failure a MediaError naming its part."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import zlib
from pathlib import Path

import pytest
from media_samples import SAMPLES

from llama_cpp_multimodal import MediaError, MediaInput, MediaPolicy, parse_content, parse_part

PNG, WAV = SAMPLES["png"], SAMPLES["wav"]


def huge_png() -> bytes:
    """A small file that declares a 100000 x 100000 image: a decompression bomb for stb_image."""
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    return PNG[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + PNG[33:]
LOCAL = MediaPolicy(allow_local_files=True)


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(("part", "kind", "fmt"), [
    ({"type": "image_url", "image_url": data_uri(PNG)}, "image", "png"),
    ({"type": "image_url", "image_url": {"url": data_uri(PNG), "detail": "low"}}, "image", "png"),
    ({"type": "image", "image": data_uri(PNG)}, "image", "png"),
    ({"type": "image", "image": PNG}, "image", "png"),
    ({"image": bytearray(PNG)}, "image", "png"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"}}, "audio", "wav"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(SAMPLES["mp3"]).decode(), "format": "MP3"}},
     "audio", "mp3"),
    ({"type": "audio_url", "audio_url": {"url": data_uri(SAMPLES["flac"], "audio/flac")}}, "audio", "flac"),
    ({"type": "audio", "audio": data_uri(WAV, "audio/x-wav")}, "audio", "wav"),
    ({"audio": memoryview(SAMPLES["mp3-id3"])}, "audio", "mp3"),
])
def test_every_part_shape(part: dict, kind: str, fmt: str) -> None:
    media = parse_part(part, 0)
    assert isinstance(media, MediaInput)
    assert (media.kind, media.format) == (kind, fmt)
    assert media.content_id == hashlib.sha256(media.data).hexdigest()


def test_content_keeps_text_and_media_in_order_and_same_bytes_share_an_id() -> None:
    items = parse_content([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": data_uri(PNG)},
                           {"text": "b"}, {"type": "image", "image": PNG}])
    assert [type(i).__name__ for i in items] == ["str", "MediaInput", "str", "MediaInput"]
    assert items[1].content_id == items[3].content_id  # type: ignore[union-attr]
    assert "bytes>" in repr(items[1]) and "\\x89PNG" not in repr(items[1])
    assert parse_content("just text") == ["just text"] and parse_content(None) == []


@pytest.mark.parametrize(("part", "message"), [
    ("not a dict", r"content part 1 is a str; expected an object with a 'type' of text, image_url"),
    ({"type": "video_url", "video_url": "x"}, r"content part 1 has type 'video_url'; allowed: text, image_url, image, "
                                              r"input_audio, audio_url, audio"),
    ({"type": "image_url"}, r"content part 1 of type 'image_url' has no 'image_url' key"),
    ({"image": PNG, "audio": WAV}, r"content part 1 has no 'type' and 2 of the keys"),
    ({"type": "text", "text": 3}, r"content part 1 \(text\): expected a string"),
    ({"type": "image_url", "image_url": PNG}, r"content part 1 \(image_url\): expected a URL string or \{url\}, not bytes"),
    ({"type": "image", "image": 3}, r"content part 1 \(image\): expected a URL, a data: URI, a path or bytes"),
    ({"type": "image_url", "image_url": {"url": ""}}, r"content part 1 \(image_url\): the URL is empty"),
    ({"type": "image", "image": WAV}, r"content part 1 \(image\): expected image, but .* is audio \(WAV\)"),
    ({"type": "audio", "audio": PNG}, r"content part 1 \(audio\): expected audio, but .* is image \(PNG\)"),
    ({"type": "audio", "audio": SAMPLES["ogg"]}, r"content part 1 \(audio\): .* is OGG; audio must be WAV, MP3, FLAC"),
    ({"type": "audio", "audio": b"garbage!"}, r"content part 1 \(audio\): .* is an unknown format"),
    ({"type": "image", "image": b""}, r"content part 1 \(image\): 0 bytes is empty"),
    ({"type": "image", "image": huge_png()}, r"content part 1 \(image\): 100000x100000 pixels, more than "
                                             r"MediaPolicy.max_pixels \(67108864\)"),
    ({"type": "image", "image": PNG[:40]}, r"content part 1 \(image\): corrupt PNG: truncated"),
    ({"type": "audio", "audio": WAV[:22] + b"\x00\x00" + WAV[24:]}, r"content part 1 \(audio\): corrupt WAV"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "ogg"}},
     r"content part 1 \(input_audio\): format 'ogg'; allowed: wav, mp3, flac"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "mp3"}},
     r"content part 1 \(input_audio\): declared as mp3, but the bytes are WAV"),
    ({"type": "input_audio", "input_audio": {"data": "bm90IGJhc2U2NA", "format": "wav"}},
     r"content part 1 \(input_audio\): data: URI is not valid base64"),
    ({"type": "input_audio", "input_audio": "UklGRg=="}, r"content part 1 \(input_audio\): expected \{\"data\""),
    ({"type": "image_url", "image_url": "ftp://example.com/a.png"}, r"content part 1 \(image_url\): scheme 'ftp'"),
])
def test_bad_parts_are_a_value_error_naming_the_part(part: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_content([{"type": "text", "text": "first"}, part])


@pytest.mark.parametrize(("uri", "message"), [
    ("data:image/png," + "%89PNG", "must be base64"),
    ("data:image/png;base64", "must be base64"),
    ("data:image/png;base64,iVBORw0KGgo!!!", "not valid base64"),
    ("data:image/png;base64,iVBORw0KGgo", "not valid base64"),  # bad padding
    ("data:image/png;base64,", "empty"),
    (data_uri(PNG, "image/jpeg"), "declared as image/jpeg, but the bytes are PNG"),
    (data_uri(PNG, "audio/wav"), "declared as audio/wav, but the bytes are PNG"),
    (data_uri(PNG, "text/plain"), "declared as text/plain, but the bytes are PNG"),
])
def test_bad_data_uris(uri: str, message: str) -> None:
    with pytest.raises(MediaError, match=rf"content part 0 \(image_url\): .*{message}"):
        parse_part({"type": "image_url", "image_url": uri}, 0)


def test_data_uri_without_media_type_and_size_limit() -> None:
    assert parse_part({"image_url": data_uri(PNG, "")}, 0).format == "png"  # type: ignore[union-attr]
    with pytest.raises(MediaError, match="more than MediaPolicy.max_bytes"):
        parse_part({"image_url": data_uri(PNG)}, 0, MediaPolicy(max_bytes=10))
    with pytest.raises(MediaError, match="more than MediaPolicy.max_bytes"):
        parse_part({"image": PNG}, 0, MediaPolicy(max_bytes=10))


def test_local_files_are_refused_unless_allowed(tmp_path: Path) -> None:
    image = tmp_path / "cat.png"
    image.write_bytes(PNG)
    for reference in (str(image), image.as_uri()):
        with pytest.raises(MediaError, match=r"content part 0 \(image_url\): local files are not allowed"):
            parse_part({"type": "image_url", "image_url": reference}, 0)
        media = parse_part({"type": "image_url", "image_url": reference}, 0, LOCAL)
        assert isinstance(media, MediaInput) and media.data == PNG and str(image) in media.source


def test_local_file_failures(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(PNG + b"\x00" * 100)
    (tmp_path / "empty.png").write_bytes(b"")
    os.symlink(tmp_path, tmp_path / "link")
    cases = {str(tmp_path): "is not a regular file", str(tmp_path / "link"): "is not a regular file",
             str(tmp_path / "missing.png"): "cannot open local file", str(tmp_path / "empty.png"): "is empty",
             "file://otherhost/etc/passwd": "file: URL on another host"}
    for reference, message in cases.items():
        with pytest.raises(MediaError, match=message):
            parse_part({"image_url": reference}, 0, LOCAL)
    with pytest.raises(MediaError, match=r"larger than MediaPolicy.max_bytes \(100 bytes\)"):
        parse_part({"image_url": str(big)}, 0, MediaPolicy(allow_local_files=True, max_bytes=100))
    if os.path.exists("/dev/zero"):
        with pytest.raises(MediaError, match="is not a regular file"):
            parse_part({"image_url": "/dev/zero"}, 0, LOCAL)


def test_policy_validates_its_fields() -> None:
    for kwargs, message in (({"max_bytes": 0}, "max_bytes must be a positive number, not 0"), ({"max_pixels": "9"}, "max_pixels"), ({"timeout": -1}, "timeout must be"),
                            ({"max_redirects": -1}, "max_redirects must be a whole number, 0 or more"),
                            ({"schemes": ["http", "ftp"]}, r"schemes: \['ftp'\] not supported"),
                            ({"allow_local_files": "false"}, r"allow_local_files must be True or False, not 'false'")):
        with pytest.raises(ValueError, match=message):
            MediaPolicy(**kwargs)
    assert MediaPolicy(schemes="HTTPS").schemes == {"https"}


def _image(fmt: str, mode: str = "RGB") -> bytes:
    image = pytest.importorskip("PIL.Image")
    out = io.BytesIO()
    image.new(mode, (3, 2), (10, 20, 30, 128)[:len(mode)]).save(out, format=fmt)
    return out.getvalue()


def test_converted_images_are_size_checked_before_decoding() -> None:
    with pytest.raises(MediaError, match=r"3x2 pixels, more than MediaPolicy.max_pixels \(5\)"):
        parse_part({"image": _image("WEBP")}, 0, MediaPolicy(max_pixels=5))


@pytest.mark.parametrize(("fmt", "mode"), [("WEBP", "RGB"), ("WEBP", "RGBA"), ("TIFF", "RGB")])
def test_images_mtmd_cannot_read_are_converted_to_png(fmt: str, mode: str) -> None:
    from PIL import Image

    media = parse_part({"type": "image", "image": _image(fmt, mode)}, 0)
    assert isinstance(media, MediaInput) and media.format == "png" and media.data.startswith(b"\x89PNG")
    assert media.content_id == hashlib.sha256(media.data).hexdigest()
    with Image.open(io.BytesIO(media.data)) as converted:
        assert converted.size == (3, 2) and converted.mode == mode


def test_conversion_refuses_what_pillow_cannot_or_must_not_read() -> None:
    pytest.importorskip("PIL")
    with pytest.raises(MediaError, match=r"content part 0 \(image\): WEBP cannot be read"):
        parse_part({"image": SAMPLES["webp"][:20]}, 0)
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 1 1\n"
    with pytest.raises(MediaError, match=r"this image format cannot be read .* Pillow converts WEBP, TIFF"):
        parse_part({"image": eps}, 0)


def test_without_pillow_conversion_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `from PIL import Image` fail
    with pytest.raises(MediaError, match=r"WEBP is not read by mtmd \(PNG, JPEG, BMP, GIF\); .*"
                                         r"llama-cpp-multimodal\[convert\]"):
        parse_part({"image": SAMPLES["webp"]}, 0)


@pytest.mark.parametrize(("fmt", "name"), [("PNG", "png"), ("JPEG", "jpeg"), ("BMP", "bmp"), ("GIF", "gif")])
def test_files_written_by_pillow_pass_as_they_are(fmt: str, name: str) -> None:
    data = _image(fmt)
    media = parse_part({"image": data}, 0)
    assert isinstance(media, MediaInput) and (media.format, media.data) == (name, data)


def test_a_wav_written_by_the_standard_library_passes() -> None:
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(2)
        writer.setframerate(16000)
        writer.writeframes(b"\x00\x01" * 64)
    media = parse_part({"type": "input_audio", "input_audio": {"data": base64.b64encode(out.getvalue()).decode(),
                                                               "format": "wav"}}, 0)
    assert isinstance(media, MediaInput) and media.format == "wav"
