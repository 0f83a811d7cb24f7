"""``POST /api/local``: a GGUF file's header sent as bytes (the page reads them with File.slice), its name and size and
the settings in the query; the answer is ``fit MODEL.gguf --profile llama.cpp --json``'s for the file on disk.

The file is tests/gguf_files.py's small Qwen2 (its bytes derived there by hand); on the GPU it takes 975,552 bytes
of weights and 1,024 bytes a cell of f16 cache, and a compute buffer of 2,097,152 bytes and 1,024 a cell (its f16
mask at n_ubatch 512, flash attention auto) (tests/unit/answers/test_local_fit.py)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import replace

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

import vramwise  # noqa: E402
from gguf_files import TOTAL_BYTES, write_qwen2  # noqa: E402  (tests/gguf_files.py)
from serve_client import client, no_hub  # noqa: E402,F401 - the fixtures
from vramwise.answers.local import local_fit  # noqa: E402
from vramwise.inputs.gguf import read_gguf, read_gguf_bytes  # noqa: E402
from vramwise.surfaces import serve as _serve  # noqa: E402
from vramwise.surfaces import serve_local  # noqa: E402
from vramwise.surfaces.cli import main as cli  # noqa: E402
from vramwise.surfaces.serve_address import read_address  # noqa: E402

OCTETS = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve-local") / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return path


def post(client, data: bytes, **query):
    return client.post("/api/local", params=query, content=data, headers=OCTETS)


def one_line_error(r, status: int) -> str:
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert "\n" not in message and "Traceback" not in message
    return message


def cli_json(*argv) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return json.loads(out.getvalue())


def test_a_header_read_from_bytes_equals_the_header_read_from_the_file(gguf_file):
    on_disk = read_gguf(gguf_file)
    data = gguf_file.read_bytes()
    assert on_disk.weight_bytes == TOTAL_BYTES  # 1,129,152: tests/gguf_files.py, tensor by tensor
    # the header's bytes alone (no tensor data), and the whole file: the same header, named by the file's name
    for sent in (data[:on_disk.header_bytes], data):
        got = read_gguf_bytes(sent, size=len(data), name=gguf_file.name)
        assert got.files == (gguf_file.name,)
        assert replace(got, files=on_disk.files) == on_disk
        assert got.placement() == on_disk.placement()
    # the key/values and the tensor table end before the tensor data, which the file's 1,129,152 bytes of tensors follow
    assert on_disk.header_bytes <= len(data) - TOTAL_BYTES
    # one byte short of the header, with more of the file to come: read more
    assert read_gguf_bytes(data[:on_disk.header_bytes - 1], size=len(data), name=gguf_file.name) is None


def test_the_answer_is_fit_json_of_the_file(client, gguf_file):
    data = gguf_file.read_bytes()
    head = read_gguf(gguf_file).header_bytes
    r = post(client, data[:head], name=gguf_file.name, size=len(data), gpu="8MiB", n_ctx="4096")
    assert r.status_code == 200, r.text
    got = r.json()
    described = got.pop("gguf")
    assert got == cli_json("fit", str(gguf_file), "--profile", "llama.cpp", "--gpu", "8MiB", "--n-ctx", "4096", "--json")
    assert got == vramwise.fit(str(gguf_file), profile="llama.cpp", gpu="8MiB", n_ctx=4096).to_dict()
    # 8 MiB = 8,388,608 bytes less 975,552 of weights and 2,097,152 of hidden states = 5,315,904 for 2,048-byte cells
    # (cache and mask) -> 2,595.7 -> 2,560 (10 x 256)
    assert got["max_n_ctx"] == 2560
    assert described == {"name": gguf_file.name, "size": len(data), "header_bytes": head, "architecture": "qwen2",
                         "file_type": "Q4_K_M", "tensors": 27, "weight_bytes": TOTAL_BYTES, "family": "qwen2",
                         "model_type": "qwen2", "describe": f"27 tensors of {gguf_file.name} (GGUF Q4_K_M, "
                                                            "architecture qwen2)"}
    # the settings in llama.cpp's names, spelled as the address and the command line spell them
    r = post(client, data[:head], name=gguf_file.name, size=len(data), gpu="8MiB", n_ctx="2048", n_gpu_layers="2",
             n_parallel="2", cache_type_k="Q8_0", cache_type_v="q8_0", flash_attn="on", headroom="10%")
    want = vramwise.fit(str(gguf_file), profile="llama.cpp", gpu="8MiB", headroom=0.1, n_ctx=2048, n_gpu_layers=2,
                        n_parallel=2, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on").to_dict()
    assert {k: v for k, v in r.json().items() if k != "gguf"} == want


def test_the_ollama_preset_with_its_origins(client, gguf_file):
    data = gguf_file.read_bytes()
    r = post(client, data[:read_gguf(gguf_file).header_bytes], name=gguf_file.name, size=len(data), gpu="8MiB",
             preset="Ollama", n_parallel="2")
    assert r.status_code == 200, r.text
    got = r.json()
    got.pop("gguf")
    want = local_fit(str(gguf_file), gpu="8MiB", preset="ollama", n_parallel=2).to_dict()
    assert got == want
    assert got["origins"]["n_parallel"] == "given" and got["origins"]["n_ctx"].startswith("ollama ")
    assert set(got["in_preset_names"]) >= {"num_ctx", "num_gpu"}


def test_bytes_that_end_inside_the_header_ask_for_more(client, gguf_file):
    data = gguf_file.read_bytes()
    r = post(client, data[:1000], name=gguf_file.name, size=len(data), gpu="8MiB")
    message = one_line_error(r, 400)
    assert r.json()["more"] is True
    assert message.startswith(f"the first 1,000 bytes of {gguf_file.name} end inside its GGUF header")


def test_a_truncated_file_or_a_body_that_is_not_gguf_is_one_error(client, gguf_file):
    data = gguf_file.read_bytes()
    head = read_gguf(gguf_file).header_bytes
    name = gguf_file.name
    # a file cut inside its header: the whole file sent, its header ends past its end
    r = post(client, data[:1000], name=name, size=1000, gpu="8MiB")
    assert one_line_error(r, 400) == f"{name}: the GGUF header ends past the end of the file (truncated?)"
    assert "more" not in r.json()
    # a file cut after its header: the first tensor (token_embd.weight, 153,600 bytes of F16) ends past its size
    r = post(client, data[:head], name=name, size=head + 100, gpu="8MiB")
    assert "tensor token_embd.weight ends at byte" in one_line_error(r, 400)
    assert f"past the file's {head + 100:,} (a truncated download?)" in r.json()["error"]
    # not a GGUF file: a config.json's bytes
    text = b'{"model_type": "llama"}' + b" " * 100
    r = post(client, text, name="config.json", size=len(text), gpu="8MiB")
    assert one_line_error(r, 400) == "config.json: not a GGUF file (it does not start with the GGUF magic)"
    # more bytes than the size declared, and no bytes at all
    r = post(client, data[:head], name=name, size=head - 1, gpu="8MiB")
    assert "bytes given of a file of" in one_line_error(r, 400)
    assert "send the first bytes" in one_line_error(post(client, b"", name=name, size=len(data), gpu="8MiB"), 400)


def test_one_shard_of_a_split_model_is_refused(client, tmp_path):
    write_qwen2(tmp_path / "tiny.gguf", split_max_tensors=10)  # 27 tensors: 3 files
    first = sorted(tmp_path.glob("*.gguf"))[0]
    data = first.read_bytes()
    r = post(client, data, name=first.name, size=len(data), gpu="8MiB")
    assert "one file of a GGUF model split in 3 files" in one_line_error(r, 400)


def test_the_request_fields(client, gguf_file):
    data = gguf_file.read_bytes()
    head = data[:read_gguf(gguf_file).header_bytes]
    assert "gpu is required" in one_line_error(post(client, head, name=gguf_file.name, size=len(data)), 400)
    assert "size must be" in one_line_error(post(client, head, name=gguf_file.name, size="12a", gpu="8MiB"), 400)
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", batch_size="4")
    assert "unknown field(s) batch_size" in one_line_error(r, 400)
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", cache_type_k="q3")
    assert one_line_error(r, 400).startswith("cache_type_k")
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", preset="lmstudio")
    assert "unknown preset 'lmstudio'" in one_line_error(r, 400)
    # a folder in the name is dropped: the answer names the file only
    r = post(client, head, name="C:\\models\\" + gguf_file.name, size=len(data), gpu="8MiB")
    assert r.json()["gguf"]["name"] == gguf_file.name
    # the body is the header's bytes, not JSON; and the API takes a POST
    r = client.post("/api/local", params={"name": gguf_file.name, "size": len(data), "gpu": "8MiB"}, content=head,
                    headers={"content-type": "application/json"})
    assert "application/octet-stream" in one_line_error(r, 415)
    assert "takes a POST" in one_line_error(client.get("/api/local"), 405)


def test_the_header_cap_is_64_mib(client, monkeypatch):
    assert serve_local.MAX_HEADER_BYTES == 64 * 2**20
    big = b"\0" * (64 * 2**20 + 1)
    r = post(client, big, name="big.gguf", size=2**40, gpu="8MiB")
    assert "at most 67,108,864 (a GGUF header of 64 MiB)" in one_line_error(r, 413)
    monkeypatch.setattr(_serve, "MAX_HEADER_BYTES", 100_000)

    def chunks():  # no Content-Length: counted while it streams
        for _ in range(4):
            yield b"\0" * 65536

    r = client.post("/api/local", params={"name": "big.gguf", "size": 2**40, "gpu": "8MiB"}, content=chunks(),
                    headers=OCTETS)
    assert "over 100,000 bytes" in one_line_error(r, 413)


def test_the_form_and_the_address_know_the_local_mode(client):
    table = client.get("/api/settings").json()
    assert table["local_profiles"] == ["llama.cpp"]
    assert [p["name"] for p in table["local_presets"]] == ["ollama"]
    assert table["local_presets"][0]["profile"] == "llama.cpp"
    assert read_address({"preset": "Ollama"})["fields"]["preset"] == {"value": "ollama"}
    assert "unknown preset" in read_address({"preset": "x"})["fields"]["preset"]["error"]


def test_a_modelfile_and_environment_lines_as_the_command_line_reads_them(client, gguf_file, tmp_path):
    # the page's two text fields: a Modelfile's text (its PARAMETER lines) and NAME=VALUE lines; the answer is
    # local_fit's with the same Modelfile on disk and the same variables as the environment (--modelfile, --ollama-env)
    data = gguf_file.read_bytes()
    head = data[:read_gguf(gguf_file).header_bytes]
    text = "FROM ./tiny-Q4_K_M.gguf\n# a comment\nPARAMETER num_ctx 2048\n"
    env = "export OLLAMA_NUM_PARALLEL=2\nOLLAMA_KV_CACHE_TYPE='q8_0'\nPATH=/usr/bin\n"
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", modelfile=text, ollama_env=env)
    assert r.status_code == 200, r.text
    got = r.json()
    got.pop("gguf")
    on_disk = tmp_path / "Modelfile"
    on_disk.write_text(text)
    want = local_fit(str(gguf_file), gpu="8MiB", modelfile=str(on_disk),
                     environ={"OLLAMA_NUM_PARALLEL": "2", "OLLAMA_KV_CACHE_TYPE": "q8_0", "PATH": "/usr/bin"}).to_dict()
    # the same answer; its origins name the text given ("Modelfile") where the command line names the file
    assert json.dumps(got) == json.dumps(want).replace(json.dumps(str(on_disk))[1:-1], "Modelfile")
    origins = got["origins"]
    # Ollama's context is num_ctx for each of the parallel slots: 2048 x 2 (formulas/ollama.yaml)
    assert got["settings"]["n_ctx"] == 4096 and got["settings"]["n_parallel"] == 2
    assert "Modelfile Modelfile:3 (PARAMETER num_ctx)" in origins["n_ctx"]
    assert got["settings"]["cache_type_k"] == "q8_0" and got["settings"]["cache_type_v"] == "q8_0"
    assert origins["n_parallel"] == "environment OLLAMA_NUM_PARALLEL=2"
    assert got["preset"]["preset"] == "ollama"
    # a line that sets nothing, and a Modelfile line that is no command: one error each, with its place
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", ollama_env="OLLAMA_NUM_PARALLEL 2")
    assert "environment:1:1: not a NAME=VALUE line" in one_line_error(r, 400)
    r = post(client, head, name=gguf_file.name, size=len(data), gpu="8MiB", modelfile="PARAMETER num_ctx 2048\n??")
    assert "Modelfile:2:1: not a Modelfile command" in one_line_error(r, 400)
    # the address keeps both texts as given, and names what it cannot read
    assert read_address({"modelfile": text})["fields"]["modelfile"] == {"value": text}
    assert read_address({"ollama_env": env})["fields"]["ollama_env"] == {"value": env}
    assert "at most 8,000 characters" in read_address({"modelfile": "#" * 8001})["fields"]["modelfile"]["error"]
