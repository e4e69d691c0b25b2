"""The native build's AMX check: which builds get ``-mno-amx-int8``, merged how, and the probe itself."""

from __future__ import annotations

import os
from typing import Callable

import pytest

from llama_cpp_native import _amx_check
from llama_cpp_native._amx_check import FLAG, with_amx_workaround


@pytest.fixture
def x86_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check applies to native x86-64 Linux builds: these tests run as if this were one."""
    monkeypatch.setattr(_amx_check.sys, "platform", "linux")
    monkeypatch.setattr(_amx_check.platform, "machine", lambda: "x86_64")


def _breaks(compilers: list[list[str]]) -> Callable[[list[str]], bool]:
    """A probe that records the compilers it was given and finds each one breaking AMX tiles."""

    def probe(compiler: list[str]) -> bool:
        compilers.append(compiler)
        return True

    return probe


@pytest.mark.usefixtures("x86_linux")
def test_a_breaking_compiler_gets_the_flag_in_both_languages_after_the_users_flags() -> None:
    seen: list[list[str]] = []
    args = with_amx_workaround(["-DGGML_CUDA=on", "-DCMAKE_CXX_FLAGS=-g -O2"], {}, _breaks(seen))
    assert args == ["-DGGML_CUDA=on", "-DCMAKE_CXX_FLAGS=-g -O2", f"-DCMAKE_C_FLAGS={FLAG}",
                    f"-DCMAKE_CXX_FLAGS=-g -O2 {FLAG}"]
    assert seen == [["c++"]]


@pytest.mark.usefixtures("x86_linux")
def test_the_probe_uses_the_compiler_cmake_will_use() -> None:
    seen: list[list[str]] = []
    with_amx_workaround([], {"CXX": "ccache g++-12"}, _breaks(seen))
    with_amx_workaround(["-DCMAKE_CXX_COMPILER=/opt/gcc/bin/g++"], {"CXX": "g++-12"}, _breaks(seen))
    assert seen == [["ccache", "g++-12"], ["/opt/gcc/bin/g++"]]


@pytest.mark.usefixtures("x86_linux")
def test_recorded_arguments_are_not_probed_or_changed_again() -> None:
    """``build-tools`` configures with the arguments the build recorded: the same folder, no second flag."""
    seen: list[list[str]] = []
    once = with_amx_workaround([], {}, _breaks(seen))
    assert with_amx_workaround(once, {}, _breaks(seen)) == once and len(seen) == 1


@pytest.mark.usefixtures("x86_linux")
def test_a_working_compiler_or_a_portable_build_changes_nothing() -> None:
    assert with_amx_workaround(["-DGGML_CUDA=on"], {}, lambda compiler: False) == ["-DGGML_CUDA=on"]
    for off in ("OFF", "off", "0", "FALSE"):
        seen: list[list[str]] = []
        assert with_amx_workaround([f"-DGGML_NATIVE={off}"], {}, _breaks(seen)) == [f"-DGGML_NATIVE={off}"]
        assert seen == []


def test_a_probe_that_cannot_be_built_changes_nothing() -> None:
    assert _amx_check.amx_tiles_break(["/nonexistent/c++"]) is False
    assert _amx_check.amx_tiles_break(["false"]) is False  # a "compiler" that fails


def test_this_machines_build_carries_the_flag_exactly_when_its_compiler_breaks_tiles() -> None:
    """On a CPU with AMX and GCC 12 the installed libraries were built without AMX kernels (they would crash at
    the first batched Q4 multiplication); with another compiler or CPU the build has no such flag."""
    import llama_cpp_native

    recorded = list(llama_cpp_native.BUILD_INFO["cmake_args"])
    expected = _amx_check.is_native_x86_build(recorded) and _amx_check.amx_tiles_break(
        _amx_check.cxx_compiler(recorded, os.environ))
    assert (f"-DCMAKE_CXX_FLAGS={FLAG}" in recorded) == expected, recorded
