#!/usr/bin/env bash
# The mission and codes steps of gpu-check.sh, run on the CPU, so that the
# scripts a GPU machine runs are known to work before one is lent:
#   - scripts/gpu-mission.sh: `coordinator --tp 2 --quantization fp8` (and
#     none) on the tiny preset gives `--tp 1`'s greedy tokens through
#     `octet generate --server --print_ids` (on the CPU as on the GPU);
#   - scripts/compare_codes.py: two `octet logits --activation_codes` runs
#     compare (1, 2 threads: equal codes), and a run whose first input's
#     codes were changed fails it.
#   gpu_check_steps_test.sh BIN_DIR SCRIPTS_DIR
set -euo pipefail
bin="$1"; scripts="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$bin/octet" make-model --preset tiny --out "$work/tiny" > /dev/null
"$scripts/gpu-mission.sh" "$bin" "$work/tiny" cpu | tee "$work/mission.txt"
grep -q '^mission tiny fp8: tp=2 == tp=1 (32 tokens)$' "$work/mission.txt"
grep -q '^mission tiny none: tp=2 == tp=1 (32 tokens)$' "$work/mission.txt"
grep -Eq '^tiny fp8 tp=1 on cpu: [0-9]+(,[0-9]+){31}$' "$work/mission.txt"

prompts='[[1,17,33,90,5,200,311,42],[2,3,4,5]]'
for threads in 1 2; do
  "$bin/octet" logits --model "$work/tiny" --prompts_json "$prompts" \
    --quantization fp8 --device cpu --threads "$threads" --activation_codes \
    > "$work/t$threads.json" 2> /dev/null
done
/usr/bin/python3 "$scripts/compare_codes.py" "$work/t1.json" "$work/t2.json" |
  tee "$work/codes.txt"
grep -q '^codes: first input 1.0000 equal (at least 0.95)' "$work/codes.txt"
# Every code of the first input moved by one: far below 95% equal.
/usr/bin/python3 - "$work/t2.json" "$work/bad.json" << 'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
first = doc["activations"][0]["codes"]
doc["activations"][0]["codes"] = [(c + 1) % 127 for c in first]
json.dump(doc, open(sys.argv[2], "w"))
PY
if /usr/bin/python3 "$scripts/compare_codes.py" "$work/t1.json" "$work/bad.json" > "$work/bad.txt"; then
  echo "compare_codes.py passed codes that all differ" >&2
  exit 1
fi
grep -q 'BELOW 0.95' "$work/bad.txt"
echo "gpu-check's mission and codes steps work on the CPU"
