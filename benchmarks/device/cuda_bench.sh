#!/usr/bin/env bash
# The bench's cases on a CUDA machine that reaches no network, from the two loads of prepare.py, in two calls
# of the device tool made back to back (the machine stays warm between them and keeps /tmp):
#
#   bash benchmarks/device/cuda_bench.sh first              (carry .device/first)
#       installs the wheels, unpacks the source and starts the CUDA build of the libraries, llama.cpp's tools
#       and llama-server in one ninja run, in a session of its own so that it outlives the call;
#   bash benchmarks/device/cuda_bench.sh second a c e f     (carry .device/second)
#       joins SmolLM2, waits for the build, then runs benchmarks/bench.py with those cases, every layer
#       offloaded on both sides; the bench's output and the build's log land in $OUT.
set -euo pipefail

STAGE=/tmp/llama-cpp-device
SITE=$STAGE/site
OUT=${OUT:-$STAGE/out}
mkdir -p "$STAGE" "$OUT"
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
export LLAMA_CPP_CACHE=$STAGE/cache LLAMA_CPP_NATIVE_CACHE=$STAGE/native-cache LLAMA_CPP_SOURCE_DIR=$STAGE/llama.cpp
# Hopper only (the build's time is the lease's); the server configured from the start so that one ninja run
# builds everything; one GPU, so no NCCL.
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_SERVER=ON \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF"
SMOL=$LLAMA_CPP_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

build() {
    # The libraries, the tools and llama-server in one ninja run (the CUDA kernels and the server's C++
    # compile side by side), from the same configure step as the native package's build backend; its pip
    # install and build-tools then find everything built.
    python3 - <<'EOF'
import importlib.util
import sys


def load(name):
    spec = importlib.util.spec_from_file_location(f"llama_cpp_native.{name}", f"native/llama_cpp_native/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


source, _, cmake = load("_source"), load("_amx_check"), load("_cmake")
build = cmake.configure(source.source_tree())
cmake.build_targets(build, cmake.LIBRARY_TARGETS + cmake.TOOL_TARGETS + cmake.SERVER_TARGETS)
EOF
    python3 -m pip install -q --no-build-isolation --no-deps --no-index --target "$SITE" ./native
    python3 -m llama_cpp_native build-tools --server
}

case "${1:-}" in
first)
    load=.device/first
    nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sysconfig, os; h = sysconfig.get_paths()["include"]; print(h, os.path.exists(h + "/Python.h"))'
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$load"/wheels/*.whl
    tar -xJf "$load/llama.cpp.tar.xz" -C "$STAGE"
    mkdir -p "$LLAMA_CPP_CACHE/models"
    cp "$load/smollm2.part1" "$STAGE/"
    rm -f "$STAGE/build.done" "$STAGE/build.failed"
    # The repository is copied anew by each call: the build reads a copy of its own.
    rm -rf "$STAGE/repo" && mkdir "$STAGE/repo" && cp -r native benchmarks "$STAGE/repo/"
    cd "$STAGE/repo"
    export -f build
    setsid bash -c "SECONDS=0; if build > $STAGE/build.log 2>&1; then echo \$SECONDS > $STAGE/build.done; \
else echo \$SECONDS > $STAGE/build.failed; fi" < /dev/null > /dev/null 2>&1 &
    echo "build started"
    ;;
second)
    shift
    cat "$STAGE/smollm2.part1" .device/second/smollm2.part2 > "$SMOL"
    echo "$SMOL_SHA256  $SMOL" | sha256sum -c
    while [ ! -e "$STAGE/build.done" ] && [ ! -e "$STAGE/build.failed" ]; do sleep 2; done
    cp "$STAGE/build.log" "$OUT/build.log"
    if [ -e "$STAGE/build.failed" ]; then tail -40 "$STAGE/build.log"; exit 1; fi
    echo "built in $(cat "$STAGE/build.done") s"
    python3 -m llama_cpp_native info
    python3 benchmarks/bench.py --gpu-layers 999 "$@" 2>&1 | tee "$OUT/bench.txt"
    ;;
*)
    echo "usage: $0 first | second CASE..." >&2
    exit 2
    ;;
esac
