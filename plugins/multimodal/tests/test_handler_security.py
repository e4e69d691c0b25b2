"""Hostile media through the whole handler, as a server would meet it: ``Llama.create_chat_completion``.

The readers have their own tests (test_remote.py, test_media_parts.py); these check what a caller sees: a
request whose media is refused or unreadable raises a ValueError that names the message and the part (or,
for bytes only mtmd finds broken, the media's source), the process survives, and the same Llama then serves
a valid request with nothing left behind in its scheduler.  HTTP goes to the loopback server of conftest.py.
"""

from __future__ import annotations

import base64
import os
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from media_samples import SAMPLES, treat_as_public, wav_bytes

from llama_cpp import Llama
from llama_cpp_multimodal import GenericMTMDChatHandler, MediaPolicy

Paths = Callable[[str], "tuple[Path, Path]"]

PRIVATE_OK = MediaPolicy(allow_private_addresses=True)
PUBLIC_LOOPBACK = MediaPolicy(address_check=treat_as_public("127.0.0.1"))
N_TOKENS = 4
# the bad part is the second of the first message, so the index in the message is checked too
PART = r"messages\[0\] \(user\): content part 1 "


def data_uri(data: bytes, media_type: str = "") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def input_audio(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_with_idat(idat: bytes, width: int = 8, height: int = 8) -> bytes:
    """A PNG whose signature, IHDR (checksum included) and IEND are right: only the pixel data is ``idat``,
    so every header check passes and only the decoder in mtmd can find it broken."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))


def ask(llm: Llama, *parts: dict[str, Any]) -> dict[str, Any]:
    """A greedy chat of one user message: the text "Look:" and then ``parts``."""
    return llm.create_chat_completion(  # type: ignore[return-value]
        messages=[{"role": "user", "content": [{"type": "text", "text": "Look:"}, *parts]}],
        max_tokens=N_TOKENS, temperature=0.0, ignore_eos=True)


def open_llama(paths: tuple[Path, Path], policy: MediaPolicy | None = None) -> Llama:
    """``Llama(mmproj_path=...)`` as a user writes it (the library policy), or with a handler under ``policy``."""
    text, mmproj = paths
    if policy is None:
        return Llama(str(text), mmproj_path=str(mmproj), n_ctx=1024, n_threads=2, verbose=False,
                     chat_handler_kwargs={"warmup": False, "verbose": False})
    handler = GenericMTMDChatHandler(mmproj_path=str(mmproj), media_policy=policy, warmup=False, verbose=False)
    return Llama(str(text), chat_handler=handler, n_ctx=1024, n_threads=2, verbose=False)


def assert_idle(llm: Llama) -> None:
    """No request waits or holds a sequence: a refused request left nothing behind."""
    scheduler = llm.scheduler
    assert not scheduler.waiting
    assert all(slot.request is None for slot in scheduler.slots)


def assert_still_serves(llm: Llama, valid: dict[str, Any]) -> None:
    """The Llama that refused a request answers a valid one in full, its media evaluated, and is idle after."""
    assert_idle(llm)
    evaluated = llm.scheduler.counters.n_media_evaluated
    reply = ask(llm, valid)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == N_TOKENS
    assert llm.scheduler.counters.n_media_evaluated == evaluated + 1
    assert_idle(llm)


@pytest.fixture(scope="module")
def valid_image(tiny_png: Callable[..., Path]) -> dict[str, Any]:
    """A 32x32 PNG as a data: URI (read under every policy, unlike a path); a seed no other test encodes."""
    return image(data_uri(tiny_png(32, 32, seed=7).read_bytes(), "image/png"))


@pytest.fixture(scope="module")
def valid_audio(tiny_wav: Callable[..., Path]) -> dict[str, Any]:
    return input_audio(tiny_wav(1.0).read_bytes())


@pytest.fixture
def gemma3(tiny_mtmd_model: Paths) -> Iterator[Llama]:
    """The vision model under the library's default policy."""
    with open_llama(tiny_mtmd_model("gemma3")) as llm:
        yield llm


@pytest.fixture
def qwen2a(tiny_mtmd_model: Paths) -> Iterator[Llama]:
    """The audio model under the library's default policy."""
    with open_llama(tiny_mtmd_model("qwen2a")) as llm:
        yield llm


# -- remote URLs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "reason"), [
    ("{base}/png", r"{base}/png resolves to 127\.0\.0\.1, a loopback address; refused"),
    ("http://10.1.2.3:{port}/png", r"http://10\.1\.2\.3:\d+/png resolves to 10\.1\.2\.3, a private address"),
    ("http://169.254.169.254/latest/meta-data/",
     r"http://169\.254\.169\.254/latest/meta-data/ resolves to 169\.254\.169\.254, a link-local address"),
])
def test_a_private_address_is_refused_before_any_connection(server: Any, gemma3: Llama, valid_image: dict[str, Any],
                                                            url: str, reason: str) -> None:
    url = url.format(base=server.url, port=server.server_address[1])
    seen = len(server.requests)
    with pytest.raises(ValueError, match=PART + r"\(image_url\): " + reason.format(base=server.url)):
        ask(gemma3, image(url))
    assert len(server.requests) == seen  # refused before connecting, not after
    assert_still_serves(gemma3, valid_image)


def test_a_private_address_is_fetched_when_the_policy_allows_it(server: Any, tiny_mtmd_model: Paths) -> None:
    with open_llama(tiny_mtmd_model("gemma3"), PRIVATE_OK) as llm:
        reply = ask(llm, image(f"{server.url}/png"))
        assert server.requests[-1][0] == "/png"
        assert reply["usage"]["completion_tokens"] == N_TOKENS
        assert llm.scheduler.counters.n_media_evaluated == 1  # the served PNG went through mtmd into the sequence
        assert_idle(llm)


@pytest.mark.parametrize(("target", "reason"), [
    ("http://127.0.0.2:{port}/png", r"http://127\.0\.0\.2:\d+/png resolves to 127\.0\.0\.2, a loopback address"),
    ("http://[::ffff:10.0.0.1]/png", r"http://\[::ffff:10\.0\.0\.1\]/png resolves to ::ffff:10\.0\.0\.1, a private address"),
    ("http://169.254.169.254/latest/meta-data/",
     r"http://169\.254\.169\.254/latest/meta-data/ resolves to 169\.254\.169\.254, a link-local address"),
    ("file:///etc/passwd", r"scheme 'file' of file:///etc/passwd is not allowed"),
])
def test_a_redirect_to_a_private_address_is_refused(server: Any, tiny_mtmd_model: Paths, valid_image: dict[str, Any],
                                                    target: str, reason: str) -> None:
    """The loopback server passes as public here, as a compromised or hostile public host would: its
    redirect is checked like a URL of the request."""
    location = quote(target.format(port=server.server_address[1]), safe="")
    with open_llama(tiny_mtmd_model("gemma3"), PUBLIC_LOOPBACK) as llm:
        with pytest.raises(ValueError, match=PART + r"\(image_url\): " + reason):
            ask(llm, image(f"{server.url}/redirect?to={location}"))
        assert_still_serves(llm, valid_image)
        assert ask(llm, image(f"{server.url}/redirect?to=/png"))["usage"]["completion_tokens"] == N_TOKENS


@pytest.mark.parametrize(("path", "policy", "reason", "within"), [
    ("/big", MediaPolicy(allow_private_addresses=True, max_bytes=1 << 20),
     r"/big is larger than MediaPolicy\.max_bytes \(1048576 bytes\)", 2.0),
    ("/stream", MediaPolicy(allow_private_addresses=True, max_bytes=1 << 20),
     r"/stream is larger than MediaPolicy\.max_bytes \(1048576 bytes\)", 3.0),
    ("/trickle", MediaPolicy(allow_private_addresses=True, timeout=0.5),
     r"/trickle took longer than MediaPolicy\.timeout \(0\.5 s\)", 1.5),
    ("/trickle-headers", MediaPolicy(allow_private_addresses=True, timeout=0.5),
     r"/trickle-headers took longer than MediaPolicy\.timeout \(0\.5 s\)", 1.5),
])
def test_an_oversized_or_slow_response_is_cut_off(server: Any, tiny_mtmd_model: Paths, valid_image: dict[str, Any],
                                                  path: str, policy: MediaPolicy, reason: str, within: float) -> None:
    """The server would go on for 5 s (or 10 MiB); the request ends at the policy's limit instead."""
    with open_llama(tiny_mtmd_model("gemma3"), policy) as llm:
        start = time.monotonic()
        with pytest.raises(ValueError, match=PART + r"\(image_url\): http://127\.0\.0\.1:\d+" + reason):
            ask(llm, image(f"{server.url}{path}"))
        assert time.monotonic() - start < within
        assert_still_serves(llm, valid_image)


# -- local files ----------------------------------------------------------------------------------------

def test_a_local_path_is_refused_by_the_server_policy_and_read_by_the_library_policy(
        tiny_mtmd_model: Paths, tiny_png: Callable[..., Path], gemma3: Llama, valid_image: dict[str, Any]) -> None:
    path = tiny_png(32, 32, seed=8)
    with open_llama(tiny_mtmd_model("gemma3"), MediaPolicy()) as strict:
        for reference in (str(path), path.as_uri()):
            with pytest.raises(ValueError, match=PART + r"\(image_url\): local files are not allowed"):
                ask(strict, image(reference))
        assert_still_serves(strict, valid_image)
    for reference in (str(path), path.as_uri()):  # Llama(mmproj_path=...): LIBRARY_POLICY
        assert ask(gemma3, image(reference))["usage"]["completion_tokens"] == N_TOKENS
    assert_idle(gemma3)


# -- unreadable media ---------------------------------------------------------------------------------

BROKEN_IMAGES = {
    "png signature, then garbage": (image(data_uri(b"\x89PNG\r\n\x1a\n" + b"garbage!" * 16)),
                                    r"\(image_url\): corrupt PNG: no IHDR chunk after the signature"),
    "data: URI not base64": (image("data:image/png,not-base64"),
                             r"\(image_url\): a data: URI must be base64"),
    "data: URI with bad base64": (image("data:image/png;base64,@@@@"),
                                  r"\(image_url\): data: URI is not valid base64"),
    "declared PNG, bytes JPEG": (image(data_uri(SAMPLES["jpeg"], "image/png")),
                                 r"\(image_url\): declared as image/png, but the bytes are JPEG"),
    "audio in an image part": (image(data_uri(SAMPLES["wav"])), r"\(image_url\): expected image, but .* is audio"),
}

BROKEN_AUDIO = {
    "wav declared, bytes unknown": (input_audio(b"this is not a RIFF file at all"),
                                    r"\(input_audio\): input_audio \(wav, 30 bytes\) is an unknown format; "
                                    r"audio must be WAV, MP3, FLAC"),
    "wav declared, bytes mp3": (input_audio(SAMPLES["mp3"]),
                                r"\(input_audio\): declared as wav, but the bytes are MP3"),
    "RIFF/WAVE without a fmt chunk": (input_audio(b"RIFF\x0c\x00\x00\x00WAVEjunk\x00\x00\x00\x00"),
                                      r"\(input_audio\): corrupt WAV: no fmt chunk"),
    "input_audio not base64": ({"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}},
                               r"\(input_audio\): data: URI is not valid base64"),
    "input_audio of an unknown format": (input_audio(SAMPLES["wav"], "aiff"),
                                         r"\(input_audio\): format 'aiff'; allowed: wav, mp3, flac"),
}


@pytest.mark.parametrize("case", list(BROKEN_IMAGES))
def test_a_broken_image_is_a_value_error_naming_the_part(gemma3: Llama, valid_image: dict[str, Any],
                                                         case: str) -> None:
    part, reason = BROKEN_IMAGES[case]
    with pytest.raises(ValueError, match=PART + reason):
        ask(gemma3, part)
    assert_still_serves(gemma3, valid_image)


@pytest.mark.parametrize("case", list(BROKEN_AUDIO))
def test_broken_audio_is_a_value_error_naming_the_part(qwen2a: Llama, valid_audio: dict[str, Any], case: str) -> None:
    part, reason = BROKEN_AUDIO[case]
    with pytest.raises(ValueError, match=PART + reason):
        ask(qwen2a, part)
    assert_still_serves(qwen2a, valid_audio)


@pytest.fixture
def no_external_decoders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ffprobe and ffmpeg first on PATH, as stand-ins that note each call and claim a one-frame video: were
    mtmd's video fallback reached, request bytes would go to them.  Returns the file they write to."""
    calls = tmp_path / "calls"
    for name in ("ffprobe", "ffmpeg"):
        program = tmp_path / name
        program.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            echo "$0" >> '{calls}'
            cat > /dev/null
            printf 'width=8\\nheight=8\\nr_frame_rate=1/1\\nnb_frames=1\\nduration=1.0\\n'
            """))
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    return calls


@pytest.mark.skipif(os.name != "posix", reason="the stand-in programs are shell scripts")
@pytest.mark.parametrize(("name", "parts", "reason"), [
    ("gemma3", [image(data_uri(png_with_idat(b"not zlib data")))],
     r"data: URI \(no media type, 70 bytes\): mtmd could not decode this PNG image"),
    ("gemma3", [image(data_uri(png_with_idat(zlib.compress(b"\x00" * 10))))],
     r"data: URI \(no media type, 68 bytes\): mtmd could not decode this PNG image"),
    ("gemma3", [image(data_uri(SAMPLES["gif"]))], r"data: URI \(no media type, 29 bytes\): mtmd could not decode "
                                                  r"this GIF image"),
    ("qwen2a", [input_audio(wav_bytes()[:20] + struct.pack("<H", 0x55) + wav_bytes()[22:])],  # format tag 0x55
     r"input_audio \(wav, 76 bytes\): mtmd could not decode this WAV audio"),
])
def test_media_that_passes_the_header_checks_but_not_mtmd_is_a_value_error(
        tiny_mtmd_model: Paths, valid_image: dict[str, Any], valid_audio: dict[str, Any], no_external_decoders: Path,
        name: str, parts: list[dict[str, Any]], reason: str) -> None:
    """mtmd's decoders refuse it (the message names the message, the part and the media's source); nothing
    crashes and mtmd's video fallback never hands the bytes to ffprobe or ffmpeg."""
    valid = valid_image if name == "gemma3" else valid_audio
    with open_llama(tiny_mtmd_model(name)) as llm:
        with pytest.raises(ValueError, match=r"messages\[0\] \(user\): content part \d, " + reason):
            ask(llm, *parts)
        # after a valid part, whose bitmap is freed with the error
        with pytest.raises(ValueError, match=r"messages\[0\] \(user\): content part \d, " + reason):
            ask(llm, valid, *parts)
        assert not no_external_decoders.exists()
        assert_still_serves(llm, valid)


# -- what the projector takes -------------------------------------------------------------------------

def test_a_media_kind_the_projector_does_not_take_is_refused(gemma3: Llama, qwen2a: Llama, server: Any,
                                                             valid_image: dict[str, Any],
                                                             valid_audio: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=PART + r"\(input_audio\): the model's projector does not take audio input; "
                                                r"it takes image$"):
        ask(gemma3, valid_audio)
    assert_still_serves(gemma3, valid_image)
    seen = len(server.requests)
    for part in (valid_image, image(f"{server.url}/png")):
        with pytest.raises(ValueError, match=PART + r"\(image_url\): the model's projector does not take image "
                                                    r"input; it takes audio$"):
            ask(qwen2a, part)
    assert len(server.requests) == seen  # refused before it was fetched
    assert_still_serves(qwen2a, valid_audio)


# -- projectors the bundled llama.cpp would abort on ---------------------------------------------------

ULTRAVOX_SCRIPT = """
import sys
from llama_cpp import Llama
from llama_cpp_multimodal import MTMDChatHandler

text, mmproj, wav = sys.argv[1:]
try:
    MTMDChatHandler(mmproj_path=mmproj, verbose=False, warmup=False)
except ValueError as exc:
    print("refused:", exc)
try:  # refused before the text model loads
    Llama(text, mmproj_path=mmproj, n_ctx=1024, n_threads=2, verbose=False,
          chat_handler_kwargs={"warmup": False, "verbose": False})
except ValueError as exc:
    print("refused:", exc)
"""


def test_an_ultravox_projector_that_would_abort_llama_cpp_is_refused(tiny_mtmd_model: Paths,
                                                                      tiny_wav: Callable[..., Path]) -> None:
    """Stack factor 8 makes the pinned mtmd abort the process when it encodes: the handler (and so
    ``Llama(mmproj_path=...)``) refuses the file with a ValueError when it is made, instead.  In a child process, so that a regression fails this test, not the session."""
    text, mmproj = tiny_mtmd_model("ultravox")
    child = subprocess.run([sys.executable, "-c", ULTRAVOX_SCRIPT, str(text), str(mmproj), str(tiny_wav(1.0))],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("refused: mmproj ") and "is not supported: its ultravox audio projector stacks " \
                                                         "frames by 8" in line
