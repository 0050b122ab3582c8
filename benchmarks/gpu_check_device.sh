#!/bin/bash
# The prepared device run of benchmarks/gpu_check.py: flat RL, tree rollouts and LoRA on one GPU, each under its own
# time limit, results copied to $OUT (the device tool's output folder). The device's image has torch and
# transformers but not this project or gymnasium/pydantic/jsonschema: build their wheels here first, into .whl/
# (ignored by git, carried with the run):
#   mkdir -p .whl && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w .whl . ./agents ./envs/textworld
#   .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl gymnasium==1.4.0 \
#     Farama-Notifications==0.0.6 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
#     typing-inspection==0.4.5 jsonschema==4.26.0 jsonschema-specifications referencing==0.37.0 rpds-py
# then run `bash benchmarks/gpu_check_device.sh` on the device with .whl carried (about 4 MB).
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
LOG=$OUT/all.log
{ date; nvidia-smi -L; nproc; } > "$LOG" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >> "$LOG" 2>&1 || { echo "pip install of .whl/ failed" >> "$LOG"; tail -c 11000 "$LOG"; exit 3; }
export PYTHONPATH=/tmp/site
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
torch.cuda.get_device_name(0))" >> "$LOG" 2>&1
run() {  # name, time limit in seconds, gpu_check arguments; returns gpu_check's exit status
  local name=$1 limit=$2 rc
  shift 2
  echo "=== $name $(date +%T) $*" >> "$LOG"
  timeout "$limit" python3 benchmarks/gpu_check.py --device cuda --out "/tmp/gc_$name" "$@" >> "$LOG" 2>&1
  rc=$?
  echo "=== $name rc=$rc $(date +%T)" >> "$LOG"
  case $name in smoke_*) ;; *)
    cp "/tmp/gc_$name/gpu_check.json" "$OUT/$name.json" 2>/dev/null
    cp "/tmp/gc_$name/run/metrics.jsonl" "$OUT/${name}_metrics.jsonl" 2>/dev/null ;;
  esac
  return $rc
}
# First every path on a ~0.1M-parameter model (seconds each): a device defect shows for all three at once. Then the
# ~110M runs, only for the paths whose smoke run passed.
TREE="--override rollout.sampler=tree"
LORA="--override model.lora.rank=16 --override model.lora.alpha=32"
run smoke_flat 90 --tiny --steps 2 && ok_flat=1
run smoke_tree 90 --tiny --steps 2 $TREE && ok_tree=1
run smoke_lora 90 --tiny --steps 2 $LORA && ok_lora=1
[ -n "$ok_flat" ] && run flat 250 --steps 10
[ -n "$ok_tree" ] && run tree 110 --steps 4 $TREE
[ -n "$ok_lora" ] && run lora 80 --steps 3 $LORA
grep -E "^=== |Error|error:" "$LOG" | tail -40
tail -c 8000 "$LOG"
