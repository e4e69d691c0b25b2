"""``Llama.from_pretrained`` against a Hugging Face cache built on disk.

These machines cannot reach the Hub, so every test runs offline (or with an
unreachable Hub) against a cache laid out exactly as huggingface_hub lays it
out: ``models--<org>--<name>/refs/main`` holds the commit, and
``snapshots/<commit>/<file>`` links to ``blobs/<sha256>``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama, _hub

REPO_ID = "tiny-org/tiny-llama-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHARD_1 = "split/tiny-00001-of-00002.gguf"
SHARD_2 = "split/tiny-00002-of-00002.gguf"


def _add_file(snapshot: Path, name: str, data: bytes) -> None:
    """Store ``data`` as a blob and link ``snapshot/name`` to it, relatively, as huggingface_hub does."""
    blob = snapshot.parent.parent / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = snapshot / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path(*[".."] * (len(Path(name).parts) + 1), "blobs", blob.name))


@pytest.fixture
def hub_cache(tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline Hugging Face cache holding REPO_ID: two quantisations, a split model and a README."""
    pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hub"
    storage = cache / f"models--{REPO_ID.replace('/', '--')}"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    snapshot = storage / "snapshots" / COMMIT
    model = tiny_model_path.read_bytes()
    _add_file(snapshot, "tiny.Q8_0.gguf", model)
    _add_file(snapshot, "tiny.Q4_0.gguf", model)
    _add_file(snapshot, SHARD_1, model)
    _add_file(snapshot, SHARD_2, b"GGUF second shard")
    _add_file(snapshot, "README.md", b"# tiny llama\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def downloads(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``hf_hub_download`` call, which still runs."""
    import huggingface_hub

    calls: list[dict[str, Any]] = []
    real = huggingface_hub.hf_hub_download

    def recording(**kwargs: Any) -> str:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", recording)
    return calls


class Recorder:
    """Stands in for ``Llama`` where a model is fetched but cannot be loaded (the fake split shards)."""

    def __init__(self, model_path: str, **kwargs: Any) -> None:
        self.model_path = model_path
        self.kwargs = kwargs


def test_glob_matching_one_file_loads_a_working_model(hub_cache: Path) -> None:
    with Llama.from_pretrained(REPO_ID, "*Q8_0.gguf", cache_dir=str(hub_cache),
                              verbose=False, n_ctx=128) as llm:
        assert Path(llm.model_path).name == "tiny.Q8_0.gguf"
        assert COMMIT in Path(llm.model_path).parts
        assert llm.tokenize(b"hello world")
        assert llm.create_completion("hello", max_tokens=2, temperature=0.0)["choices"][0]["text"] is not None


def test_glob_matching_nothing_lists_the_repository(hub_cache: Path) -> None:
    with pytest.raises(ValueError, match=r"no file of .* matches '\*Q5_K_M\.gguf'.*README\.md.*tiny\.Q8_0\.gguf"):
        Llama.from_pretrained(REPO_ID, "*Q5_K_M.gguf", cache_dir=str(hub_cache))


def test_glob_matching_two_files_names_both(hub_cache: Path) -> None:
    with pytest.raises(ValueError, match=r"2 files of .* match 'tiny\.Q\*\.gguf'.*tiny\.Q4_0\.gguf, tiny\.Q8_0\.gguf"):
        Llama.from_pretrained(REPO_ID, "tiny.Q*.gguf", cache_dir=str(hub_cache))


def test_shard_set_of_the_first_shard_is_every_shard() -> None:
    names = ["README.md", SHARD_1, SHARD_2]
    assert _hub.shard_set(SHARD_1, names) == [SHARD_1, SHARD_2]
    assert _hub.shard_set("tiny.Q8_0.gguf", names + ["tiny.Q8_0.gguf"]) == ["tiny.Q8_0.gguf"]


def test_shard_set_refuses_a_later_shard_or_a_missing_one() -> None:
    with pytest.raises(ValueError, match=r"shard 2 of 2.*'split/tiny-00001-of-00002\.gguf'"):
        _hub.shard_set(SHARD_2, [SHARD_1, SHARD_2])
    with pytest.raises(ValueError, match=r"missing: split/tiny-00002-of-00002\.gguf"):
        _hub.shard_set(SHARD_1, [SHARD_1])


def test_first_shard_fetches_every_shard_and_loads_the_first(hub_cache: Path,
                                                             downloads: list[dict[str, Any]]) -> None:
    model = _hub.from_pretrained(Recorder, REPO_ID, "*-00001-of-*.gguf", cache_dir=str(hub_cache), n_ctx=128)
    assert [call["filename"] for call in downloads] == [SHARD_1, SHARD_2]
    assert Path(model.model_path).as_posix().endswith(f"{COMMIT}/{SHARD_1}")
    assert model.kwargs == {"n_ctx": 128}


def test_additional_files_are_fetched_too(hub_cache: Path, downloads: list[dict[str, Any]]) -> None:
    _hub.from_pretrained(Recorder, REPO_ID, "*Q8_0.gguf", additional_files=["README*"], cache_dir=str(hub_cache))
    assert [call["filename"] for call in downloads] == ["tiny.Q8_0.gguf", "README.md"]
    with pytest.raises(ValueError, match=r"no file of .* matches 'LICENSE'"):
        _hub.from_pretrained(Recorder, REPO_ID, "*Q8_0.gguf", additional_files=["LICENSE"], cache_dir=str(hub_cache))


def test_unreachable_hub_falls_back_to_the_cache(hub_cache: Path, downloads: list[dict[str, Any]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def unreachable(self: Any, repo_id: str, **kwargs: Any) -> list[str]:
        raise ConnectionError("network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", unreachable)
    model = _hub.from_pretrained(Recorder, REPO_ID, "*Q4_0.gguf", cache_dir=str(hub_cache))
    assert Path(model.model_path).name == "tiny.Q4_0.gguf"
    assert [call["local_files_only"] for call in downloads] == [True]


def test_hub_errors_other_than_unreachable_are_raised(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def refused(self: Any, repo_id: str, **kwargs: Any) -> list[str]:
        raise PermissionError(f"{repo_id} is gated")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", refused)
    with pytest.raises(PermissionError, match="gated"):
        _hub.from_pretrained(Recorder, REPO_ID, "*Q4_0.gguf", cache_dir=str(hub_cache))


def test_uncached_repository_offline_is_a_file_not_found(hub_cache: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _hub.from_pretrained(Recorder, "tiny-org/never-downloaded", "*.gguf", cache_dir=str(hub_cache))


def test_missing_huggingface_hub_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    with pytest.raises(ImportError, match="pip install huggingface_hub"):
        Llama.from_pretrained(REPO_ID, "*.gguf")
