"""Pack what the bench needs on a GPU machine that reaches no network, in two loads the device tool carries.

The device tool carries at most 64 MiB per call (the working tree included), and SmolLM2's GGUF alone is
94 MiB, so the loads are two folders, each for one call (``benchmarks/device/cuda_bench.sh`` says which):

- ``.device/first``: the pinned llama.cpp source (what CMake reads of it, and the vocabulary the tiny model is
  written with there, xz-compressed), the wheels the machine's Python 3.12 lacks (ours, built here, and the
  server's, cffi's and gguf's from the package index), and the first part of SmolLM2;
- ``.device/second``: the rest of SmolLM2.

Run from the repository root in an environment where the project is installed (``nox -s bench``'s, or any
``pip install .``): ``python benchmarks/device/prepare.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from llama_cpp.default_model import smollm2_path
from llama_cpp.testing import TinyLlamaSpec
from llama_cpp_native._source import source_tree

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".device"
CALL_LIMIT = 64 << 20  # what one call of the device tool carries, the working tree included
MARGIN = 2 << 20
PYTHON = "3.12"  # the device image's python3
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# What the image lacks of the runtime dependencies of the core, the plugins, the server (fastapi imports
# opentelemetry's API) and the build
# (cffi) and of the tiny model's writer (gguf); numpy, pluggy, attrs, jinja2, httpx, pyyaml, requests, tqdm,
# click, h11 and anyio are there.
THIRD_PARTY = ("cffi", "pycparser", "gguf", "fastapi", "starlette", "pydantic", "pydantic-core", "pydantic-settings",
               "python-dotenv", "typing-inspection", "annotated-types", "typing-extensions", "uvicorn",
               "opentelemetry-api")
OURS = ("core", *sorted(str(p.parent.relative_to(ROOT)) for p in ROOT.glob("plugins/*/pyproject.toml")),
        "contrib/server")
# Parts of the llama.cpp tree that no CUDA build of the libraries, tools or server reads.
SOURCE_SKIPPED = ("models", "docs", "media", "tests", "benches", ".github", "ci", "gguf-py",
                  "tools/server/webui", "ggml/src/ggml-vulkan", "ggml/src/ggml-sycl", "ggml/src/ggml-opencl",
                  "ggml/src/ggml-metal", "ggml/src/ggml-hexagon", "ggml/src/ggml-cann", "ggml/src/ggml-musa",
                  "ggml/src/ggml-webgpu", "ggml/src/ggml-zdnn", "ggml/src/ggml-et", "ggml/src/ggml-hip")


def _installed_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def pack_source(dest: Path) -> None:
    tree = source_tree().path
    vocab = f"models/ggml-vocab-{TinyLlamaSpec().vocab}.gguf"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        relative = Path(info.name).relative_to("llama.cpp").as_posix() if info.name != "llama.cpp" else ""
        if relative in ("models", vocab):
            return info
        return None if any(relative == s or relative.startswith(s + "/") for s in SOURCE_SKIPPED) else info

    with tarfile.open(dest, "w:xz", preset=6) as archive:
        archive.add(tree, arcname="llama.cpp", filter=keep)


def pack_wheels(folder: Path) -> None:
    folder.mkdir(parents=True)
    _pip("wheel", "--no-deps", "--no-cache-dir", "-w", str(folder), *(str(ROOT / p) for p in OURS))
    pins = [f"{name}=={_installed_version(name)}" for name in THIRD_PARTY]
    platforms = [f"--platform={p}" for p in PLATFORMS]
    _pip("download", "--no-deps", "--only-binary=:all:", f"--python-version={PYTHON}", "--implementation=cp",
         *platforms, "-d", str(folder), *pins)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    first, second = OUT / "first", OUT / "second"
    first.mkdir(parents=True)
    second.mkdir()
    pack_source(first / "llama.cpp.tar.xz")
    pack_wheels(first / "wheels")
    used = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    tree = int(subprocess.run(["sh", "-c", "git ls-files -z | xargs -0 cat | wc -c"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout)
    room = CALL_LIMIT - MARGIN - tree - used
    data = smollm2_path(quiet=True).read_bytes()
    if len(data) - room > CALL_LIMIT - MARGIN - tree:
        sys.exit(f"SmolLM2 does not fit in two loads: {room} bytes are left in the first")
    (first / "smollm2.part1").write_bytes(data[:room])
    (second / "smollm2.part2").write_bytes(data[room:])
    for folder in (first, second):
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{folder.relative_to(ROOT)}: {size / 2**20:.1f} MiB (+ {tree / 2**20:.1f} MiB of working tree)")


if __name__ == "__main__":
    main()
