"""The page's GPU list: a unified-memory entry carries what its GPU may use and the line that says so."""

from __future__ import annotations

from vramwise.surfaces.serve import api_gpus


def test_api_gpus_gives_a_unified_entry_its_budget():
    catalog = {g["id"]: g for g in api_gpus({})["catalog"]}
    mac = catalog["apple-m3-max-128gb"]
    # 128 x 2**30 = 137,438,953,472 B of system memory; three quarters (above 36 GiB) = 103,079,215,104 B
    assert mac["memory_bytes"] == 137_438_953_472 and mac["gpu_may_use_bytes"] == 103_079_215_104
    assert mac["unified"] is True and mac["unified_memory"].startswith("unified memory: the GPU may use 96.00 GiB")
    assert "gpu_may_use_bytes" not in catalog["rtx-4090"] and "unified" not in catalog["rtx-4090"]
