#!/usr/bin/env bash
# llama.cpp side by side with the functional simulator on the same GGUF file (SmolLM2-135M-Instruct Q4_1
# from the model cache), prefill and decode tokens/s on 1 and 2 threads, and the simulator's ratio to it.
# Not part of CI: it builds llama.cpp (through the llama-cpp-python package) in a scratch virtual
# environment, which takes minutes and needs cmake and a C++ compiler.
#
#   bash scripts/bench_llama_cpp.sh [PROMPT_TOKENS [DECODE_TOKENS]]
#
# Environment: OPU_BENCH_VENV (default: $OPU_CACHE or ~/.cache/opu, then llama-cpp-venv), LLAMA_CPP_PYTHON
# (the package version, default 0.3.16).
set -euo pipefail
cd "$(dirname "$0")/.."
prompt_tokens=${1:-64}
decode_tokens=${2:-32}
cache=${OPU_CACHE:-$HOME/.cache/opu}
venv=${OPU_BENCH_VENV:-$cache/llama-cpp-venv}
version=${LLAMA_CPP_PYTHON:-0.3.16}

cargo build --release --locked --bin opu
opu=target/release/opu
model=$("$opu" fetch smollm2)

if ! "$venv/bin/python" -c "import llama_cpp; assert llama_cpp.__version__ == '$version'" 2>/dev/null; then
    echo "building llama-cpp-python $version in $venv (minutes)" >&2
    python3 -m venv "$venv"
    # a native build for this CPU (AVX2 where it has it), CPU only
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF" "$venv/bin/pip" install --quiet "llama-cpp-python==$version"
fi

for threads in 1 2; do
    sim=$(RAYON_NUM_THREADS=$threads "$opu" bench --backend sim --threads "$threads" --model "$model" \
        --prompt-tokens "$prompt_tokens" --decode-tokens "$decode_tokens" --json)
    "$venv/bin/python" - "$model" "$threads" "$prompt_tokens" "$decode_tokens" "$sim" <<'PY'
import json, sys, time
import llama_cpp
from llama_cpp import Llama

model, threads, n_prompt, n_decode, sim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])[0]
llm = Llama(model_path=model, n_ctx=max(512, n_prompt + n_decode + 8), n_batch=max(n_prompt, 8), n_threads=threads,
            n_threads_batch=threads, verbose=False)
# the token sequence opu bench uses: this text's tokens repeated
seed = llm.tokenize(b"The quick brown fox jumps over the lazy dog. In 1984, a little robot learned to count: 1, 2, 3.", add_bos=False)
prompt = (seed * (n_prompt // len(seed) + 1))[:n_prompt]

def run():
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    for i in range(n_decode):
        llm.eval([seed[i % len(seed)]])
    t2 = time.perf_counter()
    return n_prompt / (t1 - t0), n_decode / (t2 - t1)

run()  # warm-up, as opu bench does
prefill, decode = run()
sp, sd = sim["prefill_tokens_per_second"], sim["decode_tokens_per_second"]
print(f"{threads} thread(s), {n_prompt} prompt tokens, {n_decode} decode steps:")
print(f"  llama.cpp ({llama_cpp.__version__}): prefill {prefill:8.1f} tok/s  decode {decode:6.1f} tok/s")
print(f"  opu sim:          prefill {sp:8.1f} tok/s  decode {sd:6.1f} tok/s")
print(f"  sim / llama.cpp:  prefill {sp / prefill:8.3f}x      decode {sd / decode:6.3f}x")
PY
done
