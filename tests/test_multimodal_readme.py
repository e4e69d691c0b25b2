"""The seed README's multimodal examples, run as written against the tiny models: only the file paths
(``MODEL_PATH``, ``MMPROJ_PATH`` and the media) are the tiny ones.  Each prints its reply, as the README does."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

import pytest

Paths = Callable[[str], "tuple[Path, Path]"]


@pytest.fixture
def image_dir(tiny_png: Callable[..., Path], tmp_path: Path) -> Path:
    """The README's ``path/to/image.jpg`` and ``./scene.jpeg``, ``./cat.png``... (PNG bytes: mtmd reads the
    content, not the name)."""
    for name in ("image.jpg", "scene.png", "cat.png"):
        (tmp_path / name).write_bytes(tiny_png(64, 64, seed=len(name)).read_bytes())
    return tmp_path


def test_generic_handler_through_mmproj_path(tiny_mtmd_model: Paths, image_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from llama_cpp import Llama

    MODEL_PATH, MMPROJ_PATH = map(str, tiny_mtmd_model("gemma3"))
    llm = Llama(
        model_path=MODEL_PATH,
        mmproj_path=MMPROJ_PATH,
        n_gpu_layers=-1,
        n_ctx=10240,
        verbose=True,
        verbosity=2,
        chat_handler_kwargs={
            "verbose": True,
        },
    )
    response = llm.create_chat_completion(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": str(image_dir / "image.jpg"),
                        },
                    },
                    {
                        "type": "text",
                        "text": "Describe this image in detail.",
                    },
                ],
            }
        ],
        max_tokens=16,  # (a random model may never stop: the README's call, bounded)
    )
    print(response["choices"][0]["message"]["content"])
    assert response["choices"][0]["message"]["role"] == "assistant"
    assert llm.scheduler.counters.n_media_evaluated == 1
    llm.close()


def test_extra_template_arguments_and_named_template(tiny_mtmd_model: Paths, image_dir: Path) -> None:
    from llama_cpp import Llama

    MODEL_PATH, MMPROJ_PATH = map(str, tiny_mtmd_model("gemma3"))
    llm = Llama(
        model_path=MODEL_PATH,
        mmproj_path=MMPROJ_PATH,
        n_gpu_layers=-1,
        n_ctx=10240,
        verbose=False,
        verbosity=1,
        chat_handler_kwargs={
            "extra_template_arguments": {
                "enable_thinking": True,
            },
            "verbose": False,
        },
    )
    assert llm.chat_handler.extra_template_arguments == {"enable_thinking": True}
    llm.close()
    llm = Llama(
        model_path=MODEL_PATH,
        mmproj_path=MMPROJ_PATH,
        # chat_template_name="default",
        n_gpu_layers=-1,
        n_ctx=4096,
        chat_handler_kwargs={
            "verbose": False,
        },
    )
    reply = llm.create_chat_completion(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": str(image_dir / "image.jpg")}}, {"type": "text", "text": "Hi"}]}],
        max_tokens=4)
    assert reply["usage"]["completion_tokens"] <= 4
    llm.close()


def test_dedicated_handler_paddleocr(tiny_mtmd_model: Paths, image_dir: Path) -> None:
    from llama_cpp import Llama
    from llama_cpp.llama_multimodal import PaddleOCRChatHandler

    MODEL_PATH, MMPROJ_PATH = map(str, tiny_mtmd_model("mlp"))
    llm = Llama(
        model_path=MODEL_PATH,
        chat_handler=PaddleOCRChatHandler(
            mmproj_path=MMPROJ_PATH,
        ),
        n_gpu_layers=-1,  # Use all available GPU layers
        n_ctx=0,  # Context window size
        n_batch=2048,
    )
    reply = llm.create_chat_completion(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": str(image_dir / "image.jpg")}}, {"type": "text", "text": "OCR:"}]}],
        max_tokens=4)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    llm.close()


def test_qwen3vl_with_local_images_as_data_uris(tiny_mtmd_model: Paths, image_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_cpp import Llama
    from llama_cpp.llama_multimodal import Qwen3VLChatHandler

    monkeypatch.chdir(image_dir)
    MODEL_PATH, MMPROJ_PATH = map(str, tiny_mtmd_model("qwen2vl_merger"))
    llm = Llama(
        model_path=MODEL_PATH,
        chat_handler=Qwen3VLChatHandler(
            clip_model_path=MMPROJ_PATH,
            force_reasoning=True,
            image_min_tokens=1024,
        ),
        n_gpu_layers=-1,
        n_ctx=10240,
        swa_full=True,
    )
    _IMAGE_MIME_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}

    def image_to_base64_data_uri(file_path: str, *, fallback_mime: str = "application/octet-stream") -> str:
        if not os.path.isfile(file_path):
            raise FileNotFoundError(f"Image file not found: {file_path}")
        extension = os.path.splitext(file_path)[1].lower()
        mime_type = _IMAGE_MIME_TYPES.get(extension, fallback_mime)
        with open(file_path, "rb") as img_file:
            encoded_data = base64.b64encode(img_file.read()).decode("utf-8")
        return f"data:{mime_type};base64,{encoded_data}"

    image_paths = [r"./scene.png", r"./cat.png"]
    images_messages = []
    for path in image_paths:
        data_uri = image_to_base64_data_uri(path)
        images_messages.append({"type": "image_url", "image_url": {"url": data_uri}})
    images_messages.append({"type": "text", "text": "Describes the images."})
    res = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": "You are a highly accurate vision-language assistant. Provide detailed, "
                                          "precise, and well-structured image descriptions."},
            {"role": "user", "content": images_messages},
        ],
        max_tokens=8,
    )
    print(res["choices"][0]["message"]["content"])
    # image_min_tokens=1024 reached mtmd: each image is scaled up to at least 1024 tokens
    assert res["usage"]["prompt_tokens"] > 2 * 1024
    llm.close()


def test_qwen3_asr_with_input_audio(tiny_mtmd_model: Paths, tiny_wav: Callable[..., Path]) -> None:
    from llama_cpp import Llama
    from llama_cpp.llama_multimodal import Qwen3ASRChatHandler

    MODEL_PATH, MMPROJ_PATH = map(str, tiny_mtmd_model("qwen2a"))
    llm = Llama(
        model_path=MODEL_PATH,
        chat_handler=Qwen3ASRChatHandler(
            clip_model_path=MMPROJ_PATH,
            verbose=False,
        ),
        n_gpu_layers=-1,
        n_ctx=10240,
        verbose=False,
        verbosity=0,
    )
    _MEDIA_MIME_TYPES = {".wav": ("audio", "wav"), ".mp3": ("audio", "mp3")}

    def build_media_payload(file_path: str) -> dict:
        if not os.path.isfile(file_path):
            raise FileNotFoundError(f"Media file not found: {file_path}")
        extension = os.path.splitext(file_path)[1].lower()
        media_category, mime_or_format = _MEDIA_MIME_TYPES.get(extension, ("unknown", "application/octet-stream"))
        with open(file_path, "rb") as f:
            encoded_data = base64.b64encode(f.read()).decode("utf-8")
        if media_category == "audio":
            return {"type": "input_audio", "input_audio": {"data": encoded_data, "format": mime_or_format}}
        return {"type": "text", "text": f"[Attached unsupported file: {file_path}]"}

    media_paths = [str(tiny_wav(1.0))]
    user_content = [build_media_payload(path) for path in media_paths]
    response = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": (
                "You are an advanced multilingual Speech-to-Text model. "
                "Accurately transcribe the audio into text in its original spoken language. ")},
            {"role": "user", "content": user_content},
        ],
        temperature=1.0,
        top_p=0.95,
        top_k=64,
        max_tokens=32,  # (the README's 10240, bounded for a random model)
    )
    print(f"Transcribe: {response['choices'][0]['message']['content']}")
    assert response["usage"]["prompt_tokens"] > 750  # the 30 s window of audio embeddings
    llm.close()
