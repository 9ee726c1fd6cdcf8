"""posbias sweep on several devices and processes, on the CPU: fake XLA devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4) and two jax.distributed processes on
localhost. The XLA route is forced (POSBIAS_NATIVE=0) so that batches really run on JAX
devices. Results must equal the single-device / single-process table bit for bit.

Every run is a subprocess (the XLA flags must be set before JAX starts); timeouts are hang
guards only, nothing here asserts on time."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from posbias.sweep import read_table

SPEC = """\
base: {layers: 6, heads: 4, tokens: 32, schedule: "power_decay:0.8,0.5"}
axes:
  slope_scale: {geomspace: [0.1, 10, 6]}
  content_diagonal: [-1.0, 0.0, 2.0]
  tokens: [16, 32]
"""

HANG_GUARD_S = 600


def _env(devices: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", POSBIAS_NATIVE="0", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return env


def _cmd(spec, out, *extra):
    return [
        sys.executable,
        "-m",
        "posbias.sweep.cli",
        str(spec),
        "--out",
        str(out),
        "--batch-size",
        "5",
        "--quiet",
        *map(str, extra),
    ]


def _run(cmd, env, cwd):
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def test_sharded_over_four_fake_devices_equals_one_device_bit_for_bit(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = _env(4)
    _run(_cmd(spec, tmp_path / "one", "--devices", "1"), env, tmp_path)
    _run(_cmd(spec, tmp_path / "four", "--devices", "4"), env, tmp_path)
    one, four = read_table(tmp_path / "one"), read_table(tmp_path / "four")
    assert one.num_rows == 36 and four.equals(one)
    assert set(one.column("path").to_pylist()) == {"xla"}  # the JAX route ran, not the native kernel
    manifest = json.loads((tmp_path / "four" / "manifest.json").read_text())
    used = {b["device"] for b in manifest["batches"].values()}
    assert used == {"cpu:0, cpu:1, cpu:2, cpu:3"}  # every batch sharded over the Mesh of all four
    assert manifest["process_parts"][0]["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_jax_distributed_processes_give_the_one_process_table(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = _env(2)
    _run(_cmd(spec, tmp_path / "single"), env, tmp_path)
    out = tmp_path / "multi"
    coordinator = f"localhost:{_free_port()}"
    procs = [
        subprocess.Popen(
            _cmd(spec, out, "--coordinator", coordinator, "--num-processes", 2, "--process-id", i),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=HANG_GUARD_S)
        assert p.returncode == 0, err[-2000:]
    assert read_table(out).equals(read_table(tmp_path / "single"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["processes"] == 2
    by_process = {}
    for index, b in manifest["batches"].items():
        by_process.setdefault(b["process"], set()).add(int(index))
    assert set(by_process) == {0, 1}
    assert all(i % 2 == p for p, idx in by_process.items() for i in idx)  # batch index % P == process
    assert sorted(Path(out).glob("manifest-process-*.json")) == [
        out / "manifest-process-0.json",
        out / "manifest-process-1.json",
    ]
