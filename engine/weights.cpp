#include "engine/weights.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "kernels/convert.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"

namespace anvil::engine {

using kernels::WeightMatrix;
using kernels::WeightType;

WeightFormat parse_weight_format(const std::string& text) {
    if (text == "stored" || text == "auto") return WeightFormat::Stored;
    if (text == "f32") return WeightFormat::F32;
    if (text == "bf16") return WeightFormat::BF16;
    if (text == "q8") return WeightFormat::Q8;
    throw std::runtime_error("--weights " + text + ": expected f32, bf16, q8 or stored");
}

const char* weight_format_name(WeightFormat format) {
    switch (format) {
        case WeightFormat::Stored: return "stored";
        case WeightFormat::F32: return "f32";
        case WeightFormat::BF16: return "bf16";
        case WeightFormat::Q8: return "q8";
    }
    return "?";
}

size_t matrix_bytes(const WeightMatrix& m) {
    const size_t n = size_t(m.rows) * m.cols;
    switch (m.type) {
        case WeightType::F32: return n * 4;
        case WeightType::BF16:
        case WeightType::F16: return n * 2;
        case WeightType::Q8: return n + n / kernels::kQ8Group * 4;
        case WeightType::Q8Packed: {
            const size_t padded = size_t(kernels::q8_packed_blocks(m.rows)) * kernels::kQ8PackRows * m.cols;
            return padded + padded / kernels::kQ8Group * 2;
        }
        case WeightType::Q8Packed8: {
            const size_t padded = size_t(kernels::q8_packed8_blocks(m.rows)) * kernels::kQ8Pack8Rows * m.cols;
            return padded + padded / kernels::kQ8Group * 2;
        }
        case WeightType::Q4_0: return size_t(m.rows) * kernels::q4_0_row_bytes(m.cols);
        case WeightType::Q4_K: return size_t(m.rows) * kernels::q4_k_row_bytes(m.cols);
        case WeightType::Q6_K: return size_t(m.rows) * kernels::q6_k_row_bytes(m.cols);
        case WeightType::Q4_KPacked8: return kernels::q4_k_packed8_bytes(m.rows, m.cols);
        case WeightType::Q6_KPacked8:
        case WeightType::Q6_KPacked8Avx2: return kernels::q6_k_packed8_bytes(m.rows, m.cols);
        case WeightType::Q4_0Packed8: return kernels::q4_0_packed8_bytes(m.rows, m.cols);
    }
    return 0;
}

void* ModelWeights::allocate(size_t bytes) {
    void* p = owned_.allocate(bytes);
    if (!p) throw std::runtime_error("out of memory converting weights (" + std::to_string(bytes) + " bytes)");
    return p;
}

void stored_row_to_f32(const TensorInfo& t, int64_t r, int cols, float* out) {
    const uint8_t* base = t.data + size_t(r) * row_bytes(t.dtype, cols);
    switch (t.dtype) {
        case Dtype::Q8_0:
            for (int b = 0; b < cols / 32; ++b) {
                const uint8_t* block = base + size_t(b) * 34;
                uint16_t bits;
                std::memcpy(&bits, block, 2);
                const float d = kernels::f16_to_f32(bits);
                for (int k = 0; k < 32; ++k) out[b * 32 + k] = d * float(int8_t(block[2 + k]));
            }
            break;
        case Dtype::F32: std::memcpy(out, base, sizeof(float) * cols); break;
        case Dtype::BF16:
            for (int k = 0; k < cols; ++k) {
                uint16_t bits;
                std::memcpy(&bits, base + 2 * k, 2);
                out[k] = kernels::bf16_to_f32(bits);
            }
            break;
        case Dtype::F16:
            for (int k = 0; k < cols; ++k) {
                uint16_t bits;
                std::memcpy(&bits, base + 2 * k, 2);
                out[k] = kernels::f16_to_f32(bits);
            }
            break;
        case Dtype::Q4_0: kernels::dequantize_q4_0(base, size_t(cols), out); break;
        case Dtype::Q5_0: kernels::dequantize_q5_0(base, size_t(cols), out); break;
        case Dtype::Q4_K: kernels::dequantize_q4_k(base, size_t(cols), out); break;
        case Dtype::Q6_K: kernels::dequantize_q6_k(base, size_t(cols), out); break;
        case Dtype::Other: throw std::logic_error("unsupported dtype reached conversion");
    }
}

WeightMatrix ModelWeights::matrix(const std::string& name, int rows, int cols, WeightFormat format, bool streamed) {
    const TensorInfo& t = store_->get(name, {rows, cols});
    WeightType type = WeightType::F32;
    switch (format) {
        case WeightFormat::Stored:
            switch (t.dtype) {
                case Dtype::BF16: type = WeightType::BF16; break;
                case Dtype::F16: type = WeightType::F16; break;
                case Dtype::Q8_0:
                case Dtype::Q5_0: type = WeightType::Q8; break;
                case Dtype::Q4_0: type = WeightType::Q4_0; break;
                case Dtype::Q4_K: type = WeightType::Q4_K; break;
                case Dtype::Q6_K: type = WeightType::Q6_K; break;
                default: type = WeightType::F32; break;
            }
            break;
        case WeightFormat::F32: type = WeightType::F32; break;
        case WeightFormat::BF16: type = WeightType::BF16; break;
        case WeightFormat::Q8: type = WeightType::Q8; break;
    }
    WeightMatrix m{type, rows, cols, nullptr, nullptr};
    const bool same = (type == WeightType::F32 && t.dtype == Dtype::F32) || (type == WeightType::BF16 && t.dtype == Dtype::BF16) ||
                      (type == WeightType::F16 && t.dtype == Dtype::F16);
    if (same && reinterpret_cast<uintptr_t>(t.data) % 4 == 0) {
        if (streamed) kept_as_stored_ = true;
        // Read a row at a time, or uploaded to a GPU once: the mapping serves.
        if (!streamed || home_ == WeightHome::Device) {
            m.data = t.data;
            return m;
        }
        // Decode streams it every token: copied as it is onto huge pages (kernels/streamed_memory.hpp),
        // where the file's mapping has 4 KB pages. Bench-model decode, f32 as stored, 2 threads on the
        // Intel VM: 51-52 -> 54.4-54.6 tok/s (docs/PERFORMANCE.md).
        const size_t bytes = matrix_bytes(m);
        auto* copy = static_cast<uint8_t*>(allocate(bytes));
        constexpr size_t kSlice = size_t(1) << 20;
        const int64_t slices = int64_t((bytes + kSlice - 1) / kSlice);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < slices; ++i)
            std::memcpy(copy + size_t(i) * kSlice, t.data + size_t(i) * kSlice, std::min(kSlice, bytes - size_t(i) * kSlice));
        m.data = copy;
        return m;
    }
    if (kernels::is_ggml_block_type(type)) {
        // Where a vector level will multiply them, the blocks are interleaved by 8 rows for it
        // (kernels/ggml_blocks.hpp), as the q8 products' weights are, Q6_K's in the layout of the
        // level's byte products; otherwise the kernels read GGUF's blocks as the file holds them,
        // at any alignment.
        const kernels::Isa isa = kernels::active_isa();
        if (isa != kernels::Isa::Reference && home_ == WeightHome::Cpu) {
            struct Packing {
                WeightType as;
                size_t (*bytes)(int, int);
                void (*pack)(const uint8_t*, int, int, uint8_t*);
            };
            const Packing p = type == WeightType::Q4_K   ? Packing{WeightType::Q4_KPacked8, kernels::q4_k_packed8_bytes, kernels::pack_q4_k_rows8}
                              : type == WeightType::Q6_K && kernels::vnni_products(isa)
                                  ? Packing{WeightType::Q6_KPacked8, kernels::q6_k_packed8_bytes, kernels::pack_q6_k_rows8}
                              : type == WeightType::Q6_K ? Packing{WeightType::Q6_KPacked8Avx2, kernels::q6_k_packed8_bytes, kernels::pack_q6_k_rows8_avx2}
                                                         : Packing{WeightType::Q4_0Packed8, kernels::q4_0_packed8_bytes, kernels::pack_q4_0_rows8};
            auto* packed = static_cast<uint8_t*>(allocate(p.bytes(rows, cols)));
            p.pack(t.data, rows, cols, packed);
            m.type = p.as;
            m.data = packed;
            return m;
        }
        m.data = t.data;
        return m;
    }
    if (type == WeightType::Q8 && cols % kernels::kQ8Group != 0)
        throw std::runtime_error(t.file + ": tensor " + name + " has " + std::to_string(cols) +
                                 " columns, not a multiple of " + std::to_string(kernels::kQ8Group) +
                                 "; use --weights bf16 or f32 for this model");
    const size_t n = size_t(rows) * cols;
    switch (type) {
        case WeightType::F32: {
            float* out = static_cast<float*>(allocate(n * 4));
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; ++r) stored_row_to_f32(t, r, cols, out + size_t(r) * cols);
            m.data = out;
            break;
        }
        case WeightType::F16: {
            // Only ever stored F16 (no --weights asks for it) the mapping could not serve: copied.
            uint16_t* out = static_cast<uint16_t*>(allocate(n * 2));
            std::memcpy(out, t.data, n * 2);
            m.data = out;
            break;
        }
        case WeightType::BF16: {
            uint16_t* out = static_cast<uint16_t*>(allocate(n * 2));
#pragma omp parallel
            {
                std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
                for (int r = 0; r < rows; ++r) {
                    stored_row_to_f32(t, r, cols, row.data());
                    kernels::f32_to_bf16_array(row.data(), out + size_t(r) * cols, size_t(cols));
                }
            }
            m.data = out;
            break;
        }
        case WeightType::Q8: {
            const int groups = cols / kernels::kQ8Group;
            // Where the VNNI kernels will multiply it, the matrix is packed for them; where the AVX2
            // byte products will, packed by 8 rows for those (see kernels/weight_matrix.hpp). The
            // row-major copy is then only a step on the way.
            const kernels::Isa isa = kernels::active_isa();
            const bool cpu = home_ == WeightHome::Cpu;
            const bool vnni = cpu && kernels::vnni_products(isa);
            const bool rows8 = cpu && !vnni && isa != kernels::Isa::Reference;
            const bool pack = vnni || rows8;
            std::vector<int8_t> staging_values;
            std::vector<float> staging_scales;
            int8_t* out;
            float* scales;
            if (pack) {
                staging_values.resize(n);
                staging_scales.resize(n / kernels::kQ8Group);
                out = staging_values.data();
                scales = staging_scales.data();
            } else {
                out = static_cast<int8_t*>(allocate(n));
                scales = static_cast<float*>(allocate(size_t(rows) * groups * 4));
            }
#pragma omp parallel
            {
                std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
                for (int r = 0; r < rows; ++r) {
                    if (t.dtype == Dtype::Q8_0) {
                        // GGUF's Q8_0 already is this format, its scales in f16: the values are
                        // moved apart from the scales, nothing is rounded again.
                        static_assert(kernels::kQ8Group == 32);
                        const uint8_t* blocks = t.data + size_t(r) * row_bytes(t.dtype, cols);
                        for (int g = 0; g < groups; ++g) {
                            uint16_t bits;
                            std::memcpy(&bits, blocks + size_t(g) * 34, 2);
                            scales[size_t(r) * groups + g] = kernels::f16_to_f32(bits);
                            std::memcpy(out + size_t(r) * cols + size_t(g) * 32, blocks + size_t(g) * 34 + 2, 32);
                        }
                        continue;
                    }
                    if (t.dtype == Dtype::Q5_0) {
                        // Q5_0's values are 5-bit integers with an f16 scale: exactly q8, nothing rounded.
                        const uint8_t* blocks = t.data + size_t(r) * row_bytes(t.dtype, cols);
                        for (int g = 0; g < groups; ++g)
                            scales[size_t(r) * groups + g] = kernels::q5_0_block_to_int8(
                                blocks + size_t(g) * kernels::kQ5_0Bytes, out + size_t(r) * cols + size_t(g) * 32);
                        continue;
                    }
                    stored_row_to_f32(t, r, cols, row.data());
                    kernels::quantize_q8_row(row.data(), cols, out + size_t(r) * cols, scales + size_t(r) * groups);
                }
            }
            if (vnni) {
                const size_t padded = size_t(kernels::q8_packed_blocks(rows)) * kernels::kQ8PackRows * size_t(cols);
                auto* packed = static_cast<uint8_t*>(allocate(padded));
                auto* packed_scales = static_cast<uint16_t*>(allocate(padded / kernels::kQ8Group * 2));
                kernels::pack_q8(out, scales, rows, cols, packed, packed_scales);
                m.type = WeightType::Q8Packed;
                m.data = packed;
                m.scales_f16 = packed_scales;
            } else if (rows8) {
                const size_t padded = size_t(kernels::q8_packed8_blocks(rows)) * kernels::kQ8Pack8Rows * size_t(cols);
                auto* packed = static_cast<int8_t*>(allocate(padded));
                auto* packed_scales = static_cast<uint16_t*>(allocate(padded / kernels::kQ8Group * 2));
                kernels::pack_q8_rows8(out, scales, rows, cols, packed, packed_scales);
                m.type = WeightType::Q8Packed8;
                m.data = packed;
                m.scales_f16 = packed_scales;
            } else {
                m.data = out;
                m.scales = scales;
            }
            break;
        }
        case WeightType::Q8Packed:
        case WeightType::Q8Packed8: throw std::logic_error("packed q8 is made from q8, never asked for");
        case WeightType::Q4_0:
        case WeightType::Q4_K:
        case WeightType::Q6_K:
        case WeightType::Q4_KPacked8:
        case WeightType::Q6_KPacked8:
        case WeightType::Q4_0Packed8:
        case WeightType::Q6_KPacked8Avx2: throw std::logic_error("GGUF blocks are mapped or packed, never converted to");
    }
    return m;
}

const float* ModelWeights::vector(const std::string& name, int n) {
    const TensorInfo& t = store_->get(name, {n});
    if (t.dtype == Dtype::F32 && reinterpret_cast<uintptr_t>(t.data) % 4 == 0) return reinterpret_cast<const float*>(t.data);
    float* out = static_cast<float*>(allocate(size_t(n) * 4));
    stored_row_to_f32(t, 0, n, out);
    return out;
}

ModelWeights::ModelWeights(const ModelConfig& c, const std::filesystem::path& model_dir, WeightFormat format, WeightHome home)
    : home_(home), store_(std::make_unique<TensorStore>(model_dir)) {
    // Untied, the embedding is read a row a token; tied, it is the head as well, streamed whole.
    embedding = matrix("model.embed_tokens.weight", c.vocab_size, c.dim, format, c.tie_embeddings);
    layers.resize(size_t(c.n_layers));
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        LayerWeights& l = layers[size_t(i)];
        l.attn_norm = vector(p + "input_layernorm.weight", c.dim);
        l.wq = matrix(p + "self_attn.q_proj.weight", c.q_dim(), c.dim, format);
        l.wk = matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.dim, format);
        l.wv = matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.dim, format);
        l.wo = matrix(p + "self_attn.o_proj.weight", c.dim, c.q_dim(), format);
        if (c.qkv_bias) {
            l.bq = vector(p + "self_attn.q_proj.bias", c.q_dim());
            l.bk = vector(p + "self_attn.k_proj.bias", c.kv_dim());
            l.bv = vector(p + "self_attn.v_proj.bias", c.kv_dim());
        }
        if (c.qk_norm) {
            l.q_norm = vector(p + "self_attn.q_norm.weight", c.head_dim);
            l.k_norm = vector(p + "self_attn.k_norm.weight", c.head_dim);
        }
        l.ffn_norm = vector(p + "post_attention_layernorm.weight", c.dim);
        l.w_gate = matrix(p + "mlp.gate_proj.weight", c.hidden_dim, c.dim, format);
        l.w_up = matrix(p + "mlp.up_proj.weight", c.hidden_dim, c.dim, format);
        l.w_down = matrix(p + "mlp.down_proj.weight", c.dim, c.hidden_dim, format);
        for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) bytes_per_token_ += matrix_bytes(*m);
    }
    final_norm = vector("model.norm.weight", c.dim);
    if (c.tie_embeddings) {
        lm_head = embedding;
    } else {
        if (!store_->contains("lm_head.weight"))
            throw std::runtime_error(model_dir.string() + ": lm_head.weight is missing and config.json does not set "
                                     "tie_word_embeddings");
        lm_head = matrix("lm_head.weight", c.vocab_size, c.dim, format);
    }
    bytes_per_token_ += matrix_bytes(lm_head);
    spdlog::info("weights: {} tensors, {} MB as {} ({} MB read per token)", store_->tensor_count(),
                 store_->total_bytes() >> 20, weight_format_name(format), bytes_per_token_ >> 20);
}

}  // namespace anvil::engine
