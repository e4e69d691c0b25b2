// llama_cpp_native_sample_top (llama_cpp_native_shim.h): sampling from the tokens a leading top-k keeps.
//
// llama_sampler_sample writes a candidate record for every token of the vocabulary (12 bytes each: 384 KB
// for 32k tokens, 3 MB for 256k) and the chain's top-k partially sorts all of them, for every generated
// token; on a small model that is a tenth of the decode.  One vectorized scan of the logits row finds the
// best logit of every block of 16 tokens; the k-th best of those bounds the k-th best logit from below, so
// the blocks that reach it hold every token the top-k can keep, and only they are searched.
#include "llama_cpp_native_shim.h"
#include "vec4.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace {

// tokens per block whose best logit the first scan keeps: the search looks only into the blocks that reach
// the threshold
constexpr int32_t BLOCK = 16;

}  // namespace

// The best logit of each block of BLOCK tokens into `maxima` (the last, shorter block included); returns the
// best of all, and whether a logit is NaN into `nan`.
static float block_maxima(const float * logits, int32_t n_vocab, std::vector<float> & maxima, bool & nan) {
    const int32_t full = n_vocab / BLOCK;
    maxima.resize(full + 1);
    v4i bad = {0, 0, 0, 0};
    // the best of all as four lanes: a running scalar maximum would chain every block on the one before
    v4f lanes = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int32_t b = 0; b < full; ++b) {
        const float * p = logits + b * BLOCK;
        const v4f x0 = load4(p), x1 = load4(p + 4), x2 = load4(p + 8), x3 = load4(p + 12);
        bad |= (x0 != x0) | (x1 != x1) | (x2 != x2) | (x3 != x3);
        const v4f m = max4(max4(x0, x1), max4(x2, x3));
        maxima[b] = std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
        lanes = max4(m, lanes);
    }
    const float best = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
    float tail = -INFINITY;
    bool tail_nan = false;
    for (int32_t i = full * BLOCK; i < n_vocab; ++i) {
        tail_nan |= logits[i] != logits[i];
        tail = std::max(tail, logits[i]);
    }
    maxima[full] = tail;
    nan = tail_nan || bad[0] || bad[1] || bad[2] || bad[3];
    return std::max(best, tail);
}

// The tokens whose logit, biased, is at least `threshold`, in id order (with their unbiased logits: the
// chain's own logit-bias sampler adds the bias), looking only into the blocks whose best reaches it, then at
// the biased tokens, whose bias may take them over it.
static void at_least(const float * logits, int32_t n_vocab, const std::vector<float> & maxima, float threshold,
                     const llama_token * bias_ids, const float * bias_values, int32_t n_bias,
                     std::vector<llama_token_data> & out) {
    out.clear();
    const llama_token * bias_end = bias_ids + n_bias;
    for (int32_t b = 0; b < (int32_t) maxima.size(); ++b) {
        if (maxima[b] < threshold) {
            continue;
        }
        const int32_t end = std::min(n_vocab, (b + 1) * BLOCK);
        for (int32_t i = b * BLOCK; i < end; ++i) {
            if (logits[i] >= threshold && !std::binary_search(bias_ids, bias_end, i)) {
                out.push_back(llama_token_data{i, logits[i], 0.0f});
            }
        }
    }
    const size_t unbiased = out.size();
    for (int32_t j = 0; j < n_bias; ++j) {
        const llama_token id = bias_ids[j];
        if (logits[id] + bias_values[j] >= threshold) {
            out.push_back(llama_token_data{id, logits[id], 0.0f});
        }
    }
    std::inplace_merge(out.begin(), out.begin() + unbiased, out.end(),
                       [](const llama_token_data & x, const llama_token_data & y) { return x.id < y.id; });
}

// Apply the chain to `cur` and accept the token it selects into it: that token, or -2 when the chain selected
// none (what llama_sampler_sample does after it has made its candidates).
static llama_token choose(struct llama_sampler * chain, llama_token_data_array & cur) {
    llama_sampler_apply(chain, &cur);
    if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) {
        return -2;
    }
    if (cur.data[cur.selected].logit == -INFINITY) {  // nothing was left: a grammar would abort on the token
        return -3;
    }
    const llama_token token = cur.data[cur.selected].id;
    llama_sampler_accept(chain, token);
    return token;
}

// The candidates of output `idx` as llama_sampler_sample makes them: those a backend sampler left (with their
// probabilities, or their logits), else every token of the vocabulary with its logit.  False when the output
// has no logits.
static bool output_candidates(struct llama_context * ctx, int32_t idx, std::vector<llama_token_data> & out) {
    const llama_token * ids = llama_get_sampled_candidates_ith(ctx, idx);
    const float * probs = llama_get_sampled_probs_ith(ctx, idx);
    const float * sampled_logits = llama_get_sampled_logits_ith(ctx, idx);
    if (ids != nullptr && (probs != nullptr || sampled_logits != nullptr)) {
        const uint32_t n = probs != nullptr ? llama_get_sampled_probs_count_ith(ctx, idx)
                                            : llama_get_sampled_logits_count_ith(ctx, idx);
        out.resize(n);
        for (uint32_t i = 0; i < n; ++i) {
            out[i] = llama_token_data{ids[i], sampled_logits != nullptr ? sampled_logits[i] : 0.0f,
                                      probs != nullptr ? probs[i] : 0.0f};
        }
        return true;
    }
    const float * logits = llama_get_logits_ith(ctx, idx);
    if (logits == nullptr) {
        return false;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    out.resize(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) {
        out[i] = llama_token_data{i, logits[i], 0.0f};
    }
    return true;
}

extern "C" llama_token llama_cpp_native_sample_top(struct llama_sampler * chain, struct llama_context * ctx,
                                                   int32_t idx, int32_t n, const llama_token * bias_ids,
                                                   const float * bias_values, int32_t n_bias) {
    try {
        const float * logits = llama_get_logits_ith(ctx, idx);
        const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
        if (logits == nullptr || n <= 0 || n > n_vocab || n_bias < 0) {
            return -1;
        }
        for (int32_t j = 0; j < n_bias; ++j) {
            if (bias_ids[j] < 0 || bias_ids[j] >= n_vocab || (j > 0 && bias_ids[j] <= bias_ids[j - 1])) {
                return -1;
            }
        }
        // buffers per thread: a thread samples one sequence at a time
        thread_local std::vector<float> maxima;
        thread_local std::vector<float> ranked;
        thread_local std::vector<llama_token_data> candidates;
        bool nan = false;
        const float best = block_maxima(logits, n_vocab, maxima, nan);
        if (nan || !std::isfinite(best)) {
            return -1;  // llama.cpp's own comparisons decide what NaN and infinities do
        }

        // The threshold: the (n + n_bias)-th best block maximum.  At least n + n_bias blocks reach it, at most
        // n_bias of them through a biased token, so at least n unbiased tokens do.
        const size_t reach = (size_t) n + (size_t) n_bias;
        if (reach > maxima.size()) {
            return -1;
        }
        ranked.assign(maxima.begin(), maxima.end());
        std::nth_element(ranked.begin(), ranked.begin() + (reach - 1), ranked.end(), std::greater<float>());
        const float threshold = ranked[reach - 1];
        at_least(logits, n_vocab, maxima, threshold, bias_ids, bias_values, n_bias, candidates);
        if ((int32_t) candidates.size() < n) {
            return -1;
        }

        // the n + 1 best (n when only n are in), biased, must all differ
        ranked.resize(candidates.size());
        const llama_token * bias_end = bias_ids + n_bias;
        std::transform(candidates.begin(), candidates.end(), ranked.begin(), [&](const llama_token_data & c) {
            const llama_token * at = std::lower_bound(bias_ids, bias_end, c.id);
            return at != bias_end && *at == c.id ? c.logit + bias_values[at - bias_ids] : c.logit;
        });
        const size_t r = std::min(ranked.size(), (size_t) n + 1);
        std::partial_sort(ranked.begin(), ranked.begin() + r, ranked.end(), std::greater<float>());
        for (size_t i = 1; i < r; ++i) {
            if (ranked[i] == ranked[i - 1]) {
                return -1;
            }
        }

        llama_token_data_array cur = {candidates.data(), candidates.size(), -1, false};
        return choose(chain, cur);
    } catch (...) {
        return -2;
    }
}

extern "C" llama_token llama_cpp_native_sample_candidates(struct llama_sampler * chain, struct llama_context * ctx,
                                                          int32_t idx, int32_t n, llama_token * ids, float * probs,
                                                          int32_t * n_out, float * p_token) {
    try {
        thread_local std::vector<llama_token_data> candidates;
        if (n < 0 || !output_candidates(ctx, idx, candidates)) {
            return -1;
        }
        llama_token_data_array cur = {candidates.data(), candidates.size(), -1, false};
        const llama_token token = choose(chain, cur);
        if (token < 0) {
            return token;
        }
        *p_token = cur.data[cur.selected].p;
        // the n most probable of what the chain left, by probability, as llama-server sorts them
        const size_t k = std::min((size_t) n, (size_t) cur.size);
        std::partial_sort(cur.data, cur.data + k, cur.data + cur.size,
                          [](const llama_token_data & a, const llama_token_data & b) { return a.p > b.p; });
        int32_t written = 0;
        for (size_t i = 0; i < k && cur.data[i].p != 0.0f; ++i) {
            ids[written] = cur.data[i].id;
            probs[written] = cur.data[i].p;
            ++written;
        }
        *n_out = written;
        return token;
    } catch (...) {
        return -2;
    }
}

extern "C" llama_token llama_cpp_native_sample(struct llama_sampler * chain, struct llama_context * ctx, int32_t idx) {
    try {
        const llama_token sampled = llama_get_sampled_token_ith(ctx, idx);
        if (sampled != LLAMA_TOKEN_NULL) {  // a backend sampler chose already
            llama_sampler_accept(chain, sampled);
            return sampled;
        }
        thread_local std::vector<llama_token_data> candidates;
        if (!output_candidates(ctx, idx, candidates)) {
            return -1;
        }
        llama_token_data_array cur = {candidates.data(), candidates.size(), -1, false};
        return choose(chain, cur);
    } catch (...) {
        return -2;
    }
}
