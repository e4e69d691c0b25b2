"""The distributions of the repository: the umbrella is ``llama-cpp-python`` 0.3.x, so integrations' pins
(``llama-cpp-python>=0.3,<0.4``) take it; every distribution has that version and pins its siblings to it;
the reference's ``[server]`` and ``[all]`` extras resolve; and pip's ``-C cmake.args=...`` reaches the
native build as ``CMAKE_ARGS`` does, also through the umbrella (pip gives ``-C`` to the umbrella only).

A real build with a new CMake argument compiles llama.cpp anew (its build cache is keyed on the arguments:
about ten minutes on two cores), so the tests follow the arguments up to the ``CMAKE_ARGS`` that the build
reads (and records in ``BUILD_INFO["cmake_args"]``), not through CMake.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
BUILD_SUPPORT = ROOT / "native" / "build_support"
PROJECTS = ["", "native", "core", "contrib/server", *sorted(f"plugins/{p.name}" for p in (ROOT / "plugins").iterdir()
                                                          if (p / "pyproject.toml").exists())]


def project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]


def package_version() -> str:
    """``llama_cpp.__version__`` as the source says it (the installed metadata may be older)."""
    text = (ROOT / "core" / "llama_cpp" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE).group(1)


def test_the_umbrella_is_llama_cpp_python_and_satisfies_the_integrations_pins() -> None:
    umbrella = project("")
    assert canonicalize_name(umbrella["name"]) == "llama-cpp-python"  # else pip still pulls the reference
    assert umbrella["version"] == package_version()
    assert SpecifierSet(">=0.3,<0.4").contains(umbrella["version"])  # llama-index-llms-llama-cpp's pin


def test_every_distribution_has_the_version_and_pins_its_siblings_to_it() -> None:
    version = package_version()
    names = {canonicalize_name(project(folder)["name"]) for folder in PROJECTS}
    for folder in PROJECTS:
        meta = project(folder)
        assert meta["version"] == version, folder
        requirements = [*meta.get("dependencies", []),
                        *[r for extra in meta.get("optional-dependencies", {}).values() for r in extra]]
        for text in requirements:
            requirement = Requirement(text.replace("{root:uri}", "file:///root"))
            if canonicalize_name(requirement.name) in names and not requirement.url:
                assert str(requirement.specifier) == f"=={version}" or folder == "" and not requirement.specifier, \
                    f"{folder}: {text}"


def test_the_reference_extras_are_declared() -> None:
    extras = project("")["optional-dependencies"]
    assert [Requirement(r.replace("{root:uri}", "file:///root")).name for r in extras["server"]] == ["llama-cpp-server"]
    assert extras["all"] == ["llama-cpp-python[server,test]"]


# -- pip's -C cmake.args -----------------------------------------------------------------------------------
def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cmake_config() -> ModuleType:
    return _load(BUILD_SUPPORT / "cmake_config.py", "cmake_config")


def test_cmake_args_are_read_as_scikit_build_core_writes_them(cmake_config: ModuleType) -> None:
    assert cmake_config.from_pip({"cmake.args": "-DGGML_BLAS=ON;-DGGML_BLAS_VENDOR=OpenBLAS"}) == [
        "-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"]
    # -C given twice arrives as a list
    assert cmake_config.from_pip({"cmake.args": ["-DA=1;-DB=2", "-DC=a b"]}) == ["-DA=1", "-DB=2", "-DC=a b"]
    assert cmake_config.from_pip({"cmake.args": " ; "}) == [] and cmake_config.from_pip(None) == []
    assert cmake_config.from_pip({"other": "x"}) == []


def test_the_native_build_gets_them_after_cmake_args(cmake_config: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("setuptools")
    from llama_cpp_native._cmake import user_cmake_args  # what configure() passes to CMake and BUILD_INFO records

    monkeypatch.syspath_prepend(str(BUILD_SUPPORT))
    monkeypatch.setitem(sys.modules, "cmake_config", cmake_config)
    backend = _load(BUILD_SUPPORT / "native_backend.py", "native_backend")
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=off -DX='a b'")
    with backend._with_cmake_args({"cmake.args": "-DGGML_BLAS=ON;-DGGML_BLAS_VENDOR=OpenBLAS"}):
        assert user_cmake_args() == ["-DGGML_NATIVE=off", "-DX=a b", "-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"]
    assert os.environ["CMAKE_ARGS"] == "-DGGML_NATIVE=off -DX='a b'"  # the backend's environment, restored
    monkeypatch.delenv("CMAKE_ARGS")
    with backend._with_cmake_args({"cmake.args": "-DGGML_CUDA=on"}):
        assert user_cmake_args() == ["-DGGML_CUDA=on"]
    assert "CMAKE_ARGS" not in os.environ
    import llama_cpp_native

    assert isinstance(llama_cpp_native.BUILD_INFO["cmake_args"], list)  # where a build records them


def test_the_umbrella_hands_them_to_the_native_build_of_the_same_pip_run(tmp_path: Path) -> None:
    """The umbrella's backend and the native one run as children of one pip process; a third process
    (another pip run's backend) does not take the arguments."""
    support = tmp_path / "native" / "build_support"
    support.mkdir(parents=True)
    shutil.copy2(BUILD_SUPPORT / "cmake_config.py", support)  # its hand-over file: tmp_path/native/build/

    def child(code: str, *, grandchild: bool = False) -> str:
        script = f"import sys; sys.path.insert(0, {str(support)!r}); import cmake_config; {code}"
        command = [sys.executable, "-c", script]
        if grandchild:
            command = [sys.executable, "-c", f"import subprocess, sys; subprocess.run({command!r}, check=True)"]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout.strip()

    child("cmake_config.hand_over(['-DGGML_BLAS=ON', '-DGGML_BLAS_VENDOR=OpenBLAS'])")
    assert json.loads((tmp_path / "native" / "build" / "pip-cmake-args.json").read_text())["pip"] == os.getpid()
    assert child("print(cmake_config.take_over(), end='')", grandchild=True) == "[]"  # another pip run's
    assert child("print(cmake_config.handed_over(), end='')") == "['-DGGML_BLAS=ON', '-DGGML_BLAS_VENDOR=OpenBLAS']"
    assert child("print(cmake_config.take_over(), end='')") == "['-DGGML_BLAS=ON', '-DGGML_BLAS_VENDOR=OpenBLAS']"
    assert child("print(cmake_config.take_over(), end='')") == "[]"  # taken once
    child("cmake_config.hand_over(['-DA=1']); cmake_config.hand_over([])")  # a run without -C clears it
    assert not (tmp_path / "native" / "build" / "pip-cmake-args.json").exists()


def _source_copy(destination: Path) -> Path:
    """The files pip needs to install the umbrella, as git sees them (no build output)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml", "README.md", "native",
                             "core", "plugins", "contrib/server"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in listed.stdout.splitlines():
        source = ROOT / name
        if source.is_file() and not name.startswith("native/build/"):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def test_pip_resolves_the_extras_and_hands_cmake_args_to_the_native_build(tmp_path: Path) -> None:
    """The seed README's form, ``-C cmake.args=...`` on the umbrella, against the package index: pip's dry
    run prepares the metadata of every local distribution (the native one included, whose backend says the
    arguments it got) and resolves ``.[server]`` and ``.[all]`` with the index's packages."""
    tree = _source_copy(tmp_path / "tree")
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-v",
                           "--report", str(report), ".[server]", ".[all]",
                           "-C", "cmake.args=-DGGML_BLAS=ON;-DGGML_BLAS_VENDOR=OpenBLAS"],
                          cwd=tree, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 and re.search(r"No matching distribution|Could not find a version|NewConnectionError",
                                          proc.stdout + proc.stderr):
        pytest.skip("the package index cannot be reached")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert "llama-cpp-native: CMake arguments from -C cmake.args: -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS" \
        in proc.stdout + proc.stderr  # pip logs what a backend prints on stderr
    assert "does not provide the extra" not in proc.stdout + proc.stderr
    installs = {item["metadata"]["name"]: item for item in json.loads(report.read_text())["install"]}
    umbrella = installs["llama-cpp-python"]
    assert umbrella["metadata"]["version"] == package_version()
    # pip reports the extras of its last request for a name (pip 23, a fresh venv's) or all of them (26):
    # what [all] adds is checked by what was resolved, below
    assert set(umbrella["requested_extras"]) & {"server", "all"}
    assert {"server", "all", "test"} <= set(umbrella["metadata"]["provides_extra"])
    # [all] is the server and the test tools; the server's dependencies are there
    assert {"llama-cpp-server", "fastapi", "uvicorn", "pydantic-settings", "pytest", "openai"} <= set(installs)
