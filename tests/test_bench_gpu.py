"""benchmarks/bench_gpu.py (what benchmarks/gpu.sh runs on a device, issue 21 goal 4) in its --smoke form on
the CPU: every section runs and reports its rates, so the one prepared call on a lent device does not fail on
something a CPU would have shown."""

from tests.benchmark_scripts import run_for_json


def test_every_section_runs_and_reports_its_rates(tmp_path):
    r = run_for_json("bench_gpu.py", "--smoke", cwd=tmp_path)
    assert r["smoke"] is True
    for name in ("stream", "gemm", "xla_batch", "sweep", "hf"):
        assert "error" not in r[name], (name, r[name])
    assert r["stream"]["bandwidth_bytes_per_s"] > 0
    assert r["gemm"]["full_flops_per_s"] > 0 and 0 < r["gemm"]["row_blocks_fraction_of_peak"]
    assert r["xla_batch"]["points"] == 8 and r["xla_batch"]["max_mass_defect"] <= 1e-12
    assert r["xla_batch"]["fraction_of_stream_bandwidth"] > 0
    assert r["sweep"]["points"] == 16 and r["sweep"]["model_bytes_per_s"] > 0
    # 4 layers x (24 H P + 40 P) bytes at H = 4, P = 32: bench_xla.py's chunked model
    assert r["sweep"]["model_bytes_per_s"] == r["sweep"]["points_per_s"] * 4 * (24 * 4 * 32 + 40 * 32)
    assert r["hf"]["parameters"] > 0 and r["hf"]["fraction_of_peak"] > 0
    assert list(tmp_path.iterdir()) == [
        tmp_path / "bench_gpu.json"
    ]  # the sections' files stay in their temporary folder
