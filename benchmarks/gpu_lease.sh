#!/usr/bin/env bash
# The GPU checks of one machine lease, in the order the project asks for them, each phase
# capped so that a lease of minutes still brings back what it measured:
#
#   1. benchmarks/ladder.py at 224 px with batch sizes allowed (tune against the hand ladder
#      and the model's ceiling); its JSON is rewritten after each phase
#   2. the tests marked `cuda`
#   3. benchmarks/doctor_throughput.py at 224 px (the doctor's figure against the script's own)
#   4. with CORPUS=1, the doctor on real GPU jobs from ../shared/corpus (gpt.py, makemore,
#      imagenet --dummy), run from copies the caller puts in .gpu_corpus/ (never committed)
#
# Run from the repository root on the GPU machine. A device command runs at most 600 s and a
# lease is 15 minutes, start-up included, so the lease is two calls: the first the ladder
# alone (hand rungs 0 and 9, then tune with --time-budget 480, as the brief asks), the
# second, while the machine is still warm, everything else:
#
#   OUT=$OUT bash benchmarks/gpu_lease.sh 595                   # call 1: the ladder
#   OUT=$OUT SKIP_LADDER=1 bash benchmarks/gpu_lease.sh 240     # call 2: tests, doctor
#
# Each phase's cap is a variable (LADDER_S, TUNE_S, TESTS_S, AB_S, THROUGHPUT_S; RUNGS for the
# ladder's hand rungs).
#
# Wheels for packages the machine lacks (libcst, plotly) may wait in .whl/ (see the device
# notes); everything lands in $OUT: lease.log and one JSON per phase.
set -u
OUT=${OUT:-/tmp/torchpace-gpu}
mkdir -p "$OUT"
total=${1:-595}
start=$(date +%s)
log=$OUT/lease.log
root=$PWD

if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >>"$log" 2>&1 && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$root/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
    echo "cpus: $(nproc)"
} >>"$log" 2>&1

left() { echo $((total - ($(date +%s) - start))); }

# phase NAME CAP_S command...: runs the command for at most CAP_S seconds (less if the lease
# has less left), its output into the log; skipped when under 20 s would be left for it
phase() {
    local name=$1 cap=$2
    shift 2
    local l t began
    l=$(left)
    t=$((cap < l - 5 ? cap : l - 5))
    if [ "$t" -lt 20 ]; then
        echo "== $name: skipped, $l s of the lease left" >>"$log"
        return
    fi
    echo "== $name (at most $t s) $(date -u +%T)" >>"$log"
    began=$(date +%s)
    timeout -k 5 "$t" "$@" >>"$log" 2>&1
    echo "== $name: exit $? after $(($(date +%s) - began)) s" >>"$log"
}

# the ladder: as written, the hand ladder's top rung (every rung below it included) and the
# ceiling, with tune between them; a lease already measured every rung (results/, 2026-11-26)
rungs=${RUNGS:-0,9}
if [ -z "${SKIP_LADDER:-}" ]; then
    phase ladder "${LADDER_S:-590}" python3 benchmarks/ladder.py --image-size 224 \
        --allow-batch-size --skip-grid --rungs "$rungs" --head-to-head 0 \
        --tune-time-budget "${TUNE_S:-480}" --work-dir /tmp/ladder-work --json "$OUT/ladder.json"
    cp /tmp/ladder-work/tune/tune_report.json "$OUT/ladder_tune_report.json" 2>/dev/null
    cp /tmp/ladder-work/tune.log "$OUT/ladder_tune.log" 2>/dev/null
fi

# the CUDA tests: the timed GPU A/B cases alone on the device, the rest four at a time
# (pytest-xdist, where the machine has it)
phase cuda_tests "${TESTS_S:-80}" python3 -m pytest -m cuda -q -p no:cacheprovider \
    --deselect tests/doctor/test_doctor_gpu_ab.py -n 4 -rf tests
phase cuda_ab_tests "${AB_S:-70}" python3 -m pytest -q -p no:cacheprovider -rf \
    tests/doctor/test_doctor_gpu_ab.py

phase doctor_throughput "${THROUGHPUT_S:-90}" python3 benchmarks/doctor_throughput.py \
    --image-size 224 --rounds 1 --measure 3 --json "$OUT/doctor_throughput.json"

doctor_job() {  # NAME FOLDER script args...: the doctor on a real job, its JSON into $OUT
    local name=$1 folder=$2
    shift 2
    [ -d "$folder" ] || { echo "== doctor $name: no $folder" >>"$log"; return; }
    (cd "$folder" && phase "doctor_$name" 40 python3 -m torchpace.cli doctor --quiet \
        --measure 3 --timeout 35 --out "/tmp/runs/$name" --json "$OUT/doctor_$name.json" "$@")
}
if [ -n "${CORPUS:-}" ]; then
    doctor_job gpt .gpu_corpus/ng_video_lecture gpt.py
    doctor_job makemore .gpu_corpus/makemore makemore.py -i names.txt -o /tmp/mm-out --device cuda
    doctor_job imagenet .gpu_corpus/pytorch_examples/imagenet main.py --dummy -a resnet50 \
        -b 128 --gpu 0 -j 8 --epochs 1
fi
echo "== lease used $(($(date +%s) - start)) s" >>"$log"
tail -c 6000 "$log"
