"""llama-cpp-native's build backend: setuptools', with pip's ``-C cmake.args`` given to CMake.

The arguments (from pip, or handed over by the umbrella: :mod:`cmake_config`) are appended to the
``CMAKE_ARGS`` environment variable for the build, so they reach CMake exactly as ``CMAKE_ARGS`` does,
after its own arguments (the later of two ``-D`` for one variable wins), and the build records them
(``llama_cpp_native.BUILD_INFO["cmake_args"]``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
from typing import Any, Iterator, Mapping

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (build_sdist, get_requires_for_build_editable,  # noqa: F401 (hooks as they are)
                                   get_requires_for_build_sdist, get_requires_for_build_wheel)

import cmake_config


def cmake_args_env(environ: Mapping[str, str], args: list[str]) -> str:
    """``CMAKE_ARGS`` for a build given ``args`` as well: its own arguments, then these."""
    return " ".join(part for part in (environ.get("CMAKE_ARGS", "").strip(), shlex.join(args)) if part)


def _announce(args: list[str]) -> None:
    if args:
        print(f"llama-cpp-native: CMake arguments from -C cmake.args: {shlex.join(args)}", flush=True)


@contextlib.contextmanager
def _with_cmake_args(config_settings: Mapping[str, Any] | None) -> Iterator[None]:
    args = cmake_config.from_pip(config_settings) or cmake_config.take_over()
    _announce(args)
    saved = os.environ.get("CMAKE_ARGS")
    os.environ["CMAKE_ARGS"] = cmake_args_env(os.environ, args)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CMAKE_ARGS", None)
        else:
            os.environ["CMAKE_ARGS"] = saved


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    _announce(cmake_config.from_pip(config_settings) or cmake_config.handed_over())
    return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: dict[str, Any] | None = None) -> str:
    _announce(cmake_config.from_pip(config_settings) or cmake_config.handed_over())
    return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    with _with_cmake_args(config_settings):
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    with _with_cmake_args(config_settings):
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
