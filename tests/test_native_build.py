"""The native layer: import anywhere, build identity, refusal of a foreign build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp_native


def _python(code: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_import_from_any_directory(tmp_path: Path) -> None:
    proc = _python("import llama_cpp_native as n; print(n.lib_dir); print(n.system_info())", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lib_dir = Path(proc.stdout.splitlines()[0])
    assert (lib_dir / next(iter(os.listdir(lib_dir)))).exists()
    # the libraries are the installed copies, found through the rpath, not the build tree
    assert lib_dir == llama_cpp_native.lib_dir
    assert "CPU" in proc.stdout


def test_build_identity_and_api_surface() -> None:
    info = llama_cpp_native.BUILD_INFO
    assert info["llama_commit"]
    assert llama_cpp_native.build_description().endswith(f"({info['llama_commit']})")
    lib, ffi = llama_cpp_native.lib, llama_cpp_native.ffi
    assert ffi.string(lib.ggml_version()).decode() == info["ggml_version"]
    # the whole API is there: llama, ggml, gguf and mtmd functions
    for name in ("llama_model_load_from_file", "llama_decode", "ggml_backend_dev_count",
                 "gguf_init_from_file", "mtmd_init_from_file", "mtmd_helper_eval_chunks"):
        assert hasattr(lib, name), name
    # a declared but unexported function was dropped instead of breaking the import
    for name in info["unexported_functions"]:
        assert not hasattr(lib, name)
    assert lib.LLAMA_DEFAULT_SEED == 0xFFFFFFFF
    assert lib.LLAMA_TOKEN_NULL == -1


def test_no_library_search_path_needed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"}}
    proc = _python("import llama_cpp_native as n; n.lib.llama_backend_init(); print('ok')", tmp_path, env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_libraries_of_another_build_are_refused(tmp_path: Path) -> None:
    """An extension next to libraries of another build fails at import, naming both builds."""
    copy = tmp_path / "site" / "llama_cpp_native"
    shutil.copytree(llama_cpp_native.lib_dir.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    info_file = copy / "_build_info.py"
    text = info_file.read_text()
    real = llama_cpp_native.BUILD_INFO["ggml_commit"]
    info_file.write_text(text.replace(f"'ggml_commit': {real!r}", "'ggml_commit': 'feedbee'"))
    env = dict(os.environ, PYTHONPATH=str(copy.parent))
    proc = _python("import llama_cpp_native", tmp_path, env)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    assert "feedbee" in proc.stderr and real in proc.stderr
