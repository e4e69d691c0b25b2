"""Where the llama.cpp source comes from, and the cache that holds it.

The pinned llama.cpp tree is the one vendored in the ``llama-cpp-python``
sdist on the package index: it is the only copy of llama.cpp that the package
index serves, and its sha256 pins every byte.  ``LLAMA_CPP_SOURCE_DIR`` points
at any other llama.cpp checkout instead.

This module is used in three places, so it only needs the standard library:
the build backend (before anything is compiled), the runtime tool builder
(``python -m llama_cpp_native build-tools``) and the test assets of
``llama_cpp.testing`` (the ``models/ggml-vocab-*.gguf`` tokenizer vectors).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

PINNED_REQUIREMENT = "llama-cpp-python==0.3.36"
PINNED_SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
PINNED_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The sdist's CHANGELOG names the llama.cpp commit it vendors; the tree has no
# git history, so llama.cpp's own build number cannot be recovered from it.
PINNED_COMMIT = "0c1e570"
_VENDOR_PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"

SOURCE_DIR_ENV = "LLAMA_CPP_SOURCE_DIR"
CACHE_DIR_ENV = "LLAMA_CPP_NATIVE_CACHE"


@dataclass(frozen=True)
class SourceTree:
    """A llama.cpp source tree and the build identity it carries."""

    path: Path
    commit: str
    number: int  # llama.cpp's build number (git commit count); 0 when unknown
    pinned: bool  # True for the sdist-vendored tree this package pins

    def describe(self) -> str:
        number = f"b{self.number}" if self.number else "b?"
        return f"{number} ({self.commit})"


def cache_root() -> Path:
    """The per-user cache for sources and builds (``LLAMA_CPP_NATIVE_CACHE`` overrides)."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "llama-cpp-native"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _without_build_hook_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables through which pip hands a build backend its name and
    ``backend-path``.  This runs inside the native layer's own build, so they name *its* backend; the pip
    started here would pass them on to the sdist's metadata hook, which then refuses to load
    scikit-build-core from anywhere but ``native/build_support`` and the download fails on a machine
    whose cache does not hold the sdist yet."""
    return {name: value for name, value in environ.items()
            if not name.startswith(("_PYPROJECT_HOOKS_", "PEP517_"))}


def _download_pinned_sdist(dest_dir: Path) -> Path:
    """Fetch the pinned sdist with pip and verify its sha256."""
    target = dest_dir / PINNED_SDIST_NAME
    if target.exists() and sha256_file(target) == PINNED_SDIST_SHA256:
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps",
            "--no-binary", "llama-cpp-python", "--disable-pip-version-check",
            PINNED_REQUIREMENT, "-d", tmp,
        ]
        # pip prepares an sdist's metadata before saving it; without isolation
        # that needs the sdist's own backend, so only skip isolation when it is
        # importable (saves installing cmake into a throwaway environment).
        try:
            import scikit_build_core  # noqa: F401

            cmd.insert(5, "--no-build-isolation")
        except ImportError:
            pass
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_without_build_hook_settings(os.environ))
        fetched = Path(tmp) / PINNED_SDIST_NAME
        if proc.returncode != 0 or not fetched.exists():
            raise RuntimeError(
                f"could not download {PINNED_REQUIREMENT} from the package index "
                f"(set {SOURCE_DIR_ENV} to a llama.cpp checkout to build offline):\n{proc.stdout}"
            )
        actual = sha256_file(fetched)
        if actual != PINNED_SDIST_SHA256:
            raise RuntimeError(
                f"{PINNED_SDIST_NAME} has sha256 {actual}, expected {PINNED_SDIST_SHA256}; "
                "refusing to build from an unverified llama.cpp source"
            )
        os.replace(fetched, target)
    return target


def _extract_vendor_tree(sdist: Path, dest: Path) -> None:
    """Extract ``vendor/llama.cpp`` only, refusing links and paths that leave ``dest``."""
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar.getmembers():
                if not member.name.startswith(_VENDOR_PREFIX):
                    continue
                rel = member.name[len(_VENDOR_PREFIX):]
                if not rel or rel.startswith("/") or ".." in Path(rel).parts:
                    continue
                out = tmp / rel
                if member.isdir():
                    out.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)  # a regular file's is never None
                    if source is None:
                        continue
                    with source as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    if member.mode & 0o111:
                        out.chmod(0o755)
        try:
            os.replace(tmp, dest)
        except OSError:
            if not (dest / "include" / "llama.h").exists():  # lost a race only if dest is complete
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _git(path: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def pinned_source() -> SourceTree:
    """The pinned tree, downloaded and extracted into the cache on first use."""
    root = cache_root()
    dest = root / "src" / f"llama.cpp-{PINNED_SDIST_SHA256[:12]}"
    if not (dest / "include" / "llama.h").exists():
        sdist = _download_pinned_sdist(root / "downloads")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _extract_vendor_tree(sdist, dest)
    return SourceTree(path=dest, commit=PINNED_COMMIT, number=0, pinned=True)


def source_tree() -> SourceTree:
    """The tree to build: ``LLAMA_CPP_SOURCE_DIR`` when set, else the pinned one."""
    override = os.environ.get(SOURCE_DIR_ENV)
    if not override:
        return pinned_source()
    path = Path(override).expanduser().resolve()
    if not (path / "include" / "llama.h").is_file() or not (path / "CMakeLists.txt").is_file():
        raise FileNotFoundError(f"{SOURCE_DIR_ENV}={override} is not a llama.cpp source tree (no include/llama.h)")
    commit = _git(path, "rev-parse", "--short", "HEAD") or "unknown"
    count = _git(path, "rev-list", "--count", "HEAD")
    return SourceTree(path=path, commit=commit, number=int(count) if count else 0, pinned=False)
