"""Build llama.cpp with CMake and a cffi API-mode extension over its headers.

Steps (all in ``build_ext``):

1. obtain the llama.cpp source (the pinned sdist tree, or LLAMA_CPP_SOURCE_DIR);
2. configure/build the ggml, llama and mtmd shared libraries in a cached CMake
   build directory keyed on the source and CMAKE_ARGS (an unchanged rebuild
   compiles nothing); with LLAMA_CPP_BUILD_TOOLS=1 also llama.cpp's tools;
3. copy the libraries and headers into the package;
4. generate the cffi cdef from those installed headers and compile the
   extension, linked through an ``$ORIGIN/lib`` rpath (the compiled extension
   is cached too, keyed on everything that goes into it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "build_support"))

import cdefgen  # noqa: E402
import layout  # noqa: E402
import shim  # noqa: E402


def _load_package_module(name: str):
    """Import a stdlib-only module of the package without importing the package."""
    path = HERE / "llama_cpp_native" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"llama_cpp_native.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_source = _load_package_module("_source")
_load_package_module("_amx_check")  # _cmake's import of it finds it loaded
_cmake = _load_package_module("_cmake")

EXTENSION = "llama_cpp_native._native"


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


class BuildNative(build_ext):
    def build_extension(self, ext: Extension) -> None:
        source = _source.source_tree()
        build = _cmake.configure(source)
        _cmake.build_libraries(build)
        shim.build_shim(source.path, build.bin_dir)
        if _truthy("LLAMA_CPP_BUILD_TOOLS"):
            _cmake.build_tools(build)

        ext_path = Path(self.get_ext_fullpath(ext.name))
        pkg_dir = ext_path.parent
        lib_dir = pkg_dir / "lib"
        include_dir = pkg_dir / "include"
        layout.copy_libraries(build.bin_dir, lib_dir)
        layout.copy_headers(source.path, shim.SHIM_DIR, include_dir)
        layout.copy_grammars(source.path, pkg_dir / "grammars")

        exported = layout.ExportedSymbols(build.bin_dir)
        ggml_version, ggml_commit = exported.ggml_build()
        preprocessed = cdefgen.preprocess(self._cc(), layout.CDEF_HEADERS, [include_dir])
        decls = cdefgen.generate_cdef(preprocessed, [include_dir], exported)
        csource = "".join(f'#include "{h}"\n' for h in layout.CDEF_HEADERS)

        self._write_build_info(pkg_dir, source, build, ggml_version, ggml_commit, decls)
        self._compile(ext, ext_path, build, decls.cdef, csource, include_dir)

    def _cc(self) -> list[str]:
        cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
        return cc.split()

    def _compile(self, ext, ext_path: Path, build, cdef: str, csource: str, include_dir: Path) -> None:
        import cffi

        rpath = "@loader_path/lib" if sys.platform == "darwin" else "$ORIGIN/lib"
        key_parts = [cdef, csource, cffi.__version__, sysconfig.get_config_var("EXT_SUFFIX") or "", rpath]
        key_parts += [p.name + str(p.stat().st_size) + str(p.stat().st_mtime_ns)
                      for p in sorted(build.bin_dir.glob("lib*"))]
        key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:16]
        cached = build.directory / "extension" / key / ext_path.name
        ext_path.parent.mkdir(parents=True, exist_ok=True)
        if cached.exists():
            print(f"reusing the compiled extension {cached}")
            shutil.copy2(cached, ext_path)
            return

        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source(EXTENSION, csource)
        c_file = Path(self.build_temp) / "_native.c"
        c_file.parent.mkdir(parents=True, exist_ok=True)
        ffi.emit_c_code(str(c_file))

        ext.sources = [str(c_file)]
        ext.include_dirs = [str(include_dir)]
        ext.library_dirs = [str(build.bin_dir)]
        ext.libraries = list(layout.LINK_LIBRARIES)
        ext.extra_compile_args = ["-Wno-deprecated-declarations"] if os.name != "nt" else []
        ext.extra_link_args = [f"-Wl,-rpath,{rpath}"] if os.name != "nt" else []
        super().build_extension(ext)

        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ext_path, cached)

    @staticmethod
    def _write_build_info(pkg_dir: Path, source, build, ggml_version: str, ggml_commit: str, decls) -> None:
        info = {
            "llama_commit": source.commit,
            "llama_build_number": source.number,
            "ggml_version": ggml_version,
            "ggml_commit": ggml_commit,
            "pinned_source": source.pinned,
            "source_dir": str(source.path),
            "build_dir": str(build.directory),
            "cmake_args": list(build.cmake_args),
            "unexported_functions": sorted(decls.dropped),
        }
        text = (
            '"""Written by the build: the llama.cpp build this extension was compiled against,\n'
            'and the enums of its headers (name -> members, values come from ``lib``)."""\n\n'
            f"BUILD_INFO = {info!r}\n\n"
            f"ENUMS = {decls.enums!r}\n"
        )
        (pkg_dir / "_build_info.py").write_text(text)


setup(
    ext_modules=[Extension(EXTENSION, sources=[])],
    cmdclass={"build_ext": BuildNative},
)
