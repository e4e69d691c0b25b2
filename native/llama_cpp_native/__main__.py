"""``python -m llama_cpp_native``: what was built, and llama.cpp's tools on demand."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _build_tools(server: bool) -> Path:
    """Build llama.cpp's tools in the cached build directory of this package (with ``server``, also
    llama-server).

    The directory (and so the libraries the tools link) is the one this
    package's libraries came from; if the cache was cleaned it is configured
    again from the same source and CMAKE_ARGS.
    """
    from . import BUILD_INFO
    from ._cmake import build_tools, configure
    from ._source import SourceTree, pinned_source

    source_dir = Path(BUILD_INFO["source_dir"])
    if BUILD_INFO["pinned_source"] and not (source_dir / "include" / "llama.h").exists():
        source = pinned_source()
    else:
        source = SourceTree(
            path=source_dir,
            commit=BUILD_INFO["llama_commit"],
            number=BUILD_INFO["llama_build_number"],
            pinned=BUILD_INFO["pinned_source"],
        )
    build = configure(source, list(BUILD_INFO["cmake_args"]))
    return build_tools(build, server=server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_cpp_native", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="the llama.cpp build, its CMake arguments and system info")
    tools = sub.add_parser("build-tools", help="build llama-completion, llama-bench, ... next to the libraries")
    tools.add_argument("--server", action="store_true", help="also build llama-server (the benchmark's oracle)")
    sub.add_parser("tools-dir", help="print the folder of llama.cpp's tools (empty if not built)")
    args = parser.parse_args(argv)

    if args.command == "build-tools":
        print(_build_tools(args.server))
        return 0

    import llama_cpp_native as native

    if args.command == "tools-dir":
        found = native.tools_dir()
        print(found if found else "")
        return 0 if found else 1
    info = dict(native.BUILD_INFO)
    info["build"] = native.build_description()
    info["lib_dir"] = str(native.lib_dir)
    info["system_info"] = native.system_info()
    json.dump(info, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
