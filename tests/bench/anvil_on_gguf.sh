#!/usr/bin/env bash
# anvil-engine serving the GGUF files of ../shared/anchors/llamacpp/ instead of their model
# directories, so that its bench.sh and compare.py time and check both engines on the same file:
#
#   ANVIL_ENGINE=tests/bench/anvil_on_gguf.sh ../shared/anchors/llamacpp/bench.sh --formats "f32 q8"
#
# Those scripts run `ANVIL_ENGINE serve --model DIR --weights F ...`; this runs
# `anvil-engine serve --model DIR.<type>.gguf --weights stored ...` with F's GGUF type (f32 ->
# f32, bf16 -> bf16, q8 -> q8_0, and q4_0, q4_k_m, q6_k as they are): the very file llama.cpp is
# given there (st2gguf.py's, or `anvil-engine convert`'s when none is there yet: their tensors are
# the same bytes; the quantized mixes only anvil-engine convert writes, see
# gguf_beside_llamacpp.sh), read as the file holds it. Anything else passes through unchanged.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
engine="${ANVIL_ENGINE_BINARY:-$here/../../build/gcc/engine/anvil-engine}"
[ "${1:-}" = serve ] || exec "$engine" "$@"
args=("$@")
model="" weights=""
for ((i = 1; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --model) model="${args[i + 1]}" ;;
        --weights) weights="${args[i + 1]}" ;;
    esac
done
if [ -n "$model" ] && [ -d "$model" ] && [ -n "$weights" ]; then
    case "$weights" in
        f32) type=f32 ;; bf16) type=bf16 ;; q8) type=q8_0 ;; q4_0 | q4_k_m | q6_k) type="$weights" ;; *) type="" ;;
    esac
    if [ -n "$type" ]; then
        file="${model%/}.$type.gguf"
        [ -f "$file" ] || "$engine" convert --model "$model" --out "$file" --type "$type" >&2
        for ((i = 1; i < ${#args[@]}; i++)); do
            case "${args[i]}" in
                --model) args[i + 1]="$file" ;;
                --weights) args[i + 1]=stored ;;
            esac
        done
    fi
fi
# ANVIL_SERVE_EXTRA adds flags to serve, e.g. "--prefix-caching off": anvil_http.py's prefill time is
# its one-token request after a warm-up with the same prompt, which the prefix cache would answer.
[ -n "${ANVIL_SERVE_EXTRA:-}" ] && read -r -a extra <<<"$ANVIL_SERVE_EXTRA" && args+=("${extra[@]}")
exec "$engine" "${args[@]}"
