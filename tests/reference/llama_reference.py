#!/usr/bin/python3
"""An independent reference for anvil-engine's forward pass: reads a Hugging Face model directory
(config.json and safetensors, sharded or not) with nothing but NumPy, and computes the logits of
every position of each token sequence in float64, the way Hugging Face's Llama, Qwen2, Qwen3 and
Mistral modelling code does.

usage: llama_reference.py --model DIR --tokens 1,2,3 [--tokens 4,5 ...] --out FILE [--bf16-inputs]
                          [--q8-weights [--q8-input-steps N]]
FILE receives, for each sequence in order, [len][vocab] little-endian float32 logits.
--bf16-inputs rounds the input of every product with a weight stored as bf16 to bf16 first (float32,
then round to nearest even), as an engine multiplying bf16 pairs in hardware does.
--q8-weights rounds every matrix to int8 with one float32 scale per group of 32 inputs (largest
magnitude / 127, round to nearest even), as the engine's --weights q8 does on load;
--q8-input-steps N rounds the inputs of those products the same way with N steps (127: int8 as
multiplied with AVX-512 VNNI; 32767: int16 as the other vector kernels do).
"""
import argparse
import json
import math
import os
import struct

import numpy as np


BF16_STORED = set()  # names of the tensors the files hold as bf16


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


def round_per_group(x, steps):
    """x rounded in float32 to `steps` levels each side of zero per group of 32 consecutive values,
    returned as the float64 values the rounding stands for."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    groups = x.reshape(*x.shape[:-1], -1, 32)
    scale = (np.abs(groups).max(axis=-1, keepdims=True) / np.float32(steps)).astype(np.float32)
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
    if Q8_INPUT_STEPS:
        x = round_per_group(x, Q8_INPUT_STEPS)
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
    if args.q8_input_steps and not args.q8_weights:
        parser.error("--q8-input-steps needs --q8-weights")
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    weights = load_weights(args.model)
    if args.q8_weights:
        global Q8_INPUT_STEPS
        Q8_INPUT_STEPS = args.q8_input_steps
        for name, value in weights.items():
            if value.ndim == 2:
                weights[name] = round_per_group(value, 127)
    with open(args.out, "wb") as f:
        for text in args.tokens:
            tokens = [int(t) for t in text.split(",")]
            f.write(forward(config, weights, tokens, args.bf16_inputs).astype("<f4").tobytes())


if __name__ == "__main__":
    main()
