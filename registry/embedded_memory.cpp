#include "registry/embedded_memory.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>

namespace anvil::registry {

namespace {

using I = IntInterval;

I exact(std::int64_t v) { return I::exact(v); }

// The format a matrix is held in, after anvil-engine's --weights (engine/weights.cpp). The last three
// are GGUF files' block formats, held as stored.
enum class Held { f32, bf16, f16, q8, q4_0, q4_k_m, q6_k };

const char* name(Held h) {
    switch (h) {
        case Held::f32: return "f32";
        case Held::bf16: return "bf16";
        case Held::f16: return "f16";
        case Held::q8: return "q8";
        case Held::q4_0: return "q4_0";
        case Held::q4_k_m: return "q4_k_m";
        case Held::q6_k: return "q6_k";
    }
    return "?";
}

// A matrix's place in a mixed file: llama-quantize gives the output matrix (or a tied embedding)
// more bits than the rest.
enum class Role { output, other };

// anvil-engine's q8: one int8 per weight and one scale per group of 32 inputs of a row, f32 row-major
// (the reference level) and f16 packed; the AVX-512 VNNI layout pads the rows to a multiple of 16,
// the AVX2 one to 8 (kernels/weight_matrix.hpp).
constexpr std::int64_t kQ8Group = 32;
constexpr std::int64_t kQ8PackRows = 16;

// What a part could not be sized for: the estimate goes on without it.
struct Unknown {
    std::string why;
};

// The settings of `anvil-engine serve` that size memory, as launch.arguments give them (the engine
// keeps the last value of a repeated flag; "--flag=value" works too), else the engine's defaults
// (engine/serve_command.hpp).
struct Settings {
    std::string weights = "stored";
    std::string kv_dtype = "f32";
    std::int64_t max_context = 0;  // 0: the model's own context length
    std::int64_t max_seqs = 4;
    std::int64_t kv_blocks = 0;  // 0: enough for max_seqs whole contexts
    std::int64_t max_batch_tokens = 256;
};

std::int64_t number_flag(const std::vector<std::string>& args, std::string_view flag, std::int64_t fallback) {
    const auto text = last_flag_value(args, flag);
    if (!text) return fallback;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc() || end != text->data() + text->size() || v < 0)
        throw Unknown{"launch argument " + std::string(flag) + " " + *text + " is not a whole number"};
    return v;
}

Settings settings_of(const Launch& l) {
    Settings s;
    if (auto w = last_flag_value(l.arguments, "--weights")) s.weights = *w;
    if (auto k = last_flag_value(l.arguments, "--kv-dtype")) s.kv_dtype = *k;
    s.max_context = number_flag(l.arguments, "--max-context", s.max_context);
    s.max_seqs = number_flag(l.arguments, "--max-seqs", s.max_seqs);
    s.kv_blocks = number_flag(l.arguments, "--kv-blocks", s.kv_blocks);
    s.max_batch_tokens = number_flag(l.arguments, "--max-batch-tokens", s.max_batch_tokens);
    return s;
}

// How a model stored as `dtype` is held when served as `format` ("stored" keeps f32, bf16 and f16,
// holds a GGUF file's Q8_0 as q8 and its Q4_0, Q4_K and Q6_K blocks as they are).
Held held_as(const std::string& format, const std::string& dtype, const std::string& model) {
    if (format == "f32") return Held::f32;
    if (format == "bf16") return Held::bf16;
    if (format == "q8") return Held::q8;
    if (format != "stored") throw Unknown{"weights '" + format + "' are not a format anvil-engine serves (f32, bf16, q8, stored)"};
    if (dtype == "f32") return Held::f32;
    if (dtype == "f16") return Held::f16;
    if (dtype == "bf16") return Held::bf16;
    if (dtype == "q8_0") return Held::q8;
    if (dtype == "q4_0") return Held::q4_0;
    if (dtype == "q4_k_m") return Held::q4_k_m;
    if (dtype == "q6_k") return Held::q6_k;
    throw Unknown{"model " + model + " is stored as '" + dtype +
                  "', which anvil-engine does not serve as stored (f32, bf16, f16, q8_0, q4_0, q4_k_m, q6_k)"};
}

// A matrix held in the float format it is stored in keeps the files' values: the engine copies them
// as they are onto huge pages; GGUF's
// Q4_0, Q4_K and Q6_K it copies once, interleaved by 8 rows for the vector levels
// (kernels/ggml_blocks.hpp). The bytes are the same either way.
bool as_stored(Held held, const std::string& dtype) {
    return (held == Held::f32 && dtype == "f32") || (held == Held::bf16 && dtype == "bf16") || (held == Held::f16 && dtype == "f16");
}

// GGUF blocks: bytes per block of values (kernels/ggml_blocks.hpp).
I block_bytes(const I& n, std::int64_t values, std::int64_t bytes) { return floor_divide(n, exact(values)) * exact(bytes); }

I matrix_bytes(std::int64_t rows, std::int64_t cols, Held held, const std::string& model, Role role = Role::other) {
    const I n = exact(rows) * exact(cols);
    // The paper does not say which type each matrix of a mixed file has: the range llama-quantize's
    // choices span (engine/gguf_convert.hpp).
    const bool super = cols % 256 == 0;
    // Packed by 8 rows, Q4_K takes 1184 bytes where 8 blocks take 1152, and the rows are padded to 8.
    const I padded = exact((rows + 7) / 8 * 8) * exact(cols);
    const I q4_0 = block_bytes(n, 32, 18), q4_0_packed = block_bytes(padded, 32, 18);
    const I q4_k = block_bytes(n, 256, 144), q6_k = block_bytes(n, 256, 210), q6_k_packed = block_bytes(padded, 256, 210);
    switch (held) {
        case Held::q4_0:
            if (role == Role::output) return {q4_0.min, super ? q6_k_packed.max : matrix_bytes(rows, cols, Held::q8, model).max};
            return {q4_0.min, q4_0_packed.max};
        case Held::q4_k_m:  // rows that are not whole super-blocks: Q5_0 or Q8_0, both held as q8
            if (!super) return matrix_bytes(rows, cols, Held::q8, model);
            return {q4_k.min, q6_k_packed.max};
        case Held::q6_k:
            if (!super) return matrix_bytes(rows, cols, Held::q8, model);
            return {q6_k.min, q6_k_packed.max};
        case Held::f32: return n * exact(4);
        case Held::bf16:
        case Held::f16: return n * exact(2);
        case Held::q8: {
            if (cols % kQ8Group != 0)
                throw Unknown{"model " + model + " has a matrix of " + std::to_string(cols) + " columns, not a multiple of 32: anvil-engine " +
                              "cannot hold it in q8"};
            // Row-major with f32 scales (the reference level), or packed with f16 scales by 8 or 16
            // rows: the least and the most of the three.
            auto packed = [&](std::int64_t pack_rows) {
                const std::int64_t padded = (rows + pack_rows - 1) / pack_rows * pack_rows * cols;
                return padded + padded / kQ8Group * 2;
            };
            const std::int64_t row_major = rows * cols + rows * cols / kQ8Group * 4;
            return {std::min(row_major, packed(8)), std::max(row_major, packed(kQ8PackRows))};
        }
    }
    return {};
}

// Every matrix of the model (engine/weights.cpp): the embedding, per layer q, k, v, o, gate, up and
// down, and the LM head unless it is the embedding.
I matrices_bytes(const ModelShape& s, Held held, const std::string& model) {
    const std::int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
    I per_layer = matrix_bytes(q_dim, s.hidden_size, held, model) + matrix_bytes(kv_dim, s.hidden_size, held, model) * exact(2) +
                  matrix_bytes(s.hidden_size, q_dim, held, model) + matrix_bytes(s.intermediate_size, s.hidden_size, held, model) * exact(2) +
                  matrix_bytes(s.hidden_size, s.intermediate_size, held, model);
    const I embedding = matrix_bytes(s.vocab_size, s.hidden_size, held, model, s.tied_embeddings ? Role::output : Role::other);
    const I lm_head = s.tied_embeddings ? exact(0) : matrix_bytes(s.vocab_size, s.hidden_size, held, model, Role::output);
    return embedding + lm_head + per_layer * exact(s.layers);
}

// Norms and biases, always f32: mapped when stored so, converted otherwise.
I vectors_bytes(const ModelShape& s) {
    const std::int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
    I per_layer = exact(2) * exact(s.hidden_size);
    if (s.qkv_bias) per_layer = per_layer + exact(q_dim) + exact(2) * exact(kv_dim);
    if (s.qk_norm) per_layer = per_layer + exact(2) * exact(s.head_dim);
    return (per_layer * exact(s.layers) + exact(s.hidden_size)) * exact(4);
}

// Keys and values of every layer for every slot of every block (engine/kv_cache.cpp).
I kv_bytes(const ModelShape& s, std::int64_t blocks, const std::string& kv_dtype) {
    std::int64_t element = 0;
    if (kv_dtype == "f32") element = 4;
    else if (kv_dtype == "bf16") element = 2;
    else throw Unknown{"--kv-dtype '" + kv_dtype + "' is not one anvil-engine has (f32, bf16)"};
    return exact(2) * exact(s.layers) * exact(blocks) * exact(kEngineKvBlockTokens) * exact(s.kv_heads) * exact(s.head_dim) * exact(element);
}

// The pool anvil-engine makes (engine/engine.cpp's resolve_context and default_kv_blocks): without
// --max-context the model's own context, no longer than one sequence's share of the pool holds;
// without --kv-blocks max_seqs whole contexts within 4 GiB, never less than one whole context.
std::int64_t default_kv_blocks(const Settings& s, const ModelShape& shape) {
    // Wide arithmetic: launch arguments and shapes are untrusted, and their products can pass 2^63.
    using Wide = __int128;
    const Wide element = s.kv_dtype == "bf16" ? 2 : 4;
    const Wide block_bytes = std::max<Wide>(Wide(2) * shape.layers * kEngineKvBlockTokens * shape.kv_heads * shape.head_dim * element, 1);
    const Wide pool = s.kv_blocks > 0 ? Wide(s.kv_blocks) : (Wide(4) << 30) / block_bytes;
    Wide context = s.max_context;
    if (context == 0) {
        const Wide fits = pool > 1 ? (pool - 1) * kEngineKvBlockTokens : 0;
        context = std::min<Wide>(shape.max_position, std::max<Wide>(fits, 2));
    }
    if (s.kv_blocks > 0) return s.kv_blocks;
    const Wide per_sequence = (context + kEngineKvBlockTokens - 1) / kEngineKvBlockTokens + 1;
    const Wide budget = std::max<Wide>(pool, per_sequence);
    const Wide blocks = std::min<Wide>(Wide(s.max_seqs) * per_sequence, budget);
    if (blocks > Wide(std::numeric_limits<std::int32_t>::max()))
        throw Unknown{"the KV pool of " + std::to_string(static_cast<long long>(std::min<Wide>(blocks, Wide(INT64_MAX)))) +
                      " blocks is more than anvil-engine can make"};
    return static_cast<std::int64_t>(blocks);
}

std::string kv_how(const Settings& s, std::int64_t blocks) {
    return s.kv_dtype + ", " + std::to_string(blocks) + " blocks of " + std::to_string(kEngineKvBlockTokens) + " tokens";
}

// Logits rows the engine's target runner keeps for prompt logprobs, beyond one per sequence and
// its draft tokens (engine/engine.hpp's kPromptLogitRows).
constexpr std::int64_t kEnginePromptLogitRows = 32;
// What a GPU runner leaves for its CUDA graphs, cuBLAS's kernels and rounding (engine/runner.hpp).
constexpr std::int64_t kEngineDeviceHeadroom = std::int64_t(256) << 20;

// What a GPU runner allocates besides its weights and cache (engine/runner.cpp's
// device_working_bytes): activations for a batch of --max-batch-tokens, the logits rows, the rope
// tables, the batch's indices and each row's argmax, cuBLAS's bf16 scratch, and the headroom.
I working_bytes(const ModelShape& s, std::int64_t batch_tokens, std::int64_t logit_rows, std::int64_t context) {
    // Interval arithmetic throughout: shapes and launch arguments are untrusted, and it throws on overflow.
    const I n = exact(batch_tokens), rows = exact(logit_rows), dim = exact(s.hidden_size), hidden = exact(s.intermediate_size);
    const I q_dim = exact(s.heads) * exact(s.head_dim), kv_dim = exact(s.kv_heads) * exact(s.head_dim);
    const I rope = exact(2) * exact(context) * exact(s.head_dim / 2);
    const I activations = n * (exact(3) * dim + exact(2) * q_dim + exact(2) * kv_dim + exact(2) * hidden);
    const I logits = rows * (dim + exact(s.vocab_size));
    const I blocks = floor_divide(exact(context) + exact(kEngineKvBlockTokens - 1), exact(kEngineKvBlockTokens));
    const I indices = exact(3) * n + rows + n * blocks + rows;
    const I widest = exact(std::max(s.hidden_size, s.intermediate_size));
    const I scratch = exact(std::max(batch_tokens, logit_rows)) * (*q_dim.max > *widest.max ? q_dim : widest) * exact(2);
    return (rope + activations + logits) * exact(4) + indices * exact(4) + scratch + exact(kEngineDeviceHeadroom);
}

ModelShape shape_of(const ModelRef& m, const ModelShapeLookup& shapes, const std::string& role) {
    if (!shapes) throw Unknown{"the shape of the " + role + " " + m.path + " is unknown: nobody read its config.json"};
    ModelShapeReading r = shapes(m);
    if (!r.shape) throw Unknown{"the shape of the " + role + " " + m.path + " is unknown: " + r.problem};
    return *r.shape;
}

}  // namespace

std::string EmbeddedMemory::describe() const {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : " + ") + p.what + " (" + p.how + ") " + to_string(p.bytes);
    return out;
}

EmbeddedMemory estimate_embedded_memory(const Recipe& recipe, const ModelShapeLookup& shapes) {
    EmbeddedMemory out;
    // Each part is sized on its own: one that cannot be still lets the others be shown.
    auto part = [&](const std::string& what, auto size) {
        MemoryPart p{what, "", {}};
        try {
            auto [how, bytes] = size();
            p.how = std::move(how);
            p.bytes = bytes;
        } catch (const Unknown& u) {
            p.how = "unknown";
            out.unknowns.push_back(what + ": " + u.why);
        } catch (const ArithmeticOverflow& e) {
            p.how = "unknown";
            out.unknowns.push_back(what + ": " + e.what());
        }
        out.parts.push_back(std::move(p));
    };
    const Launch& l = recipe.launch;
    Settings settings;
    try {
        settings = settings_of(l);
    } catch (const Unknown& u) {
        out.unknowns.push_back(u.why);
        out.total = {};
        return out;
    }
    std::optional<ModelShape> target;
    std::string target_problem;
    if (!l.model) target_problem = "the recipe names no launch.model";
    else {
        try {
            target = shape_of(*l.model, shapes, "model");
        } catch (const Unknown& u) {
            target_problem = u.why;
        }
    }
    auto need_target = [&]() -> const ModelShape& {
        if (!target) throw Unknown{target_problem};
        return *target;
    };
    const std::string dtype = l.model ? l.model->dtype : "";
    const std::string model_name = l.model ? l.model->path : "";
    // Both caches have the target's blocks, sized on the target's shape (its context length when
    // --max-context is not given).
    std::int64_t blocks = 0;
    std::string blocks_problem = target_problem;
    try {
        if (target) blocks = default_kv_blocks(settings, *target);
        else if (settings.kv_blocks > 0) blocks = settings.kv_blocks;
    } catch (const Unknown& u) {
        blocks_problem = u.why;
    }
    auto need_blocks = [&]() {
        if (blocks == 0) throw Unknown{"the KV pool follows the model's shape: " + blocks_problem};
        return blocks;
    };

    part("target weights", [&] {
        const Held held = held_as(settings.weights, dtype, model_name);
        const ModelShape& s = need_target();
        return std::pair{std::string(name(held)) + (as_stored(held, dtype) ? ", as stored" : ""),
                         matrices_bytes(s, held, model_name) + vectors_bytes(s)};
    });
    part("target KV cache", [&] { return std::pair{kv_how(settings, need_blocks()), kv_bytes(need_target(), need_blocks(), settings.kv_dtype)}; });

    if (const auto& d = l.draft) {
        switch (d->kind) {
            case DraftKind::self: {
                part("draft weights", [&] {
                    const Held target_held = held_as(settings.weights, dtype, model_name);
                    const Held held = held_as(d->weights.value_or(""), dtype, model_name);
                    const ModelShape& s = need_target();
                    // A second copy of the target's weights in the draft's format; held as the
                    // target is held, the draft runs on the target's own tensors and adds nothing.
                    if (held == target_held) return std::pair{std::string("self ") + name(held) + ", the target's own tensors", exact(0)};
                    const bool shares_vectors = dtype == "f32";  // the norms, read from the files' mapping
                    I bytes = matrices_bytes(s, held, model_name);
                    if (!shares_vectors) bytes = bytes + vectors_bytes(s);
                    return std::pair{std::string("self ") + name(held), bytes};
                });
                part("draft KV cache", [&] { return std::pair{kv_how(settings, need_blocks()), kv_bytes(need_target(), need_blocks(), settings.kv_dtype)}; });
                break;
            }
            case DraftKind::model: {
                const ModelRef* m = d->model ? &*d->model : nullptr;
                std::optional<ModelShape> draft;
                std::string draft_problem = m ? "" : "the draft names no model";
                if (m) {
                    try {
                        draft = shape_of(*m, shapes, "draft model");
                    } catch (const Unknown& u) {
                        draft_problem = u.why;
                    }
                }
                auto need_draft = [&]() -> const ModelShape& {
                    if (!draft) throw Unknown{draft_problem};
                    return *draft;
                };
                part("draft weights", [&] {
                    const Held held = held_as(d->weights.value_or("stored"), m ? m->dtype : "", m ? m->path : "");
                    const ModelShape& s = need_draft();
                    return std::pair{std::string("model ") + name(held), matrices_bytes(s, held, m->path) + vectors_bytes(s)};
                });
                // The draft's runner takes the target's block count, so one block table serves both.
                part("draft KV cache", [&] { return std::pair{kv_how(settings, need_blocks()), kv_bytes(need_draft(), need_blocks(), settings.kv_dtype)}; });
                break;
            }
            case DraftKind::layers:
                part("draft", [&] { return std::pair{std::string("early exit: the target's own weights and KV cache"), exact(0)}; });
                break;
            case DraftKind::ngram:
                part("draft", [&] { return std::pair{std::string("prompt lookup: no model"), exact(0)}; });
                break;
        }
    }
    out.total = exact(0);
    for (const auto& p : out.parts) out.total = out.total + p.bytes;
    return out;
}

std::optional<double> embedded_gpu_fraction(const Launch& launch) {
    const auto text = last_flag_value(launch.arguments, "--gpu-memory-utilization");
    if (!text) return 0.9;  // engine/serve_command.hpp
    double v = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc() || end != text->data() + text->size() || !(v > 0.0 && v <= 1.0)) return std::nullopt;
    return v;
}

EmbeddedMemory estimate_embedded_gpu_memory(const Recipe& recipe, const ModelShapeLookup& shapes) {
    // The CPU estimate of the same recipe with a pool of one context: what the runner must hold.
    Recipe least = recipe;
    std::optional<Settings> settings;
    std::optional<ModelShape> target;
    std::int64_t context = 0;
    try {
        settings = settings_of(recipe.launch);
        if (recipe.launch.model) {
            target = shape_of(*recipe.launch.model, shapes, "model");
            // The context the engine serves (engine/engine.cpp's context_for on a GPU).
            context = settings->max_context;
            if (context == 0)
                context = settings->kv_blocks == 0 ? target->max_position
                                                   : std::min(target->max_position, std::max<std::int64_t>((settings->kv_blocks - 1) * kEngineKvBlockTokens, 2));
            if (settings->kv_blocks == 0) {
                const std::int64_t blocks = (context + kEngineKvBlockTokens - 1) / kEngineKvBlockTokens + 1;
                least.launch.arguments.insert(least.launch.arguments.end(), {"--kv-blocks", std::to_string(blocks)});
            }
        }
    } catch (const Unknown&) {
        // Left as it is: the estimate below says what cannot be sized.
    }
    EmbeddedMemory out = estimate_embedded_memory(least, shapes);
    if (!settings || !target || context == 0) return out;  // the estimate above says why
    // Each runner's working memory: the target's, and the draft's when it has a runner of its own.
    const auto& draft = recipe.launch.draft;
    const std::int64_t draft_tokens = draft ? draft->tokens : 0;
    const auto add = [&](const std::string& what, const ModelShape& shape, std::int64_t rows) {
        out.parts.push_back({what, std::to_string(settings->max_batch_tokens) + " batch tokens, " + std::to_string(rows) +
                                       " logits rows, " + std::to_string(context) + " positions, 256 MiB headroom",
                             working_bytes(shape, settings->max_batch_tokens, rows, context)});
        out.total = out.total + out.parts.back().bytes;
    };
    try {
        add("target working memory", *target, settings->max_seqs * (1 + draft_tokens) + kEnginePromptLogitRows);
        if (draft && draft->kind == DraftKind::self) add("draft working memory", *target, settings->max_seqs);
        if (draft && draft->kind == DraftKind::model && draft->model)
            add("draft working memory", shape_of(*draft->model, shapes, "draft model"), settings->max_seqs);
    } catch (const Unknown&) {
        // The draft model's shape: its weights' part already says why it is unknown.
    } catch (const ArithmeticOverflow& e) {
        out.unknowns.push_back(std::string("working memory: ") + e.what());
        out.total = {};
    }
    return out;
}

}  // namespace anvil::registry
