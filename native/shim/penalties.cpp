// llama_cpp_native_penalties_init (llama_cpp_native_shim.h): llama.cpp's repetition penalties, applied from
// the window's side.
//
// llama.cpp's penalties sampler looks every candidate up in its table of the window's tokens: 32k hash
// lookups per token on a 32k vocabulary, a fifth of the whole token on a tiny model with a sampler chain
// (perf, case (d) of benchmarks/bench.py: 9% of the process's samples, its OpenMP workers' included).  The window
// holds at most penalty_last_n distinct tokens, and the candidates the chain meets are the vocabulary in id
// order, so the token t is candidate t: this sampler changes exactly those, with llama.cpp's arithmetic, and
// looks every candidate up only when the array is in another order.
#include "llama_cpp_native_shim.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <unordered_map>
#include <vector>

namespace {

struct window_penalties {
    int32_t last_n;
    float repeat;
    float freq;
    float present;
    std::vector<llama_token> window;  // the last last_n accepted tokens; once full, `oldest` is the next to go
    size_t oldest = 0;
    std::unordered_map<llama_token, int32_t> counts;  // how often each token of the window occurs in it

    bool disabled() const { return last_n == 0 || (repeat == 1.0f && freq == 0.0f && present == 0.0f); }

    void accept(llama_token token) {
        if (last_n == 0) {
            return;
        }
        ++counts[token];
        if (window.size() < static_cast<size_t>(last_n)) {
            window.push_back(token);
            return;
        }
        llama_token & gone = window[oldest];
        const auto it = counts.find(gone);
        if (--it->second == 0) {
            counts.erase(it);
        }
        gone = token;
        oldest = (oldest + 1) % window.size();
    }

    // llama.cpp's arithmetic, operation for operation, so that the logits are bit for bit its own
    void penalize(llama_token_data & candidate, int32_t count) const {
        if (candidate.logit <= 0) {
            candidate.logit *= repeat;
        } else {
            candidate.logit /= repeat;
        }
        candidate.logit -= float(count) * freq + float(count > 0) * present;
    }

    void apply(llama_token_data_array * cur_p) const {
        if (disabled()) {
            return;
        }
        llama_token_data * data = cur_p->data;
        const size_t n = cur_p->size;
        // candidate ids are distinct (every array llama.cpp and the engine make is), so a token found at its
        // own index is nowhere else
        bool by_index = true;
        for (const auto & entry : counts) {
            const llama_token token = entry.first;
            if (token < 0 || static_cast<size_t>(token) >= n || data[token].id != token) {
                by_index = false;
                break;
            }
        }
        if (by_index) {
            for (const auto & entry : counts) {
                penalize(data[entry.first], entry.second);
            }
        } else {
            for (size_t i = 0; i < n; ++i) {
                const auto it = counts.find(data[i].id);
                if (it != counts.end()) {
                    penalize(data[i], it->second);
                }
            }
        }
        cur_p->sorted = false;
    }
};

window_penalties * state(const struct llama_sampler * smpl) {
    return static_cast<window_penalties *>(smpl->ctx);
}

const char * penalties_name(const struct llama_sampler *) {
    return "penalties";
}

void penalties_accept(struct llama_sampler * smpl, llama_token token) {
    state(smpl)->accept(token);
}

void penalties_apply(struct llama_sampler * smpl, llama_token_data_array * cur_p) {
    state(smpl)->apply(cur_p);
}

void penalties_reset(struct llama_sampler * smpl) {
    window_penalties * p = state(smpl);
    p->window.clear();
    p->oldest = 0;
    p->counts.clear();
}

struct llama_sampler * penalties_clone(const struct llama_sampler * smpl);

void penalties_free(struct llama_sampler * smpl) {
    delete state(smpl);
}

// no backend sampling: llama.cpp runs the chain on the CPU, and llama_sampler_copy clones when there is no
// copy_state
struct llama_sampler_i interface() {
    struct llama_sampler_i i = {};
    i.name = penalties_name;
    i.accept = penalties_accept;
    i.apply = penalties_apply;
    i.reset = penalties_reset;
    i.clone = penalties_clone;
    i.free = penalties_free;
    return i;
}

struct llama_sampler_i penalties_interface = interface();

struct llama_sampler * penalties_clone(const struct llama_sampler * smpl) {
    window_penalties * copy = new (std::nothrow) window_penalties(*state(smpl));
    return copy == nullptr ? nullptr : llama_sampler_init(&penalties_interface, copy);
}

}  // namespace

extern "C" struct llama_sampler * llama_cpp_native_penalties_init(int32_t penalty_last_n, float penalty_repeat,
                                                                  float penalty_freq, float penalty_present) {
    window_penalties * p = new (std::nothrow) window_penalties{
        penalty_last_n < 0 ? 0 : penalty_last_n, penalty_repeat, penalty_freq, penalty_present, {}, 0, {}};
    return p == nullptr ? nullptr : llama_sampler_init(&penalties_interface, p);
}
