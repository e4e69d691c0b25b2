"""llama_cpp._utils as the seed has it: suppress_stdout_stderr and Singleton."""

from __future__ import annotations

import os
import sys

import pytest

import llama_cpp
from llama_cpp._utils import Singleton, suppress_stdout_stderr


def test_suppress_stdout_stderr_silences_native_writes_too(capfd: pytest.CaptureFixture[str]) -> None:
    assert llama_cpp.suppress_stdout_stderr is suppress_stdout_stderr
    with suppress_stdout_stderr(disable=False):
        print("python out")
        print("python err", file=sys.stderr)
        os.write(1, b"fd out\n")
        os.write(2, b"fd err\n")
    print("after")
    out, err = capfd.readouterr()
    assert (out, err) == ("after\n", "")
    with suppress_stdout_stderr():  # disable=True, the seed's default (its code passes disable=verbose)
        print("shown")
    assert capfd.readouterr().out == "shown\n"


def test_singleton_gives_one_instance_per_class() -> None:
    class Registry(Singleton):
        def __init__(self) -> None:
            self.entries: list[str] = []

    class Other(Registry):
        pass

    Registry().entries.append("x")
    assert Registry() is Registry() and Registry().entries == ["x"]
    assert Other() is not Registry() and Other().entries == []
