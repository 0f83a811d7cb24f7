"""``launch`` in the server's body, through Starlette's test client: the answer is the estimate of the figures the
line states (the same as sending them as fields), the line comes back under "launch" with its notes (no file it
names is read), and a bad line is a one-line 400.

Figures read off each line by hand: processes per node x nodes is the world size."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from serve_client import client, no_hub  # noqa: E402,F401 - the fixtures

LLAMA = "meta-llama/Llama-3.1-8B"
FIGURES = ("weights", "lora", "optimizer", "gradients", "activations", "overhead", "total", "settings", "per_rank")


def _post(client, path: str, body: dict) -> dict:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_estimate_with_a_launch_line_equals_the_fields_it_states(client):
    base = {"model": LLAMA, "profile": "hf", "method": "lora"}
    # accelerate: --num_processes 8 in all on --num_machines 2 is 4 per node; --zero_stage 3 is ZeRO-3
    line = "accelerate launch --use_deepspeed --zero_stage 3 --num_processes 8 --num_machines 2 train.py"
    launched = _post(client, "/api/estimate", {**base, "launch": line})
    fields = _post(client, "/api/estimate", {**base, "strategy": "zero3", "world_size": 8, "gpus_per_node": 4})
    assert {k: launched[k] for k in FIGURES} == {k: fields[k] for k in FIGURES}
    assert launched["launch"]["world_size"] == 8 and launched["launch"]["sources"]["strategy"] == "--zero_stage 3"


def test_the_server_reads_no_file_the_line_names(client):
    line = "deepspeed --num_gpus 2 train.py --deepspeed /etc/ds_config.json"
    data = _post(client, "/api/estimate", {"model": LLAMA, "profile": "hf", "method": "lora", "launch": line})
    # the stage is in the file: no strategy stated, so the line's 2 processes wait for one (a note says so)
    assert data["settings"]["world_size"] == 1 and data["settings"]["strategy"] == "none"
    assert any("states no strategy: its world size 2" in n for n in data["launch"]["notes"])
    assert any("'/etc/ds_config.json', which is not read here" in n for n in data["launch"]["notes"])
    fit = _post(client, "/api/fit", {"model": LLAMA, "profile": "hf", "method": "lora", "gpu": "H100",
                                     "launch": "torchrun --nproc_per_node 2 train.py"})
    assert fit["launch"]["strategy"] == "ddp"


@pytest.mark.parametrize("line,message", [
    ("mpirun -np 8 python train.py", "launch line: 'mpirun' is not a launcher vramwise reads"),
    ("torchrun --nproc_per_node abc train.py", "launch line: --nproc_per_node abc"),
])
def test_a_bad_line_is_a_one_line_400(client, line, message):
    r = client.post("/api/estimate", json={"model": LLAMA, "launch": line})
    assert r.status_code == 400
    text = r.json()["error"]
    assert message in text and "\n" not in text
