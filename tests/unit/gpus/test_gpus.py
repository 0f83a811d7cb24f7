"""GPU discovery and selection against a fake NVML (no GPU exists on the test machines)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import vramwise
from vramwise import GpuSelectionError, child_env, discover_gpus, select_gpus

GIB = 2**30


class FakeNvml:
    """Stands in for NVML: each GPU is (uuid, name, total, used, free)."""

    def __init__(self, gpus=(), fail_init=None):
        self.gpus = list(gpus)
        self.fail_init = fail_init
        self.inits = self.shutdowns = 0

    def init(self):
        if self.fail_init:
            raise self.fail_init
        self.inits += 1

    def shutdown(self):
        self.shutdowns += 1

    def device_count(self):
        return len(self.gpus)

    def device(self, index):
        return self.gpus[index]


def gpu(i, free_gib, total_gib=80):
    return (f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd", f"Fake H100 #{i}", total_gib * GIB,
            (total_gib - free_gib) * GIB, free_gib * GIB)


class FakeEstimate:
    """What selection reads from an estimate: total and min_per_gpu(n) (plain numbers here)."""

    def __init__(self, total, state, replicated):
        self.total, self._state, self._replicated = total, state, replicated

    def min_per_gpu(self, n):
        return self._state // n + self._replicated


def test_no_driver_is_a_result_not_an_exception():
    class NVMLError_LibraryNotFound(Exception):
        pass

    fake = FakeNvml(fail_init=NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    d = discover_gpus(nvml=fake, env={})
    assert d.gpus == () and not d.available
    assert "no NVIDIA GPU visible" in d.reason and "LibraryNotFound" in d.reason
    sel = select_gpus(None, discovery=d)
    assert sel.mode == "non_cuda" and sel.gpu_ids == () and sel.device_map == "cpu"
    with pytest.raises(GpuSelectionError, match="no NVIDIA GPU visible"):
        select_gpus(None, gpu_ids=[0], discovery=d)


def test_nvml_started_once_and_shut_down():
    fake = FakeNvml([gpu(0, 70)])
    d = discover_gpus(nvml=fake, env={})
    assert (fake.inits, fake.shutdowns) == (1, 1)
    assert d.visible == (0,) and d.gpus[0].free == 70 * GIB and d.gpus[0].total == 80 * GIB


def test_one_gpu_that_fits():
    d = discover_gpus(nvml=FakeNvml([gpu(0, 40)]), env={})
    sel = select_gpus(FakeEstimate(30 * GIB, 20 * GIB, 10 * GIB), discovery=d)
    assert (sel.mode, sel.gpu_ids, sel.fits) == ("auto", (0,), True)
    assert sel.device_map == "sequential" and sel.cuda_visible_devices == "0"


def test_model_needing_two_of_four_uneven_gpus():
    # free: GPU0 20, GPU1 60, GPU2 10, GPU3 50 GiB -> ranked 1, 3, 0, 2
    d = discover_gpus(nvml=FakeNvml([gpu(0, 20), gpu(1, 60), gpu(2, 10), gpu(3, 50)]), env={})
    # total 100 GiB; per GPU (state 80)/n + 20
    est = FakeEstimate(100 * GIB, 80 * GIB, 20 * GIB)
    sel = select_gpus(est, discovery=d)
    # 1 GPU: 60 < 100. 2 GPUs: 60 + 0.85 * 50 = 102.5 >= 100, and the smaller free 50 >= 80/2 + 20 = 60? No.
    # 3 GPUs (1, 3, 0): 60 + 0.85 * (50 + 20) = 119.5 >= 100, smallest free 20 >= 80/3 + 20 = 46.7? No.
    # 4 GPUs: 60 + 0.85 * 80 = 128 >= 100, smallest 10 >= 40? No -> nothing fits.
    assert sel.mode == "fallback_all" and sel.fits is False and sel.gpu_ids == (1, 3, 0, 2)
    assert "may not fit" in sel.reason
    # with a smaller replicated part: 2 GPUs give 102.5 GiB usable and need 80/2 + 5 = 45 <= 50 each
    sel = select_gpus(FakeEstimate(100 * GIB, 80 * GIB, 5 * GIB), discovery=d)
    assert (sel.mode, sel.gpu_ids, sel.fits) == ("auto", (1, 3), True)
    assert sel.usable_bytes == int(60 * GIB + 0.85 * 50 * GIB)
    assert sel.min_per_gpu_bytes == 45 * GIB
    assert sel.device_map == "balanced" and sel.cuda_visible_devices == "1,3"


def test_per_gpu_minimum_refuses_a_set_whose_total_fits():
    # two GPUs of 50 free: usable 50 + 42.5 = 92.5 >= 90 total, but each must hold 60/2 + 35 = 65 > 50
    d = discover_gpus(nvml=FakeNvml([gpu(0, 50), gpu(1, 50)]), env={})
    sel = select_gpus(FakeEstimate(90 * GIB, 60 * GIB, 35 * GIB), discovery=d)
    assert sel.mode == "fallback_all" and sel.fits is False


def test_ties_rank_by_index():
    d = discover_gpus(nvml=FakeNvml([gpu(0, 30), gpu(1, 40), gpu(2, 40)]), env={})
    sel = select_gpus(FakeEstimate(35 * GIB, 10 * GIB, 10 * GIB), discovery=d)
    assert sel.gpu_ids == (1,)


def test_no_estimate_uses_every_visible_gpu():
    d = discover_gpus(nvml=FakeNvml([gpu(0, 30), gpu(1, 40), gpu(2, 40)]), env={"CUDA_VISIBLE_DEVICES": "2,0"})
    sel = select_gpus(None, discovery=d)
    assert sel.mode == "fallback_all" and sel.gpu_ids == (2, 0) and sel.fits is None
    sel = select_gpus("/no/such/config.json", discovery=d)
    assert sel.mode == "fallback_all" and "no such file" in sel.reason


def test_uuid_and_mig_visible_devices_inherit_the_parent():
    gpus = [gpu(0, 30), gpu(1, 40)]
    uuid1 = gpus[1][0]
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": uuid1})
    assert d.uses_uuids and d.visible == (1,)
    sel = select_gpus(FakeEstimate(10 * GIB, 5 * GIB, 1 * GIB), discovery=d)
    assert sel.mode == "inherit_parent_visible" and sel.cuda_visible_devices == uuid1
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": uuid1[:12]})  # a GPU- prefix
    assert d.visible == (1,)
    mig = "MIG-8b1c2d3e-0000-1111-2222-333344445555"
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": mig})
    sel = select_gpus(None, discovery=d)
    assert sel.mode == "inherit_parent_visible" and sel.cuda_visible_devices == mig and sel.device_map == "auto"
    with pytest.raises(GpuSelectionError, match="UUID or MIG"):
        select_gpus(None, gpu_ids=[0], discovery=d)


def test_visible_devices_empty_and_numeric():
    gpus = [gpu(0, 30), gpu(1, 40), gpu(2, 50)]
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": ""})
    assert d.visible == () and "empty" in d.reason
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert d.visible == (2, 0)
    d = discover_gpus(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": "1,7,0"})  # CUDA stops at 7
    assert d.visible == (1,)


@pytest.mark.parametrize("ids,needle", [
    ([0, 0], r"GPU ids repeat: \[0\]"),
    ([-1], r"must not be negative: \[-1\]"),
    ([4], r"GPU ids \[4\] exceed the 3 physical GPU\(s\)"),
    ([1], r"GPU ids \[1\] are not visible to this process \(CUDA_VISIBLE_DEVICES='0,2'; visible: \[0, 2\]\)"),
    ([], "no GPU ids given"),
])
def test_explicit_rejections(ids, needle):
    d = discover_gpus(nvml=FakeNvml([gpu(0, 30), gpu(1, 40), gpu(2, 50)]), env={"CUDA_VISIBLE_DEVICES": "0,2"})
    with pytest.raises(GpuSelectionError, match=needle):
        select_gpus(None, gpu_ids=ids, discovery=d)


def test_explicit_ids_are_all_used():
    d = discover_gpus(nvml=FakeNvml([gpu(0, 30), gpu(1, 40), gpu(2, 50)]), env={})
    sel = select_gpus(FakeEstimate(10 * GIB, 5 * GIB, 1 * GIB), gpu_ids=[2, 0], discovery=d)
    assert (sel.mode, sel.gpu_ids, sel.cuda_visible_devices) == ("explicit", (2, 0), "2,0")
    # usable: first 50, then 85 % of 30
    assert sel.usable_bytes == int(50 * GIB + 0.85 * 30 * GIB)


def test_child_env_does_not_touch_the_caller():
    d = discover_gpus(nvml=FakeNvml([gpu(0, 30), gpu(1, 40)]), env={})
    sel = select_gpus(None, gpu_ids=[1], discovery=d)
    base = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}
    env = child_env(sel, base)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and base["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["PATH"] == "/bin"


def test_real_estimate_drives_selection():
    e = vramwise.estimate({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8})
    d = discover_gpus(nvml=FakeNvml([gpu(0, 5), gpu(1, 6), gpu(2, 24)]), env={})
    sel = select_gpus(e, discovery=d)
    assert sel.gpu_ids == (2,) and sel.required_bytes == e.total and sel.fits


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU on this machine")
def test_total_memory_matches_nvidia_smi():  # pragma: no cover - runs only where a GPU is present
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    smi = {int(i): int(mib) for i, mib in (line.split(",") for line in out.strip().splitlines())}
    d = discover_gpus(env={})
    assert {g.index: g.total // 2**20 for g in d.gpus} == smi
