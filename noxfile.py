"""Sessions that install the whole project into a fresh environment.

``nox -s tests`` is the test command of the README and of CI.
"""

from __future__ import annotations

import shutil

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False


# pip keeps wheels it built from a local folder whose name looks like "name-version"
# (a clone in "llama-cpp-python/", say) and reinstalls them without rebuilding, even
# after the code changed: the project's own packages are never taken from that cache.
_FRESH = "--no-cache-dir"


# ggml's OpenMP threads spin at every barrier of a graph. When another process holds the cores, a
# spinning thread waits out its time slice for a partner that is not running, and a two-thread decode
# of the tiny model goes from 2 ms to 230 ms: the suite then takes an hour instead of ten minutes.
# OpenMP's thread limit makes llama.cpp (ours and its oracle tools alike) compute on one thread,
# whatever n_threads a test asks for; CPU results do not depend on the thread count, and the
# n_threads values still reach llama_context_params unchanged.
_ONE_COMPUTE_THREAD = {"OMP_THREAD_LIMIT": "1"}


def _install(session: nox.Session, extras: str = "") -> None:
    """Install the umbrella distribution (native layer, core and every plugin)."""
    session.install(_FRESH, f".{extras}")


def _ensure_chromium(session: nox.Session) -> None:
    """Debian's Chromium, which the chat page's browser test drives through Playwright (no browser download:
    the test points Playwright at this executable)."""
    if shutil.which("chromium"):
        return
    session.run("sh", "-c", "apt-get update -q && apt-get install -y -q --no-install-recommends chromium",
                external=True, silent=True)


@nox.session
def tests(session: nox.Session) -> None:
    """Install everything (and the example third-party plugins), type-check, build llama.cpp's oracle tools, run
    pytest."""
    _install(session, "[test]")
    # As its users install it, next to an installed llama-cpp-python and without --no-deps: its pin
    # llama-cpp-python>=0.3,<0.4 must be met by this project (tests/test_client_llama_index.py checks that
    # pip did not fetch the reference instead). pip rebuilds the umbrella's path dependencies on the way,
    # so the same rule as for the project's own install applies: no wheel cache.
    session.install(_FRESH, "llama-index-llms-llama-cpp")
    session.install(_FRESH, "./contrib/example_plugin", "./contrib/example_speculative", "./contrib/example_policy")
    _ensure_chromium(session)
    session.run("python", "-m", "mypy")  # the files and strictness are in pyproject.toml's [tool.mypy]
    # llama-server too: the server's llama-server routes are tested against it
    session.run("python", "-m", "llama_cpp_native", "build-tools", "--server")
    session.run("pytest", *session.posargs, env=_ONE_COMPUTE_THREAD)


@nox.session
def tools(session: nox.Session) -> None:
    """Build llama.cpp's own tools (llama-completion, llama-bench, ...) next to the libraries."""
    _install(session)
    session.run("python", "-m", "llama_cpp_native", "build-tools")
    session.run("python", "-m", "llama_cpp_native", "tools-dir")


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks."""
    session.install("ruff")
    session.run("ruff", "check", "--select", "E9,F,B", "--ignore", "B008,B905,B019",
                "native", "core", "plugins", "contrib", "tests", "benchmarks", "noxfile.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Ratios of llama_cpp's speed to llama.cpp's own tools, same source and threads."""
    _install(session, "[test]")
    session.run("python", "-m", "llama_cpp_native", "build-tools", "--server")  # llama-server: case (f)
    session.run("python", "benchmarks/bench.py", *session.posargs)
