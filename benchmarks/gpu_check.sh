#!/usr/bin/env bash
# The language-model half's device check, as one call on a lent CUDA machine:
#
#     BENCH_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu_check.sh OUT_DIR
#
# 1. the sampling tests that run on CUDA (the decode step replayed as a CUDA graph);
# 2. benchmarks/gpu_update_profile.py: the forward/backward pass alone, ours beside TRL's computation;
# 3. benchmarks/gpu_step.py: one GRPO step, ours against TRL's GRPOTrainer (both systems).
# Each writes its record and log under OUT_DIR as it goes, so a call stopped at its time limit
# still returns what finished.
#
# The machine needs what its image lacks in .gpu/ (ignored by git; carry it): the wheels of trl,
# datasets, dill, multiprocess, gymnasium, farama-notifications and sybil (the tests' conftest) for
# its Python, SmolLM2-135M-Instruct's config.json and tokenizer files in .gpu/tok/, and GSM8K rows in
# .gpu/prompts.jsonl. Here (pip reaching PyPI), for a Python 3.12 x86-64 machine:
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux2014_x86_64 -d .gpu trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
#         multiprocess==0.70.19 gymnasium==1.4.0 farama-notifications==0.0.6 sybil==10.1.0
#     head -n 24 ../shared/data/gsm8k/train.jsonl > .gpu/prompts.jsonl
# and copy the tokenizer files of the SmolLM2 folder grpo_seq.io.models loads into .gpu/tok/.
set -o pipefail
out=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
quiet() { grep -v "Writing model\|Loading\|USDT"; }
timeout 90 python3 -m pytest -q -p no:cacheprovider -n 0 tests/generation -k static 2>&1 | tail -15 | tee "$out/tests.log"
timeout 150 python3 benchmarks/gpu_update_profile.py --tokenizer .gpu/tok --out "$out/profile.json" 2>&1 | quiet | tee "$out/profile.log"
timeout 330 python3 benchmarks/gpu_step.py --tokenizer .gpu/tok --data .gpu/prompts.jsonl --out "$out/result.json" 2>&1 | quiet | tee "$out/step.log"
