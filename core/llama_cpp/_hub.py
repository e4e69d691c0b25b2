"""``Llama.from_pretrained``: fetch a GGUF file from the Hugging Face Hub, then load it.

``huggingface_hub`` is an optional dependency, imported only when a model is
fetched, so that ``import llama_cpp`` never needs it.

The repository is listed on the Hub when it can be reached.  Offline
(``HF_HUB_OFFLINE=1``) or when the Hub cannot be reached, the files of the
repository's snapshot in the local cache (or in ``local_dir``) are listed
instead and nothing is downloaded, so a model fetched once keeps loading
without a network.
"""

from __future__ import annotations

import fnmatch
import inspect
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple, TypeVar

_Loaded = TypeVar("_Loaded")

# llama.cpp's gguf-split names shards "<prefix>-00001-of-00003.gguf" and loads a
# split model from its first shard, finding the others next to it by name.
_SHARD_NAME = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")

_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub accepts for HF_HUB_OFFLINE

# per HTTP client module, its exceptions for a server that could not be reached
_CLIENT_UNREACHABLE_ERRORS = {
    "requests": ("ConnectionError", "Timeout"),
    "httpx": ("TransportError",),
    "httpx2": ("TransportError",),
}


class RepoFiles(NamedTuple):
    """The files of a repository and whether they may only be taken from local storage."""

    names: list[str]
    local_only: bool


def from_pretrained(
    load: Callable[..., _Loaded],
    /,
    repo_id: str,
    filename: str,
    additional_files: list[str] | None = None,
    local_dir: str | None = None,
    local_dir_use_symlinks: bool | str = "auto",
    cache_dir: str | None = None,
    **kwargs: Any,
) -> _Loaded:
    """Download as ``Llama.from_pretrained`` says and return ``load(model_path=<the file>, **kwargs)``: ``load``
    is the class, or anything that takes a model path (the tests' recorder)."""
    paths = hub_download(repo_id, filename, additional_files, local_dir=local_dir,
                         local_dir_use_symlinks=local_dir_use_symlinks, cache_dir=cache_dir)
    return load(model_path=paths[0], **kwargs)


def hub_download(repo_id: str, filename: str, additional_files: list[str] | None = None, *,
                 local_dir: str | None = None, local_dir_use_symlinks: bool | str = "auto",
                 cache_dir: str | None = None) -> list[str]:
    """The local paths of the file of ``repo_id`` matching the glob ``filename`` (every shard of a split
    model) and of ``additional_files``, downloaded as ``from_pretrained`` says (also for plugins' own
    ``from_pretrained``, such as the multimodal handlers')."""
    hf_hub_download = _import_hf_hub_download()
    repo = _list_repo_files(repo_id, local_dir=local_dir, cache_dir=cache_dir)
    wanted = shard_set(match_one(repo_id, filename, repo.names), repo.names)
    wanted += [match_one(repo_id, pattern, repo.names) for pattern in additional_files or []]
    options = _download_options(hf_hub_download, local_dir, local_dir_use_symlinks, cache_dir, repo.local_only)
    return [hf_hub_download(repo_id=repo_id, filename=name, **options) for name in wanted]


def _import_hf_hub_download() -> Any:
    """``huggingface_hub.hf_hub_download``, or an ImportError saying how to install it."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as error:
        raise ImportError(
            "Llama.from_pretrained needs the huggingface_hub package: pip install huggingface_hub"
        ) from error
    return hf_hub_download


def match_one(repo_id: str, pattern: str, names: list[str]) -> str:
    """The one file of ``names`` that the fnmatch glob ``pattern`` matches; ValueError otherwise.

    A glob matching several files is refused rather than guessed at, since
    picking one (say, the wrong quantisation) would silently load another model.
    """
    matches = fnmatch.filter(names, pattern)
    if not matches:
        raise ValueError(f"no file of {repo_id} matches {pattern!r}; its files are: {', '.join(sorted(names))}")
    if len(matches) > 1:
        raise ValueError(f"{len(matches)} files of {repo_id} match {pattern!r}, one is needed: "
                         f"{', '.join(sorted(matches))}")
    return matches[0]


def shard_set(name: str, names: list[str]) -> list[str]:
    """The files to fetch for the model file ``name``: itself, or all shards when it is shard 1 of N.

    Shard 1 comes first, as llama.cpp loads a split model from it.  Another
    shard than the first, or a shard missing from ``names``, raises ValueError:
    either would only fail later, inside llama.cpp, with a vaguer message.
    """
    shard = _SHARD_NAME.match(name)
    if shard is None:
        return [name]
    prefix, index, count = shard["prefix"], int(shard["index"]), int(shard["count"])
    first = f"{prefix}-00001-of-{count:05d}.gguf"
    if index != 1:
        raise ValueError(f"{name!r} is shard {index} of {count}; llama.cpp loads a split model from "
                         f"its first shard, {first!r}, so match that one instead")
    shards = [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [s for s in shards if s not in names]
    if missing:
        raise ValueError(f"{name!r} is split into {count} shards, but these are missing: {', '.join(missing)}")
    return shards


def _list_repo_files(repo_id: str, *, local_dir: str | None, cache_dir: str | None) -> RepoFiles:
    """The files of ``repo_id``: from the Hub, or from local storage when offline or unreachable.

    Only a Hub that could not be reached falls back to local storage; a Hub
    that answered with an error (no such repository, no access) is reported.
    """
    from huggingface_hub import HfApi

    if _offline():
        return _stored_repo_files(repo_id, local_dir=local_dir, cache_dir=cache_dir)
    try:
        return RepoFiles(HfApi().list_repo_files(repo_id), local_only=False)
    except _unreachable_errors():
        # raised here, a "nothing stored" error is chained to the connection error
        return _stored_repo_files(repo_id, local_dir=local_dir, cache_dir=cache_dir)


def _offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set.

    huggingface_hub reads the variable once, at import; reading it here too
    honours a value set later (a test, a notebook cell).
    """
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE_VALUES


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exceptions meaning the Hub could not be reached, for the installed huggingface_hub.

    ``OfflineModeIsEnabled`` is a ``ConnectionError``; the HTTP client raises
    its own: requests' ``ConnectionError`` and ``Timeout`` (huggingface_hub
    0.x), httpx's or httpx2's ``TransportError`` (1.x, 2.x).  Their HTTP
    *status* errors are not among them: those mean the Hub answered.
    """
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module_name, names in _CLIENT_UNREACHABLE_ERRORS.items():
        module = sys.modules.get(module_name)  # the client huggingface_hub uses is imported by now
        errors += [getattr(module, name) for name in names if hasattr(module, name)]
    return tuple(errors)


def _stored_repo_files(repo_id: str, *, local_dir: str | None, cache_dir: str | None) -> RepoFiles:
    """The files of ``repo_id`` already stored: ``local_dir``, or the cached snapshot of ``main``.

    Paths are relative and use ``/``, as the Hub lists them; the metadata
    huggingface_hub keeps in ``local_dir/.cache`` is left out.
    """
    from huggingface_hub import snapshot_download

    root = Path(snapshot_download(repo_id, local_dir=local_dir, cache_dir=cache_dir, local_files_only=True))
    names = (path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
    return RepoFiles(sorted(name for name in names if not name.startswith(".cache/")), local_only=True)


def _download_options(hf_hub_download: Any, local_dir: str | None, local_dir_use_symlinks: bool | str,
                      cache_dir: str | None, local_only: bool) -> dict[str, Any]:
    """Keyword arguments for ``hf_hub_download`` that the installed version accepts.

    ``local_dir_use_symlinks`` was deprecated in huggingface_hub 0.23 and later
    removed; where it is gone, files in ``local_dir`` are always real copies,
    so a non-default value is ignored with a warning rather than an error.
    """
    options: dict[str, Any] = {"local_dir": local_dir, "cache_dir": cache_dir, "local_files_only": local_only}
    if "local_dir_use_symlinks" in inspect.signature(hf_hub_download).parameters:
        options["local_dir_use_symlinks"] = local_dir_use_symlinks
    elif local_dir_use_symlinks != "auto":
        warnings.warn("local_dir_use_symlinks is ignored: the installed huggingface_hub no longer accepts it",
                      UserWarning, stacklevel=3)
    return options
