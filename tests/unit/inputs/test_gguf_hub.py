"""A hub repository's GGUF headers read by HTTP range requests (vramwise.inputs.gguf_hub) and picked among
(vramwise.answers.quant_pick): a local HTTP server (tests/fake_hub.py) stands in for the hub, answering
huggingface_hub's model_info and the resolve URLs with byte ranges, serving small GGUF files written by
tests/gguf_files.py. The headers read this way equal those read from the files,
and only the ranges asked for cross the wire."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

from vramwise.answers.local import local_fit  # noqa: E402
from vramwise.answers.quant_pick import quant_pick  # noqa: E402
from vramwise.errors import ConfigError, SettingsError  # noqa: E402
from vramwise.inputs.gguf import read_gguf  # noqa: E402
from vramwise.inputs.gguf_hub import fetch_header, hub_gguf  # noqa: E402

from fake_hub import PLAIN, REPO, SHA, fake_hub  # noqa: E402  (tests/fake_hub.py)
from gguf_files import write_qwen2_as  # noqa: E402  (tests/gguf_files.py)

MIB = 2**20


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    write_qwen2_as(root / "Tiny-F16.gguf", "F16")
    write_qwen2_as(root / "Tiny-Q8_0.gguf", "Q8_0")
    (root / "Q4_K_M").mkdir()  # a split model in a subfolder, as large quantizations are published
    write_qwen2_as(root / "Q4_K_M" / "Tiny-Q4_K_M.gguf", "Q4_K_M", split_max_tensors=15)
    (root / "mmproj-Tiny-F16.gguf").write_bytes(b"GGUF")
    (root / "README.md").write_text("a model card")
    with fake_hub(root) as (endpoint, log):
        yield endpoint, root, log


def _same_header(a, b):
    assert (a.architecture, a.file_type) == (b.architecture, b.file_type)
    assert dict(a.metadata) == dict(b.metadata) and dict(a.array_lengths) == dict(b.array_lengths)
    assert [(t.name, t.ggml_type, t.shape, t.nbytes, t.offset, t.shard) for t in a.tensors] == \
        [(t.name, t.ggml_type, t.shape, t.nbytes, t.offset, t.shard) for t in b.tensors]


def test_listing_groups_the_files(hub):
    endpoint, root, _ = hub
    h = hub_gguf(REPO, endpoint=endpoint)
    assert h.revision == SHA
    assert [m.name for m in h.models] == ["Q4_K_M", "F16", "Q8_0"]  # by stem: Q4_K_M/Tiny-Q4_K_M sorts first
    assert h.models[0].files == ("Q4_K_M/Tiny-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/Tiny-Q4_K_M-00002-of-00002.gguf")
    assert all("mmproj" not in f.path for f in h.files)
    assert h.size("Tiny-F16.gguf") == (root / "Tiny-F16.gguf").stat().st_size


@pytest.mark.parametrize("first", [8 * MIB, 512])  # 512 bytes: the range doubles until the header is in
def test_headers_equal_the_files(hub, tmp_path, first):
    endpoint, root, log = hub
    h = hub_gguf(REPO, endpoint=endpoint)
    for i, model in enumerate(h.models):
        log.clear()
        got, path = fetch_header(h, model, tmp_path / f"{first}-{i}", first=first)
        _same_header(got, read_gguf(root / model.files[0]))
        # a sparse file of the remote size, read by the parser unchanged
        assert os.path.getsize(path) == h.size(model.files[0])
        assert all(r is not None and r.startswith("bytes=") for _, r, _ in log)  # never a whole-file GET
        if first == 512:
            assert len(log) > len(model.files)  # more than one range for some file
            # the bytes fetched: never more than twice what the header needs, the tensor data start
            need = {}
            for t in got.tensors:
                need[t.shard] = min(need.get(t.shard, t.offset), t.offset)
            sent = {}
            for p, _, n in log:
                sent[p] = sent.get(p, 0) + n
            for shard, f in enumerate(model.files):
                assert sent[next(p for p in sent if p.endswith(f))] <= max(512, 2 * need[shard])


def test_a_server_that_ignores_the_range(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    write_qwen2_as(root / "Tiny-Q8_0.gguf", "Q8_0")
    with fake_hub(root, ranges=False) as (endpoint, log):
        h = hub_gguf(REPO, endpoint=endpoint)
        got, _ = fetch_header(h, h.models[0], tmp_path / "read", first=512)
    _same_header(got, read_gguf(root / "Tiny-Q8_0.gguf"))
    assert len(log) > 1  # each try sent the whole file (200): read as far as the range asked, then dropped


def test_a_header_longer_than_the_cap_is_one_error(hub, tmp_path):
    endpoint, _, _ = hub
    h = hub_gguf(REPO, endpoint=endpoint)
    with pytest.raises(ConfigError, match="Tiny-F16.gguf: its GGUF header is longer than 1,024 bytes, the most read"):
        fetch_header(h, h.models[1], tmp_path, first=256, cap=1024)


def test_picker_over_the_repository_equals_the_files(hub):
    endpoint, root, log = hub
    # 12 MiB = 12,582,912 bytes: F16 needs 13,007,872 at n_ctx 4,096, Q8_0 11,829,952 (compute buffer counted;
    # derived in tests/unit/answers/test_quant_pick.py): Q8_0 is the largest that fits every layer
    p = quant_pick(f"hub:{REPO}", gpu=12 * MIB, n_ctx=4096, endpoint=endpoint)
    assert p.revision == SHA and p.pick.name == "Q8_0"
    for o in p.options:
        alone = local_fit(str(root / o.files[0]), gpu=12 * MIB, n_ctx=4096)
        assert dict(o.fit.estimate.figures) == dict(alone.estimate.figures)
        assert (o.fit.max_n_ctx, o.fit.max_n_gpu_layers) == (alone.max_n_ctx, alone.max_n_gpu_layers)
    log.clear()
    one = quant_pick(f"hub:{REPO}", gpu=6 * MIB, n_ctx=4096, quant="Q4_K_M", endpoint=endpoint)
    assert [o.name for o in one.options] == ["Q4_K_M"]
    assert {p for p, _, _ in log} == {f"/{REPO}/resolve/{SHA}/Q4_K_M/Tiny-Q4_K_M-0000{i}-of-00002.gguf"
                                      for i in (1, 2)}  # only the named quantization's headers are read
    with pytest.raises(SettingsError, match="no quantization IQ4_XS in hub:someone/Tiny-GGUF; present: F16, Q8_0, "
                                            "Q4_K_M"):
        quant_pick(f"hub:{REPO}", gpu=6 * MIB, quant="IQ4_XS", endpoint=endpoint)


def test_offline_is_one_line_naming_the_ways_on(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        quant_pick(f"hub:{REPO}", gpu=6 * MIB)
    text = str(e.value)
    assert "\n" not in text and "HF_HUB_OFFLINE is set" in text and "--local-dir DIR) and give the folder" in text


def test_no_network_is_one_line(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    with pytest.raises(ConfigError) as e:
        hub_gguf(REPO, endpoint=f"http://127.0.0.1:{port}")
    text = str(e.value)
    assert "\n" not in text and "cannot be reached" in text and "ways on" in text


def test_a_missing_repository_or_one_without_gguf_files(hub):
    endpoint, _, _ = hub
    with pytest.raises(ConfigError, match="hub:someone/Other: no such repository"):
        hub_gguf("someone/Other", endpoint=endpoint)
    with pytest.raises(ConfigError, match="hub:someone/Plain holds no .gguf model file"):
        hub_gguf(PLAIN, endpoint=endpoint)
