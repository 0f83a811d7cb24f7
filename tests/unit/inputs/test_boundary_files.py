"""Config files are read defensively: every bad file is one ConfigError naming it; the hub fails fast."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import vramwise
from vramwise import ConfigError
from vramwise.inputs.config import MAX_CONFIG_BYTES, MAX_JSON_DEPTH, checkpoint_size, read_config

SMALL = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
ROOT = os.getuid() == 0 if hasattr(os, "getuid") else False


def _write(tmp_path, data: bytes, name="config.json"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _fails(source, *needles):
    with pytest.raises(ConfigError) as info:
        vramwise.estimate(source)
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


GOOD = json.dumps(SMALL).encode()
BAD_FILES = {
    "latin-1": (b'{"model_type": "llama", "name": "caf\xe9"}', "not UTF-8"),
    "utf-16": (json.dumps(SMALL).encode("utf-16"), "UTF-16"),
    "utf-16-le-no-bom": (json.dumps(SMALL).encode("utf-16-le"), "UTF-16"),
    "empty": (b"", "empty"),
    "blank": (b"  \n\t ", "empty"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nest deeper"),
    "deep-object": (b'{"a": ' * 65 + b"1" + b"}" * 65, "nest deeper"),
    "deep-unclosed": (b"{" + b'"a":[' * 200_000, "more than 100,000 arrays and objects"),
    "many-values": (b"[" + b"1," * 1_000_000 + b"1]", "more than 1,000,000 values"),
    "many-lists": (b'{"a": [' + b"[]," * 200_000 + b"[]]}", "more than 100,000 arrays and objects"),
    "huge-int": (b'{"vocab_size": ' + b"9" * 5000 + b"}", "invalid JSON"),
    "nan": (b'{"model_type": "llama",\n "vocab_size": NaN}', ":2:16: invalid JSON: NaN"),
    "infinity": (b'{"hidden_size": -Infinity}', "-Infinity"),
    "float-overflow": (b'{"hidden_size": 1e400}', "1e400 is not a finite number"),
    "array": (b"[1, 2]", "must be a JSON object"),
    "invalid": (b"{not json", ":1:2: invalid JSON"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_config_is_one_config_error_naming_the_file(tmp_path, kind):
    data, needle = BAD_FILES[kind]
    p = _write(tmp_path, data)
    t0 = time.perf_counter()
    _fails(str(p), str(p), needle)
    _fails(str(tmp_path), str(p), needle)  # the folder holding it
    assert time.perf_counter() - t0 < 2


def test_strings_holding_brackets_and_constants_are_fine(tmp_path):
    cfg = dict(SMALL, note="[[[[{{{{" * 100 + " NaN Infinity \" ]]", tags=[[1, [2]], {"a": {"b": []}}])
    p = _write(tmp_path, json.dumps(cfg).encode())
    assert vramwise.estimate(str(p)).total == vramwise.estimate(SMALL).total


@pytest.mark.parametrize("unit", [b"[],", b"1.5,", b'"\\\\\\"[{",', b"{},"])
def test_largest_hostile_files_are_rejected_fast(tmp_path, unit):
    """Files near the size limit, made of one repeated unit: a clear error (or a result) within a second or so."""
    body = unit * ((MAX_CONFIG_BYTES - 64) // len(unit))
    p = _write(tmp_path, b'{"a": [' + body + b'1]}')
    t0 = time.perf_counter()
    with pytest.raises(ConfigError):
        read_config(str(p))
    assert time.perf_counter() - t0 < 3


def test_utf8_bom_is_accepted(tmp_path):
    p = _write(tmp_path, b"\xef\xbb\xbf" + GOOD)
    assert vramwise.estimate(str(p)).total == vramwise.estimate(SMALL).total


def test_nesting_up_to_the_limit_is_accepted(tmp_path):
    deep = {"model_type": "llama"}
    node = deep
    for _ in range(MAX_JSON_DEPTH - 2):
        node["x"] = {}
        node = node["x"]
    cfg = dict(SMALL, extra=deep["x"] if "x" in deep else {})
    p = _write(tmp_path, json.dumps(cfg).encode())
    read_config(str(p))
    p.write_text(json.dumps(dict(SMALL, extra=[[[[[[[[[[1]]]]]]]]]])))
    read_config(str(p))


def test_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    p = _write(tmp_path, GOOD)
    with open(p, "r+b") as f:  # a sparse file: nothing is written, nothing is read
        f.truncate(MAX_CONFIG_BYTES + 1)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    _fails(str(p), str(p), "larger than the 16 MiB")
    assert not opened


def test_a_folder_named_config_json(tmp_path):
    (tmp_path / "config.json").mkdir()
    _fails(str(tmp_path), "is a folder, not a config file")


def test_not_a_regular_file(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    _fails(str(fifo), "not a regular file")  # and it does not block on the FIFO


def test_long_path_component(tmp_path):
    long = tmp_path / ("x" * 300) / "config.json"
    _fails(str(long), "too long")
    _fails(str(tmp_path / ("y" * 300 + ".json")), "too long")


def test_nul_in_path():
    _fails("config\x00.json", "NUL")


@pytest.mark.skipif(ROOT, reason="root reads every file")
def test_unreadable_folder_and_file(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    p = folder / "config.json"
    p.write_bytes(GOOD)
    p.chmod(0)
    try:
        _fails(str(p), "permission denied", str(p))
    finally:
        p.chmod(0o644)
    folder.chmod(0)
    try:
        _fails(str(p), "permission denied")
        _fails(str(folder), "permission denied")
    finally:
        folder.chmod(0o755)


def test_permission_errors_are_config_errors(tmp_path, monkeypatch):
    """The same as above for any user: the OS refusing a stat or an open is one ConfigError."""
    p = _write(tmp_path, GOOD)
    import vramwise.inputs.config as src

    real_stat = os.stat

    def deny_stat(path, *a, **k):
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(src.os, "stat", deny_stat)
    _fails(str(p), "permission denied", str(p))
    monkeypatch.setattr(src.os, "stat", real_stat)

    def deny_open(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", deny_open)
    _fails(str(p), "cannot read config", "permission denied")


def test_success_path_unchanged(tmp_path):
    p = _write(tmp_path, GOOD)
    root, origin = read_config(str(p))
    assert root == SMALL and origin == str(p)
    root, origin = read_config(str(tmp_path))
    assert root == SMALL and origin == str(tmp_path / "config.json")


# -- model.safetensors.index.json -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["latin-1", "utf-16", "empty", "deep", "huge-int", "nan", "invalid", "array"])
def test_broken_index_is_a_config_error_naming_it(tmp_path, kind):
    _write(tmp_path, GOOD)
    index = _write(tmp_path, BAD_FILES[kind][0], "model.safetensors.index.json")
    with pytest.raises(ConfigError, match="model.safetensors.index.json"):
        checkpoint_size(str(tmp_path))
    msg = _fails(str(tmp_path), str(index))
    assert "weights index" in msg or "JSON" in msg or "UTF" in msg


def test_index_without_total_size_falls_back_to_the_files(tmp_path):
    _write(tmp_path, GOOD)
    _write(tmp_path, json.dumps({"metadata": {"total_size": "12"}, "weight_map": {}}).encode(),
           "model.safetensors.index.json")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 100)
    assert checkpoint_size(str(tmp_path)) == (100, f"1 safetensors file(s) in {tmp_path}")
    _write(tmp_path, json.dumps({"metadata": {"total_size": 4096}}).encode(), "model.safetensors.index.json")
    assert checkpoint_size(str(tmp_path)) == (4096, str(tmp_path / "model.safetensors.index.json"))


def test_dangling_weights_link_is_a_config_error(tmp_path):
    _write(tmp_path, GOOD)
    (tmp_path / "model.safetensors").symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match="model.safetensors"):
        checkpoint_size(str(tmp_path))


def test_index_folder(tmp_path):
    _write(tmp_path, GOOD)
    (tmp_path / "model.safetensors.index.json").mkdir()
    _fails(str(tmp_path), "model.safetensors.index.json is a folder")


# -- the hub ----------------------------------------------------------------------------------

def _hub_env(tmp_path, endpoint: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(tmp_path / "cache"),
               HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def _cli(args, env, timeout=60):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "vramwise", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)
    return proc, time.perf_counter() - t0


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_hub_fails_fast_in_one_line(tmp_path):
    proc, took = _cli(["estimate", "some-org/some-model"], _hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("vramwise: error: cannot reach the Hugging Face hub")
    assert "HF_HUB_OFFLINE=1" in lines[0] and "local config.json" in lines[0] and "ways on:" in lines[0]
    assert took < 15  # interpreter start included; the hub's own retries took about 50 s


def test_silent_hub_times_out(tmp_path):
    """A server that accepts and never answers: bounded by the probe's timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        env = _hub_env(tmp_path, f"http://127.0.0.1:{srv.getsockname()[1]}", HF_HUB_ETAG_TIMEOUT="1")
        proc, took = _cli(["estimate", "some-org/some-model"], env)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert proc.returncode == 2 and "cannot reach the Hugging Face hub" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert took < 15


def _cache(tmp_path, repo="org/tiny"):
    commit = "0123456789abcdef0123456789abcdef01234567"
    base = tmp_path / "cache" / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(SMALL))


@pytest.mark.slow  # two CLI processes that import transformers' AutoConfig, and so torch: 15-20 s
def test_cached_hub_id_works_when_unreachable_and_offline(tmp_path):
    _cache(tmp_path)
    want = vramwise.estimate(SMALL).total
    for extra in ({}, {"HF_HUB_OFFLINE": "1"}):
        env = _hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}", **extra)
        proc, _ = _cli(["estimate", "org/tiny", "--json"], env)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["total"] == want
        assert proc.stderr.strip() == ""


def test_offline_without_cache_is_one_line(tmp_path):
    env = _hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}", HF_HUB_OFFLINE="1")
    proc, _ = _cli(["estimate", "org/absent"], env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "org/absent" in proc.stderr


def test_hub_probe_leaves_the_environment_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    before = dict(os.environ)
    import vramwise.inputs.config as src

    monkeypatch.setattr(src, "_hub_reachable", lambda repo: False)
    monkeypatch.setattr(src, "_cached_config", lambda repo: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(src, "_hub_offline", lambda: False)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="cannot reach the Hugging Face hub"):
        read_config("some-org/some-model")
    assert time.perf_counter() - t0 < 1
    assert {k: v for k, v in os.environ.items() if not k.startswith(("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))} == {
        k: v for k, v in before.items() if not k.startswith(("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))}
