// llama_cpp_native_choose and llama_cpp_native_decode_burst (llama_cpp_native_shim.h): the engine's one rule
// for choosing a sequence's next token, and a run of one-token decodes that applies it without returning to
// Python between tokens.
//
// On a tiny model a token decodes in a few hundred microseconds, and the Python work of a tick (plan, batch,
// update, sampling call) is a tenth of that; llama.cpp's own tools pay none of it.  A lone sequence whose
// sampling is all native can therefore take several tokens per tick: the tick's decode, then decode after
// decode here, each token chosen exactly as the per-token path chooses it, because both call the same
// function.
#include "llama_cpp_native_shim.h"
#include "vec4.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

// The index of the first maximum of row[0..n) (llama.cpp's greedy sampler picks the first one); NaN logits
// never win unless the row starts with one, as in that sampler.  Two scans of 32 floats a step: the maximum,
// then the first block of 32 that holds it.  The eight vectors of a step are named, not an array: GCC kept
// an array of them in memory, one store and load per vector, and the choice took 7 µs for 32000 logits.
static int32_t first_max(const float * row, int32_t n) {
    constexpr int32_t STRIDE = 32;
    float best = row[0];
    int32_t i = 0;
    if (n >= STRIDE) {
        const v4f low = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        v4f m0 = low, m1 = low, m2 = low, m3 = low, m4 = low, m5 = low, m6 = low, m7 = low;
        for (; i + STRIDE <= n; i += STRIDE) {  // a NaN never enters a lane
            const float * p = row + i;
            m0 = max4(load4(p), m0);
            m1 = max4(load4(p + 4), m1);
            m2 = max4(load4(p + 8), m2);
            m3 = max4(load4(p + 12), m3);
            m4 = max4(load4(p + 16), m4);
            m5 = max4(load4(p + 20), m5);
            m6 = max4(load4(p + 24), m6);
            m7 = max4(load4(p + 28), m7);
        }
        const v4f m = max4(max4(max4(m0, m1), max4(m2, m3)), max4(max4(m4, m5), max4(m6, m7)));
        for (int k = 0; k < 4; ++k) {
            best = m[k] > best ? m[k] : best;
        }
    }
    for (; i < n; ++i) {
        best = row[i] > best ? row[i] : best;
    }
    if (best != best) {  // the row starts with NaN and nothing compares greater
        return 0;
    }
    const v4f t = {best, best, best, best};
    int32_t j = 0;
    for (; j + STRIDE <= n; j += STRIDE) {
        const float * p = row + j;
        const v4i hit = ((load4(p) == t) | (load4(p + 4) == t)) | ((load4(p + 8) == t) | (load4(p + 12) == t)) |
                        ((load4(p + 16) == t) | (load4(p + 20) == t)) | ((load4(p + 24) == t) | (load4(p + 28) == t));
        if ((hit[0] | hit[1]) | (hit[2] | hit[3])) {
            break;
        }
    }
    for (; j < n; ++j) {
        if (row[j] == best) {
            return j;
        }
    }
    return 0;
}

// The first maximum of the row with bias_values added to the logits of bias_ids (ascending), without
// writing into the row: the raw winner, unless it is biased itself (then every logit is ranked, biased) or
// a biased token reaches it.
static int32_t biased_first_max(const float * row, int32_t n, const llama_token * bias_ids, const float * bias_values,
                                int32_t n_bias) {
    const int32_t raw = first_max(row, n);
    const llama_token * bias_end = bias_ids + n_bias;
    if (n_bias == 0) {
        return raw;
    }
    if (std::binary_search(bias_ids, bias_end, raw)) {
        int32_t best = -1;
        float best_value = -INFINITY;
        const llama_token * next = bias_ids;
        for (int32_t i = 0; i < n; ++i) {
            float value = row[i];
            if (next != bias_end && *next == i) {
                value += bias_values[next - bias_ids];
                ++next;
            }
            if (best < 0 || value > best_value) {
                best = i;
                best_value = value;
            }
        }
        return best;
    }
    int32_t best = raw;
    float best_value = row[raw];
    for (int32_t j = 0; j < n_bias; ++j) {
        const llama_token id = bias_ids[j];
        if (id < 0 || id >= n) {
            continue;
        }
        const float value = row[id] + bias_values[j];
        if (value > best_value || (value == best_value && id < best)) {
            best = id;
            best_value = value;
        }
    }
    return best;
}

extern "C" llama_token llama_cpp_native_choose(struct llama_cpp_native_choice * choice, struct llama_context * ctx,
                                               int32_t idx) {
    if (choice->argmax) {
        const float * row = llama_get_logits_ith(ctx, idx);
        if (row == nullptr) {
            return -1;
        }
        return biased_first_max(row, choice->n_vocab, choice->bias_ids, choice->bias_values, choice->n_bias);
    }
    if (choice->chain == nullptr) {  // its sampler was closed
        return -2;
    }
    if (choice->top_n > 0) {
        const llama_token token = llama_cpp_native_sample_top(choice->chain, ctx, idx, choice->top_n, choice->bias_ids,
                                                              choice->bias_values, choice->n_bias);
        if (token != -1) {
            choice->n_top_cut += token >= 0;
            return token;
        }
        ++choice->n_top_whole;  // equal logits among the best, or a NaN: the whole vocabulary decides
    }
    return llama_cpp_native_sample(choice->chain, ctx, idx);
}

extern "C" int32_t llama_cpp_native_decode_burst(struct llama_context * ctx, struct llama_batch batch,
                                                 struct llama_cpp_native_choice * choice, llama_seq_id seq_id,
                                                 llama_pos pos, int32_t n_max, int64_t budget_us,
                                                 const struct llama_vocab * stop_vocab, llama_token * out,
                                                 int32_t * status, int32_t * failure) {
    using clock = std::chrono::steady_clock;
    const clock::time_point deadline = clock::now() + std::chrono::microseconds(budget_us);
    *failure = 0;
    *status = llama_decode(ctx, batch);
    if (*status != 0 || n_max < 1) {
        return 0;
    }
    // a later decode that fails leaves memory as it was: the burst ends with the tokens chosen so far, and
    // the engine's next tick decodes the last one again (and meets the failure itself)
    llama_token token = llama_cpp_native_choose(choice, ctx, -1);
    llama_pos at = pos;
    llama_seq_id seq = seq_id;
    llama_seq_id * seqs = &seq;
    int32_t one = 1;
    int8_t wanted = 1;
    int32_t n = 0;
    while (true) {
        if (token < 0) {
            *failure = token;
            return n;
        }
        out[n++] = token;
        if (n == n_max || (stop_vocab != nullptr && llama_vocab_is_eog(stop_vocab, token)) ||
            clock::now() >= deadline) {
            return n;
        }
        const llama_batch next = {1, &token, nullptr, &at, &one, &seqs, &wanted};
        if (llama_decode(ctx, next) != 0) {
            return n;
        }
        ++at;
        token = llama_cpp_native_choose(choice, ctx, -1);
    }
}
