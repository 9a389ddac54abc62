#!/usr/bin/env bash
# One device call of a GPU bring-up session: scripts/gpu-session.sh PHASE [BUDGET_S]
#
# The device tool gives a call at most 10 minutes and a session 30, and keeps a machine warm only
# ~30 s between calls. So each PHASE is one call that spends its budget on steps in priority order,
# each step capped by what is left (SIGINT first, so pytest still writes its report and baselines),
# and always ends by packing everything into "$OUT/<phase>.tar.gz" (the tool brings back at most
# 8 files). scripts/gpu-suite holds the same steps as stages for a machine without those limits.
#
# PHASE: build    install, environment, prebuild (sm_90), CUDA kernel tests + opcheck, sanitizers
#        suite-a  record baselines: depthwise, edsr, pcilt
#        suite-b  record baselines: im2col_gemm, models; the harness table
#        tests    unit + integration tiers on the GPU
set -u
PHASE=${1:?phase: build | suite-a | suite-b | tests}
BUDGET=${2:-550}
OUT=${OUT:-$PWD/gpu-session-out}
W="$OUT/$PHASE"
mkdir -p "$W"
START=$(date +%s)
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/.cache/convperf/torch_extensions}
PY=${PYTHON:-python3}
REASON="first GPU baselines"
SUMMARY="$W/summary.txt"

left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME CAP_S CMD...: run CMD with a cap of min(CAP_S, time left - 25 s), log to $W/NAME.log.
step() {
    local name=$1 cap=$2 l t s rc
    shift 2
    l=$(left)
    t=$((cap < l - 25 ? cap : l - 25))
    if [ "$t" -lt 15 ]; then
        echo "SKIP $name: no time left" | tee -a "$SUMMARY"
        return 0
    fi
    s=$(date +%s)
    timeout -s INT -k 15 "$t" "$@" >"$W/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - s))s (cap ${t}s)" | tee -a "$SUMMARY"
    tail -n 4 "$W/$name.log" | sed 's/^/    /'
}

suite() {  # suite NAME CAP MODULE...: record the baselines of these modules, report under $W/report
    local name=$1 cap=$2
    shift 2
    step "$name" "$cap" "$PY" -m pytest -p no:cacheprovider -q -rfE "$@" --convperf \
        --convperf-update-baselines=all "--convperf-reason=$REASON" \
        "--convperf-report=$W/report-$name" "--junitxml=$W/junit-$name.xml"
}

install() {
    step install 120 "$PY" -m pip install --no-build-isolation --no-deps -e .
    step environment 60 bash -c "nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER; nvcc --version; \
        compute-sanitizer --version; $PY -m pip list 2>/dev/null | grep -iE 'torch|triton|pytest|hypothesis|nvidia-ml|yaml|filelock'; \
        $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), \
        torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'"
    step prebuild 330 "$PY" -m kernels._build --all
}

case "$PHASE" in
build)
    install
    # The first H100 run took 187 s of a 200 s cap here; the sanitizers below still get 90 s each.
    step cuda-tests 230 "$PY" -m pytest -p no:cacheprovider -q -rfE tests/kernels --junitxml="$W/junit-kernels.xml" \
        --ignore=tests/kernels/test_depthwise_emulated.py --ignore=tests/kernels/test_emulated_families.py \
        --ignore=tests/kernels/test_sanitized_kernels.py
    # The sanitize-marked tests (tests/kernels/sanitizer.py; scripts/gpu_suite.py sanitizer_args):
    # one small shape per family and its controls. CONVPERF_UNDER_SANITIZER=1 skips what it distorts.
    for tool in memcheck racecheck; do
        step "sanitizer-$tool" 90 env CONVPERF_UNDER_SANITIZER=1 compute-sanitizer "--tool=$tool" \
            --error-exitcode=1 --target-processes=all \
            "$PY" -m pytest -p no:cacheprovider -q tests/kernels -m sanitize -rs
    done
    ;;
suite-a)
    install
    suite depthwise 300 perf_tests/test_depthwise.py
    suite edsr-pcilt 200 perf_tests/test_edsr.py perf_tests/test_pcilt.py
    ;;
suite-b)
    install
    suite im2col 260 perf_tests/test_im2col_gemm.py
    suite models 150 perf_tests/test_models.py
    step harness 240 "$PY" scripts/gpu_suite.py --keep-going --out "$W/gpu-suite" harness
    ;;
tests)
    install
    step unit-integration 400 "$PY" -m pytest -p no:cacheprovider -q -rfE tests/unit tests/integration -n 8 --junitxml="$W/junit-tiers.xml"
    ;;
*)
    echo "unknown phase $PHASE" >&2
    exit 2
    ;;
esac

cp -r baselines "$W/" 2>/dev/null
tar -czf "$OUT/$PHASE.tar.gz" -C "$OUT" "$PHASE" && rm -rf "$W"
ls -la "$OUT"
