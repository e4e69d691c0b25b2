// Four floats at once, in GCC's and Clang's vector extensions (SSE on x86, NEON on ARM): what the shim's
// scans of a logits row (sample_top.cpp, token_choice.cpp) are written with.  Internal to the shim.
#ifndef LLAMA_CPP_NATIVE_VEC4_H
#define LLAMA_CPP_NATIVE_VEC4_H

#include <cstdint>
#include <cstring>

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float * p) {
    v4f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Lane by lane, a where a > b, else b: a NaN in a never wins (it compares false).
static inline v4f max4(v4f a, v4f b) {
    return a > b ? a : b;
}

#endif
