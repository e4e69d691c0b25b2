"""A failed load says why: llama.cpp's own reason is in the exception, and quiet stays quiet.

llama.cpp only returns NULL and logs the reason; the reason is captured on
the calling thread and put into the ValueError.  With ``verbose=False`` it
is not printed as well.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp.testing import TinyLlamaSpec, write_tiny_lora


def _load_fails(path: Path, capfd: pytest.CaptureFixture[str], *reasons: str) -> str:
    capfd.readouterr()
    with pytest.raises(ValueError) as info:
        Llama(str(path), verbose=False)
    message = str(info.value)
    assert str(path) in message
    for reason in reasons:
        assert reason in message, message
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == "", "verbose=False printed llama.cpp's messages"
    return message


def test_truncated_file(tiny_model_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "truncated.gguf"
    data = tiny_model_path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _load_fails(path, capfd, "failed to load model", "tensor")


def test_corrupt_tensor_count(tiny_model_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad-count.gguf"
    shutil.copy(tiny_model_path, path)
    with open(path, "r+b") as fh:
        fh.seek(8)  # after the magic and the version: the int64 tensor count
        fh.write(struct.pack("<q", -1))
    _load_fails(path, capfd, "number of tensors is -1")


def test_unknown_architecture(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import gguf

    path = tmp_path / "frobnicator.gguf"
    writer = gguf.GGUFWriter(str(path), "frobnicator")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _load_fails(path, capfd, "unknown model architecture", "frobnicator")


def test_lora_of_another_model(tiny_model_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    other = write_tiny_lora(tmp_path / "lora-wide.gguf", TinyLlamaSpec(n_embd=128, n_head=8, n_head_kv=4))
    with Llama(str(tiny_model_path), n_ctx=64, verbose=False) as llm:
        capfd.readouterr()
        with pytest.raises(ValueError) as info:
            llm.load_lora("wide", other)
        message = str(info.value)
        assert "failed to load LoRA adapter 'wide'" in message
        assert "mismatch" in message or "shape" in message, message
        printed = capfd.readouterr()
        assert printed.out == "" and printed.err == ""


def test_verbose_prints_the_reason_too(tiny_model_path: Path, tmp_path: Path,
                                       capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad-count.gguf"
    shutil.copy(tiny_model_path, path)
    with open(path, "r+b") as fh:
        fh.seek(8)
        fh.write(struct.pack("<q", -1))
    capfd.readouterr()
    with pytest.raises(ValueError, match="number of tensors is -1"):
        Llama(str(path), verbose=True)
    assert "number of tensors is -1" in capfd.readouterr().err
