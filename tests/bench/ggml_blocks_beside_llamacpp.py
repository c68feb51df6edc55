#!/usr/bin/python3
"""GGUF block formats beside ggml's own code: does llama.cpp read the blocks anvil-engine writes
and multiplies as anvil-engine reads them, and how close do the project's quantizers come to
llama-quantize's?

    ggml_blocks_beside_llamacpp.py QUANTIZED.gguf [--f32 SAME_MODEL.f32.gguf] [--lib libggml-base.so]

For each Q4_0, Q5_0, Q4_K and Q6_K tensor of QUANTIZED.gguf, ggml's dequantize_row_* (called in
llama.cpp's own libggml-base.so from ../shared/anchors/llamacpp/setup.sh, default
/tmp/llamacpp/bin) is set against tests/reference/llama_reference.py's dequantizers, which the
engine matches to float rounding (tests/unit/engine/test_engine_gguf.cpp): the largest difference must be
float rounding. With --f32 (the same model converted to F32 by `anvil-engine convert`, so the same
tensor names and row order), each tensor's F32 values are also quantized by ggml's
quantize_row_*_ref (llama-quantize without an importance matrix) and both quantizations' RMS error
against the F32 values is printed, with their ratio (anvil / ggml: below 1, anvil's is closer).
Exit status 1 when a tensor reads differently.
"""
import argparse
import ctypes
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import llama_reference as ref  # noqa: E402

NAMES = {2: "q4_0", 6: "q5_0", 12: "q4_K", 14: "q6_K"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--f32")
    ap.add_argument("--lib", default=os.path.join(os.environ.get("LLAMACPP_DIR", "/tmp/llamacpp"), "bin", "libggml-base.so"))
    a = ap.parse_args()
    if not os.path.exists(a.lib):
        raise SystemExit(f"{a.lib}: not there; run ../shared/anchors/llamacpp/setup.sh first")
    ggml = ctypes.CDLL(a.lib)
    f32 = {}
    if a.f32:
        f32 = {name: raw.view("<f4") for name, _, kind, raw in ref.gguf_tensors(a.f32)[1] if kind == 0}
    _, tensors = ref.gguf_tensors(a.gguf)
    differ = 0
    print(f"{'tensor':28s} {'type':5s} {'values':>9s}  {'max |anvil - ggml| read':>24s}"
          + (f"  {'rms anvil':>10s}  {'rms ggml':>10s}  {'ratio':>5s}" if a.f32 else ""))
    totals = {}
    for name, ne, kind, raw in tensors:
        if kind not in NAMES:
            continue
        n = int(np.prod(ne))
        ours = ref.GGUF_BLOCKS[kind][2](raw)
        theirs = np.empty(n, np.float32)
        getattr(ggml, f"dequantize_row_{NAMES[kind]}")(raw.ctypes.data_as(ctypes.c_void_p),
                                                       theirs.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
        # Both in float32: the same products, perhaps fused differently.
        worst = float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-30)))
        ok = worst <= 1e-6
        differ += not ok
        line = f"{name:28s} {NAMES[kind]:5s} {n:9d}  {worst:17.2e} {'ok' if ok else 'DIFFER':>6s}"
        if name in f32:
            source = np.ascontiguousarray(f32[name], np.float32)
            blocks = np.empty(raw.size, np.uint8)
            getattr(ggml, f"quantize_row_{NAMES[kind]}_ref")(source.ctypes.data_as(ctypes.c_void_p),
                                                             blocks.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
            ggml_values = ref.GGUF_BLOCKS[kind][2](blocks)
            rms_ours = float(np.sqrt(np.mean((ours.astype(np.float64) - source) ** 2)))
            rms_ggml = float(np.sqrt(np.mean((ggml_values.astype(np.float64) - source) ** 2)))
            t = totals.setdefault(NAMES[kind], [0.0, 0.0, 0])
            t[0] += rms_ours ** 2 * n
            t[1] += rms_ggml ** 2 * n
            t[2] += n
            line += f"  {rms_ours:10.3e}  {rms_ggml:10.3e}  {rms_ours / rms_ggml:5.3f}"
        print(line)
    for kind, (ours, theirs, n) in totals.items():
        print(f"# {kind}: rms error over {n} values: anvil {np.sqrt(ours / n):.4e}, ggml {np.sqrt(theirs / n):.4e}, "
              f"ratio {np.sqrt(ours / theirs):.3f}")
    print(f"# {differ} tensors read differently" if differ else "# every tensor reads alike")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
