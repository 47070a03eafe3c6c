"""The Triton backend as a plugin: its registry entry and status, its GPU hardware
descriptions (by name, detected, from the environment) feeding fusion, and the
command line (``backends``, ``show --fused``, ``run --emit-source``)."""

import json
import re

import attrs
import pytest

import blockbuster as bb
from blockbuster import cli
from blockbuster.backends.registry import list_backends
from blockbuster.errors import UsageError
from blockbuster.frontend.workloads import workload
from blockbuster_triton import ENVIRONMENT, GPUS, make_backend
from blockbuster_triton.hardware import chosen_hardware, detected_hardware, gpu_hardware


def test_listed_with_its_mode(triton_backend):
    record = next(r for r in list_backends() if r.name == "triton")
    assert record.status == "ok"
    assert ("interpreter mode" if ENVIRONMENT.mode == "interpreter" else "GPU found") \
        in record.description
    assert triton_backend.hardware.name in record.description


def test_gpus_by_name_and_their_figures():
    assert gpu_hardware("H100") is GPUS["h100"] and gpu_hardware("rtx-4090") is GPUS["rtx4090"]
    h200, h100, rtx = GPUS["h200"], GPUS["h100"], GPUS["rtx4090"]
    assert h200.global_bandwidth_bytes_per_s > h100.global_bandwidth_bytes_per_s
    assert rtx.local_capacity_bytes < h100.local_capacity_bytes      # 99 vs 227 KiB
    assert h100.cores == 132 and rtx.cores == 128
    assert "SMs" in h100.summary() and "shared memory 227 KiB/block" in h100.summary()
    with pytest.raises(UsageError, match="unknown GPU 'v100' .known: h100, h200"):
        gpu_hardware("v100")


def test_a_detected_device_and_the_environment_choose_the_description(monkeypatch):
    hw = detected_hardware("NVIDIA H200", sms=132, smem_per_block=232448,
                           memory_bytes=141 << 30)
    assert hw.global_bandwidth_bytes_per_s == GPUS["h200"].global_bandwidth_bytes_per_s
    other = detected_hardware("NVIDIA L4", sms=58, smem_per_block=101376, memory_bytes=24 << 30)
    assert other.cores == 58 and other.local_capacity_bytes == 101376
    assert other.peak_flops < GPUS["h100"].peak_flops            # scaled by the SM count
    monkeypatch.setenv("BLOCKBUSTER_TRITON_GPU", "rtx4090")
    assert chosen_hardware(hw) is GPUS["rtx4090"]
    assert make_backend().hardware is GPUS["rtx4090"]
    monkeypatch.delenv("BLOCKBUSTER_TRITON_GPU")
    assert chosen_hardware(hw) is hw and chosen_hardware(None) is GPUS["h100"]
    assert make_backend("a100").hardware is GPUS["a100"]


def test_fusion_decides_with_the_gpus_shared_memory():
    # The same program fuses further where the held values fit the local tier.
    program = workload("rmsnorm_ffn_swiglu", blocks={"M": 16, "D": 16, "H": 16}, M=20, D=24, H=40)
    small = attrs.evolve(GPUS["h100"], name="small-smem", local_capacity_bytes=8 << 10)
    big = bb.fuse(program, hardware=GPUS["h100"]).program
    cramped = bb.fuse(program, hardware=small).program
    assert len(big.kernels) < len(cramped.kernels)
    cost = bb.cost(big, hardware=GPUS["h100"])
    assert all(k.fits for k in cost.per_kernel)


def test_backends_command_lists_it(capsys):
    assert cli.main(["backends", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["backends"]}
    assert rows["triton"]["status"] == "ok"
    assert "Triton kernels" in rows["triton"]["description"]


def test_show_fused_for_the_triton_backend_names_the_gpu(capsys):
    assert cli.main(["show", "paper_figure", "--fused", "--backend", "triton",
                     "--size", "M=20", "--size", "N=40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# fused for backend triton: h100-sxm (132 SMs")


def test_run_emits_the_triton_source_and_reports_for_the_gpu(capsys):
    status = cli.main(["run", "attention", "--backend", "triton", "--size", "N=20",
                       "--size", "D=16", "--block", "N=16", "--block", "S=16",
                       "--block", "D=16", "--emit-source"])
    out = capsys.readouterr().out
    assert status == 0
    assert "@triton.jit" in out and "tl.dot(" in out and "def run(buffers):" in out
    assert re.search(r"^hardware +h100-sxm ", out, re.MULTILINE), out
    assert re.search(r"^validation +passed", out, re.MULTILINE), out


def test_measured_tuning_does_not_time_the_interpreter(capsys, monkeypatch, tmp_path):
    """Times under the interpreter say nothing about the GPU fused for: measure ranks
    by the cost model there (and nothing is compiled to be timed)."""
    import json
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path))
    status = cli.main(["run", "attention", "--backend", "triton", "--size", "N=40",
                       "--size", "D=16", "--tune", "measure", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["validation"]["passed"]
    tuning = report["tuning"]
    if ENVIRONMENT.mode == "gpu":
        assert tuning["source"] in ("measure", "model", "initial")
    else:
        assert tuning["source"] in ("model", "initial")
        assert all(c["measured_s"] is None for c in tuning["candidates"])
