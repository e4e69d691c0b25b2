"""The umbrella distribution's build backend (the repository root's): hatchling's, handing pip's ``-C
cmake.args`` over to the native layer's build (:mod:`cmake_config` says why pip does not pass it on).

Each hook leaves the arguments of this pip run, or removes those of an earlier one; pip calls the
umbrella's hooks before it builds the native layer, which the umbrella depends on.
"""

from __future__ import annotations

from typing import Any

from hatchling import build as _hatchling
from hatchling.build import build_sdist, get_requires_for_build_sdist  # noqa: F401 (hooks as they are)

import cmake_config


def _hand_over(config_settings: dict[str, Any] | None) -> None:
    cmake_config.hand_over(cmake_config.from_pip(config_settings))


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    _hand_over(config_settings)
    return _hatchling.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    _hand_over(config_settings)
    return _hatchling.get_requires_for_build_editable(config_settings)


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    _hand_over(config_settings)
    return _hatchling.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    _hand_over(config_settings)
    return _hatchling.build_editable(wheel_directory, config_settings, metadata_directory)


# hatchling leaves its metadata hooks out under pip (which then builds the wheel to read its metadata):
# these exist exactly when hatchling's do
if hasattr(_hatchling, "prepare_metadata_for_build_wheel"):
    def prepare_metadata_for_build_wheel(metadata_directory: str,
                                         config_settings: dict[str, Any] | None = None) -> str:
        _hand_over(config_settings)
        return _hatchling.prepare_metadata_for_build_wheel(metadata_directory, config_settings)

    def prepare_metadata_for_build_editable(metadata_directory: str,
                                            config_settings: dict[str, Any] | None = None) -> str:
        _hand_over(config_settings)
        return _hatchling.prepare_metadata_for_build_editable(metadata_directory, config_settings)
