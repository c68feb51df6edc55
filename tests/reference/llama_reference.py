#!/usr/bin/python3
"""An independent reference for anvil-engine's forward pass: reads a Hugging Face model directory
(config.json and safetensors, sharded or not) or a GGUF file (F32, F16, BF16, Q8_0, Q4_0, Q4_K and
Q6_K tensors and Q5_0, dequantized exactly as ggml's dequantize_row_* defines them, in float32; the llama architecture's permuted q and k rows put back in Hugging Face's
order) with nothing but NumPy, and computes the logits of every position of each token sequence in
float64, the way Hugging Face's Llama, Qwen2, Qwen3 and Mistral modelling code does.

usage: llama_reference.py --model DIR --tokens 1,2,3 [--tokens 4,5 ...] --out FILE [--bf16-inputs]
                          [--q8-weights [--q8-input-steps N]]
FILE receives, for each sequence in order, [len][vocab] little-endian float32 logits.
--bf16-inputs rounds the input of every product with a weight stored as bf16 to bf16 first (float32,
then round to nearest even), as an engine multiplying bf16 pairs in hardware does.
--q8-weights rounds every matrix to int8 with one scale per group of 32 inputs (largest magnitude /
127 rounded to float16, as GGUF's Q8_0 stores it; values rounded to nearest even against it), as the
engine's --weights q8 does on load;
--q8-input-steps N rounds the inputs of those products (and of those with a GGUF file's Q8_0 or
Q4_0 weights) the same way with N steps (127: int8, as every vector level of the engine multiplies
them), and those of products with Q4_K or Q6_K weights per group of 256 (llama.cpp's q8_K).
"""
import argparse
import json
import math
import os
import struct

import numpy as np


BF16_STORED = set()  # names of the tensors the files hold as bf16
Q8_PRODUCTS = set()  # names of the matrices multiplied as q8: GGUF Q8_0 ones, or all with --q8-weights
INPUT_GROUP = {}  # per matrix in Q8_PRODUCTS: how many inputs share one rounding scale (default 32)


def f16(raw):
    return raw.copy().view("<f2").astype(np.float32)


def dequantize_q4_0(raw):
    """Q4_0 blocks (f16 d, 16 bytes: low nibbles values 0-15, high 16-31): d * (q - 8)."""
    b = raw.reshape(-1, 18)
    d = f16(b[:, :2])
    q = np.concatenate([b[:, 2:] & 15, b[:, 2:] >> 4], axis=1).astype(np.float32) - 8
    return (d * q).reshape(-1)


def dequantize_q5_0(raw):
    """Q5_0 blocks (f16 d, 4 bytes of fifth bits, 16 bytes of nibbles as Q4_0's): d * (q - 16)."""
    b = raw.reshape(-1, 22)
    d = f16(b[:, :2])
    high = b[:, 2:6].copy().view("<u4").astype(np.uint32)
    bits = ((high >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)
    q = np.concatenate([b[:, 6:] & 15, b[:, 6:] >> 4], axis=1).astype(np.int32) | (bits << 4)
    return (d * (q - 16).astype(np.float32)).reshape(-1)


def dequantize_q4_k(raw):
    """Q4_K super-blocks: f16 d and dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles."""
    b = raw.reshape(-1, 144)
    d, dmin, s, qs = f16(b[:, 0:2]), f16(b[:, 2:4]), b[:, 4:16].astype(np.int32), b[:, 16:]
    sc = np.empty((len(b), 8), np.int32)
    m = np.empty((len(b), 8), np.int32)
    for j in range(8):  # ggml's get_scale_min_k4
        if j < 4:
            sc[:, j], m[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
            m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    out = np.empty((len(b), 256), np.float32)
    for c in range(4):
        chunk = qs[:, 32 * c:32 * c + 32]
        for half, q in ((0, chunk & 15), (1, chunk >> 4)):
            j = 2 * c + half
            scale = d * sc[:, j:j + 1].astype(np.float32)
            offset = dmin * m[:, j:j + 1].astype(np.float32)
            out[:, 32 * j:32 * j + 32] = scale * q.astype(np.float32) - offset
    return out.reshape(-1)


def dequantize_q6_k(raw):
    """Q6_K super-blocks: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, f16 d."""
    b = raw.reshape(-1, 210)
    d = f16(b[:, 208:210])
    scales = b[:, 192:208].copy().view(np.int8).astype(np.float32)
    out = np.empty((len(b), 256), np.float32)
    for h in range(2):
        ql, qh = b[:, 64 * h:64 * h + 64].astype(np.int32), b[:, 128 + 32 * h:160 + 32 * h].astype(np.int32)
        quarters = [(ql[:, :32] & 15) | ((qh & 3) << 4), (ql[:, 32:] & 15) | (((qh >> 2) & 3) << 4),
                    (ql[:, :32] >> 4) | (((qh >> 4) & 3) << 4), (ql[:, 32:] >> 4) | (((qh >> 6) & 3) << 4)]
        for k, q in enumerate(quarters):
            start = 128 * h + 32 * k
            for half in range(2):
                scale = d * scales[:, start // 16 + half:start // 16 + half + 1]
                out[:, start + 16 * half:start + 16 * half + 16] = scale * (q[:, 16 * half:16 * half + 16] - 32)
    return out.reshape(-1)


# ggml type: (values per block, bytes per block, dequantizer, inputs per rounding scale)
GGUF_BLOCKS = {2: (32, 18, dequantize_q4_0, 32), 6: (32, 22, dequantize_q5_0, 32), 12: (256, 144, dequantize_q4_k, 256), 14: (256, 210, dequantize_q6_k, 256)}
# ggml type: (values per block, bytes per block) of every type the reference reads
GGML_SIZES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), **{k: v[:2] for k, v in GGUF_BLOCKS.items()}}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = entry["dtype"]
        if dtype == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            array = np.frombuffer(raw, dtype="<f2")
        elif dtype == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            BF16_STORED.add(name)
        else:
            raise SystemExit(f"{path}: {name} has dtype {dtype}, which the reference does not read")
        tensors[name] = array.astype(np.float64).reshape(entry["shape"])
    return tensors


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for file in files:
        weights.update(read_safetensors(os.path.join(model_dir, file)))
    return weights


# GGUF value types: struct format and size of the scalar ones.
GGUF_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
                6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
}
GGUF_MODEL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                    "output.weight": "lm_head.weight"}


def gguf_tensors(path):
    """(metadata, [(name, ne, ggml type, raw bytes as a uint8 array)]) of a GGUF file."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt, size):
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += size
        return value

    def string():
        nonlocal pos
        n = take("<Q", 8)
        pos += n
        return data[pos - n:pos].decode("utf-8", errors="replace")

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            inner, count = take("<I", 4), take("<Q", 8)
            return [value(inner) for _ in range(count)]
        fmt, size = GGUF_SCALARS[kind]
        return take(fmt, size)

    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    pos = 4
    take("<I", 4)
    n_tensors, n_kv = take("<Q", 8), take("<Q", 8)
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I", 4))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("<Q", 8) for _ in range(take("<I", 4))]
        infos.append((name, ne, take("<I", 4), take("<Q", 8)))
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = []
    for name, ne, kind, offset in infos:
        per, size = GGML_SIZES.get(kind, (None, None))
        if per is None:
            raise SystemExit(f"{path}: {name} has ggml type {kind}, which the reference does not read")
        count = int(np.prod(ne))
        tensors.append((name, ne, kind, np.frombuffer(data, np.uint8, count // per * size, base + offset)))
    return meta, tensors


def read_gguf(path):
    """(config as a Hugging Face config.json would hold it, weights by Hugging Face name)."""
    meta, tensors = gguf_tensors(path)
    raw_tensors = {}
    q8, bf16, groups = set(), set(), {}
    for name, ne, kind, raw in tensors:
        if kind == 0:
            array = raw.view("<f4").astype(np.float64)
        elif kind == 1:
            array = raw.view("<f2").astype(np.float64)
        elif kind == 30:
            array = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            bf16.add(name)
        elif kind == 8:
            blocks = raw.reshape(-1, 34)
            scale = blocks[:, :2].copy().view("<f2").astype(np.float64)
            array = (blocks[:, 2:].copy().view(np.int8).astype(np.float64) * scale).reshape(-1)
            q8.add(name)
        else:
            _, _, dequantize, group = GGUF_BLOCKS[kind]
            array = dequantize(raw).astype(np.float64)
            q8.add(name)
            groups[name] = group
        raw_tensors[name] = array.reshape(list(reversed(ne)))

    arch = meta["general.architecture"]
    a = arch + "."
    n_heads = meta[a + "attention.head_count"]
    n_kv = meta.get(a + "attention.head_count_kv", n_heads)
    dim = meta[a + "embedding_length"]
    head_dim = meta.get(a + "attention.key_length", dim // n_heads)
    window = meta.get(a + "attention.sliding_window")
    config = {
        "architectures": [{"llama": "MistralForCausalLM" if window else "LlamaForCausalLM",
                           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]],
        "hidden_size": dim, "num_attention_heads": n_heads, "num_key_value_heads": n_kv, "head_dim": head_dim,
        "num_hidden_layers": meta[a + "block_count"], "rms_norm_eps": meta[a + "attention.layer_norm_rms_epsilon"],
        "rope_theta": meta.get(a + "rope.freq_base", 10000.0), "sliding_window": window,
        "tie_word_embeddings": "output.weight" not in raw_tensors,
    }
    if meta.get(a + "rope.scaling.type") == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": meta[a + "rope.scaling.factor"]}
    if "rope_freqs.weight" in raw_tensors:
        config["rope_freq_factors"] = raw_tensors["rope_freqs.weight"].tolist()

    def unpermute(t, heads):
        # convert_hf_to_gguf's permute interleaved each head's two halves; put them back.
        return t.reshape(heads, t.shape[0] // heads // 2, 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    weights = {}
    for name, array in raw_tensors.items():
        hf, rest = GGUF_MODEL_NAMES.get(name), ""
        if hf is None and name.startswith("blk."):
            layer, rest = name[4:].split(".", 1)
            hf = f"model.layers.{layer}." + GGUF_LAYER_NAMES[rest] if rest in GGUF_LAYER_NAMES else None
        if hf is None:
            continue
        if arch == "llama" and (rest.startswith("attn_q.") or rest.startswith("attn_k.")):
            array = unpermute(array, n_heads if rest.startswith("attn_q.") else n_kv)
        weights[hf] = array
        if name in q8:
            Q8_PRODUCTS.add(hf)
            INPUT_GROUP[hf] = groups.get(name, 32)
        if name in bf16:
            BF16_STORED.add(hf)
    return config, weights


def inverse_frequencies(config, head_dim):
    theta = config.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = config.get("rope_scaling")
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "linear":
            inv = inv / scaling["factor"]
        elif kind == "llama3":
            factor = scaling["factor"]
            low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
            old = scaling["original_max_position_embeddings"]
            low_wavelen, high_wavelen = old / low, old / high
            out = []
            for f in inv:
                wavelen = 2 * math.pi / f
                if wavelen < high_wavelen:
                    out.append(f)
                elif wavelen > low_wavelen:
                    out.append(f / factor)
                else:
                    smooth = (old / wavelen - low) / (high - low)
                    out.append((1 - smooth) * f / factor + smooth * f)
            inv = np.array(out)
    if config.get("rope_freq_factors"):
        inv = inv / np.array(config["rope_freq_factors"])
    return inv


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate(x, cos, sin):
    # "rotate half": element i pairs with i + head_dim / 2.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def round_to_bf16(x):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def round_per_group(x, steps, group=32, f16_scales=False):
    """x rounded in float32 to `steps` levels each side of zero per group of `group` consecutive
    values, returned as the float64 values the rounding stands for; with f16_scales each group's
    scale is rounded to float16 first (q8 weights)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    groups = x.reshape(*x.shape[:-1], -1, group)
    scale = (np.abs(groups).max(axis=-1, keepdims=True) / np.float32(steps)).astype(np.float32)
    if f16_scales:
        scale = np.minimum(scale, np.float32(65504)).astype(np.float16).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))
    inverse = np.where(scale > 0, np.float32(1) / safe, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(groups * inverse), -steps, steps)
    return (q.astype(np.float64) * scale.astype(np.float64)).reshape(x.shape)


Q8_INPUT_STEPS = 0  # 0: inputs of q8 products as they are


def product(x, w, name, bf16_inputs):
    """x @ w[name].T, with x rounded to bf16 first where the weight is stored as bf16 and asked, or
    per group where the weights are q8 and asked."""
    if bf16_inputs and name in BF16_STORED:
        x = round_to_bf16(x)
    if Q8_INPUT_STEPS and name in Q8_PRODUCTS:
        x = round_per_group(x, Q8_INPUT_STEPS, INPUT_GROUP.get(name, 32))
    return x @ w[name].T


def forward(config, w, tokens, bf16_inputs=False):
    arch = config["architectures"][0]
    dim = config["hidden_size"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_heads)
    head_dim = config.get("head_dim") or dim // n_heads
    eps = config.get("rms_norm_eps", 1e-6)
    window = config.get("sliding_window") if arch == "MistralForCausalLM" else None
    n = len(tokens)

    inv = inverse_frequencies(config, head_dim)
    angles = np.outer(np.arange(n, dtype=np.float64), inv)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    mask = np.tril(np.ones((n, n), dtype=bool))
    if window:
        mask &= np.triu(np.ones((n, n), dtype=bool), k=-(window - 1))

    x = w["model.embed_tokens.weight"][tokens]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = product(h, w, p + "self_attn.q_proj.weight", bf16_inputs)
        k = product(h, w, p + "self_attn.k_proj.weight", bf16_inputs)
        v = product(h, w, p + "self_attn.v_proj.weight", bf16_inputs)
        if p + "self_attn.q_proj.bias" in w:
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q = q.reshape(n, n_heads, head_dim)
        k = k.reshape(n, n_kv, head_dim)
        v = v.reshape(n, n_kv, head_dim)
        if arch == "Qwen3ForCausalLM":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = n_heads // n_kv
        out = np.zeros((n, n_heads, head_dim))
        for head in range(n_heads):
            scores = q[:, head, :] @ k[:, head // group, :].T / math.sqrt(head_dim)
            scores = np.where(mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            out[:, head, :] = scores @ v[:, head // group, :]
        x = x + product(out.reshape(n, n_heads * head_dim), w, p + "self_attn.o_proj.weight", bf16_inputs)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = product(h, w, p + "mlp.gate_proj.weight", bf16_inputs)
        up = product(h, w, p + "mlp.up_proj.weight", bf16_inputs)
        x = x + product(gate / (1 + np.exp(-gate)) * up, w, p + "mlp.down_proj.weight", bf16_inputs)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = "model.embed_tokens.weight" if config.get("tie_word_embeddings") else "lm_head.weight"
    return product(x, w, head, bf16_inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", action="append", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--bf16-inputs", action="store_true")
    parser.add_argument("--q8-weights", action="store_true")
    parser.add_argument("--q8-input-steps", type=int, default=0)
    args = parser.parse_args()
    if os.path.isfile(args.model):
        config, weights = read_gguf(args.model)
    else:
        with open(os.path.join(args.model, "config.json")) as f:
            config = json.load(f)
        weights = load_weights(args.model)
    if args.q8_input_steps and not (args.q8_weights or Q8_PRODUCTS):
        parser.error("--q8-input-steps needs --q8-weights or a GGUF file with Q8_0, Q4_0, Q4_K or Q6_K weights")
    global Q8_INPUT_STEPS
    Q8_INPUT_STEPS = args.q8_input_steps
    if args.q8_weights:
        for name, value in weights.items():
            if value.ndim == 2:
                weights[name] = round_per_group(value, 127, f16_scales=True)
                Q8_PRODUCTS.add(name)
    with open(args.out, "wb") as f:
        for text in args.tokens:
            tokens = [int(t) for t in text.split(",")]
            f.write(forward(config, weights, tokens, args.bf16_inputs).astype("<f4").tobytes())


if __name__ == "__main__":
    main()
