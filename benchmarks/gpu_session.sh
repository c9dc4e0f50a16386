#!/usr/bin/env bash
# One lease of a GPU machine, everything in one call: the environment, the gather probe,
# the GPU tests and the restore benchmark, each under its own time limit so one stage
# cannot eat the others'. Outputs go to $OUT (default ./gpu_out), named by TAG.
#
#   bash benchmarks/gpu_session.sh TAG [STAGES]
#   STAGES: any of env,probe,bench,split,tests,bench2,before,info
#   (split: benchmarks/probe_split.py; bench2: the benchmark again, to see two runs on one
#   machine agree; before: the benchmark as it was at another tree, in $BEFORE_TREE)
set -u
TAG=${1:?usage: gpu_session.sh TAG [STAGES]}
STAGES=${2:-env,probe,bench,split,tests,bench2,before,info}
OUT=${OUT:-gpu_out}
BUDGET=${BUDGET_S:-560}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
stage() { # stage NAME CAP CMD...: runs CMD for at most min(CAP, time left - 10 s)
  local name=$1 cap=$2; shift 2
  case ",$STAGES," in *",$name,"*) ;; *) return 0 ;; esac
  local t; t=$(left); t=$((t - 10)); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -le 5 ]; then echo "## $name: skipped, no time left"; return 0; fi
  echo "## $name (limit ${t}s) at $(date -u +%H:%M:%S): $*"
  timeout -k 5 "$t" "$@"
  echo "## $name: exit $? after $(( $(date +%s) - start ))s of the call"
}
env_report() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max --format=csv
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'numpy', numpy.__version__)"
  echo "NUMA nodes online: $(cat /sys/devices/system/node/online 2>/dev/null)"; nproc; uptime
  nvidia-smi topo -m 2>&1 | head -5
}
stage env 60 bash -c "$(declare -f env_report); env_report" 2>&1 | tee "$OUT/env_$TAG.txt"
stage probe 150 python3 benchmarks/probe_gather.py --json "$OUT/probe_gather_$TAG.json" 2>&1
stage bench 200 python3 benchmarks/bench_gpu_restore.py --reps 15 --json "$OUT/gpu_restore_$TAG.json" --text "$OUT/gpu_restore_$TAG.txt" 2>&1 | tail -60
stage split 90 python3 benchmarks/probe_split.py --json "$OUT/probe_split_$TAG.json" 2>&1 | tee "$OUT/probe_split_$TAG.txt" | tail -40
stage tests 200 python3 -m gpu_tests.torch_env -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests_$TAG.txt" | tail -15
stage bench2 200 python3 benchmarks/bench_gpu_restore.py --reps 15 --json "$OUT/gpu_restore2_$TAG.json" --text "$OUT/gpu_restore2_$TAG.txt" 2>&1 | tail -12
if [ -n "${BEFORE_TREE:-}" ]; then
  stage before 150 bash -c "cd '$BEFORE_TREE' && python3 benchmarks/bench_gpu_restore.py --reps 9 --json '$OUT/before_$TAG.json' --text '$OUT/before_$TAG.txt'" 2>&1 | tail -30
fi
stage info 60 python3 -c "import sys; from kvfault.faults.cli import main; sys.exit(main(['gpu-info']))" 2>&1 | tee -a "$OUT/env_$TAG.txt"
