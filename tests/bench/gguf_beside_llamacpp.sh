#!/usr/bin/env bash
# Batch-1 decode and prefill of anvil-engine beside llama.cpp on the same GGUF file, for the formats
# ../shared/anchors/llamacpp/bench.sh does not know (it stops at f32, bf16 and q8): Q4_0, Q4_K_M and
# Q6_K as `anvil-engine convert` writes them, plus Q8_0, F32 and BF16 for one table.
#
#   tests/bench/gguf_beside_llamacpp.sh [--preset bench] [--threads "1 2"] [--formats "q4_k_m q4_0 q6_k q8"]
#                                       [--prompt 32] [--gen 128] [--reps 3] [--seed 1]
#                                       [--anvil-kv f32|bf16] [--kv f16|f32|bf16] [--llama-cpu VARIANT]
#                                       [--rounds 1]
#
# It runs the anchor's own tools, unchanged: anvil_http.py times anvil-engine (through
# anvil_on_gguf.sh, which serves MODEL.<type>.gguf with --weights stored), llama_greedy times
# llama.cpp on the very same file with the same prompt ids, threads, greedy decode and best of REPS
# (llama.cpp's defaults: f16 KV cache, flash attention auto; anvil keeps an f32 cache). ratio =
# anvil / llama.cpp. With --prompt 480 --gen 16 the prefill columns are a 480-token prefill (anvil's
# prefix cache is turned off for it: the timed request repeats the warm-up's prompt).
# Long contexts: a prompt past the anchor's 512 positions serves anvil with room for it, so
# --prompt 2000 --gen 64 times decode at a depth of 2000 tokens, where attention over the KV cache
# weighs; --anvil-kv and --kv choose the two engines' cache types (defaults f32 and f16).
# --llama-cpu haswell (with ANVIL_KERNELS=avx2) compares the AVX2 levels of both engines on a
# machine with more: llama.cpp's loader takes the best libggml-cpu-<variant>.so in its directory
# and the anchor's setup.sh copies every variant back on each call, so after it this removes all
# but VARIANT from $LLAMACPP_DIR/bin (give that a directory of its own). The header names the
# variant llama.cpp loaded.
# --rounds N times each row N times, the two engines taking turns to go first, and adds a median
# row: on a host whose memory bandwidth swings within minutes, one back-to-back pair can land on
# two phases, and only the ratios of pairs timed together, taken over several, settle a few percent.
# Run it on an idle machine; nothing here pins cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
anchor="$root/../shared/anchors/llamacpp"
dir="${LLAMACPP_DIR:-/tmp/llamacpp}"
engine="${ANVIL_ENGINE_BINARY:-$root/build/gcc/engine/anvil-engine}"
py=/usr/bin/python3
preset=bench threads="$(nproc)" formats="q4_k_m q4_0 q6_k q8" prompt=32 gen=128 reps=3 seed=1 anvil_kv=f32 kv=f16 llama_cpu="" rounds=1
while [ $# -gt 0 ]; do
    case "$1" in
        --preset) preset="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --formats) formats="$2"; shift 2 ;;
        --prompt) prompt="$2"; shift 2 ;;
        --gen) gen="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        --anvil-kv) anvil_kv="$2"; shift 2 ;;
        --kv) kv="$2"; shift 2 ;;
        --llama-cpu) llama_cpu="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        -h|--help) sed -n 2,28p "$0"; exit 0 ;;
        *) echo "gguf_beside_llamacpp.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$rounds" in '' | *[!0-9]* | 0) echo "gguf_beside_llamacpp.sh: --rounds $rounds: expected a count of 1 or more" >&2; exit 2 ;; esac
[ -x "$engine" ] || { echo "gguf_beside_llamacpp.sh: build anvil-engine first ($engine)" >&2; exit 2; }
[ -d "$anchor" ] || { echo "gguf_beside_llamacpp.sh: the llama.cpp anchor is not at $anchor" >&2; exit 2; }

bin="$("$anchor/setup.sh" 2>/dev/null | tail -1)"
if [ -n "$llama_cpu" ]; then
    [ -f "$bin/libggml-cpu-$llama_cpu.so" ] || { echo "gguf_beside_llamacpp.sh: --llama-cpu $llama_cpu: no $bin/libggml-cpu-$llama_cpu.so" >&2; exit 2; }
    for lib in "$bin"/libggml-cpu-*.so; do [ "$lib" = "$bin/libggml-cpu-$llama_cpu.so" ] || rm -f "$lib"; done
fi
model="$dir/models/$preset-s$seed"
mkdir -p "$dir/models"
[ -f "$model/config.json" ] || "$engine" make-model --out "$model" --preset "$preset" --seed "$seed" >&2
file_of() { case "$1" in q8) echo "$model.q8_0.gguf" ;; *) echo "$model.$1.gguf" ;; esac; }
for f in $formats; do
    case "$f" in f32 | bf16 | q8 | q4_0 | q4_k_m | q6_k) ;; *) echo "gguf_beside_llamacpp.sh: format $f: expected f32, bf16, q8, q4_0, q4_k_m or q6_k" >&2; exit 2 ;; esac
    g="$(file_of "$f")"
    [ -f "$g" ] || "$engine" convert --model "$model" --out "$g" --type "$(basename "$g" .gguf | sed 's/.*\.//')" >&2
done
ids="$("$py" "$anchor/anvil_http.py" prompt "$prompt")"
export ANVIL_ENGINE="$here/anvil_on_gguf.sh" ANVIL_ENGINE_BINARY="$engine" ANVIL_LOG_FILE="$dir/anvil-serve.log"
# The anchor serves anvil with --max-context 512; a later flag wins, so longer prompts get room.
context=$((prompt + gen + 16))
[ "$context" -lt 512 ] && context=512
export ANVIL_SERVE_EXTRA="--prefix-caching off --kv-dtype $anvil_kv --max-context $context"

flags="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16)$' | tr '\n' ' ')"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, flags: $flags, load $(cut -d' ' -f1-3 /proc/loadavg)"
variant="$("$bin/llama_greedy" -m "$(file_of "${formats%% *}")" --prompt 1 -n 1 -v 2>&1 | grep -o 'libggml-cpu-[a-z0-9_]*' | head -1 || true)"
echo "# anvil kernels: ${ANVIL_KERNELS:-best available}; llama.cpp $("$bin/llama-bench" --version 2>&1 | grep -m1 '^version' | cut -d' ' -f2-), CPU backend ${variant:-?}"
echo "# model $preset seed $seed; prompt $prompt ids, $gen generated, best of $reps; KV cache: anvil $anvil_kv, llama.cpp $kv"
echo "fmt     thr  file_MB  anvil_tok/s  llama_tok/s  ratio  anvil_prefill_ms  llama_prefill_ms"
anvil_time() {
    "$py" "$anchor/anvil_http.py" decode --model "$model" --weights "$1" --threads "$2" \
        --prompt-len "$prompt" --gen "$gen" --reps "$reps"
}
llama_time() { "$bin/llama_greedy" -m "$(file_of "$1")" -t "$2" --prompt "$ids" -n "$gen" --reps "$reps" --kv "$kv"; }
for t in $threads; do
    for f in $formats; do
        pairs=()
        for ((r = 1; r <= rounds; ++r)); do
            if ((r % 2)); then a="$(anvil_time "$f" "$t")"; l="$(llama_time "$f" "$t")"
            else l="$(llama_time "$f" "$t")"; a="$(anvil_time "$f" "$t")"; fi
            pairs+=("$a" "$l")
        done
        "$py" - "$f" "$t" "$(du -m "$(file_of "$f")" | cut -f1)" "${pairs[@]}" <<'EOF'
import json, statistics, sys
fmt, t, mb, *runs = sys.argv[1:]
runs = [json.loads(r) for r in runs]
num = lambda x: f"{x:.2f}" if x else "n/a"
ratios = []
for a, l in zip(runs[0::2], runs[1::2]):
    at, lt = a["decode_tok_s"], l["decode_tok_s"]
    if at and lt:
        ratios.append(at / lt)
    ratio = f"{at / lt:.2f}" if at and lt else "n/a"
    print(f"{fmt:7s} {t:>3s}  {mb:>7s}  {num(at):>11s}  {num(lt):>11s}  {ratio:>5s}  {a['prefill_ms']:16.2f}  {l['prefill_ms']:16.2f}")
if len(runs) > 2 and ratios:
    print(f"{fmt:7s} {t:>3s}  median of {len(ratios)} rounds: ratio {statistics.median(ratios):.2f} (from {min(ratios):.2f} to {max(ratios):.2f})")
EOF
    done
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
