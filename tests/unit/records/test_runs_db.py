"""The runs database (vramwise.records.runs) and ``vramwise runs``, on hand-made rows."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from argparse import Namespace
from pathlib import Path

import pytest

from vramwise.errors import UsageError
from vramwise.records.runs import SCHEMA_VERSION, RunsDB, default_path, error_percent, summarize
from vramwise.surfaces.cli import runs as runs_cli
from vramwise.surfaces.cli.main import main

MIB = 2**20


def _fill(db: RunsDB) -> list[int]:
    """Three measured runs and one that stopped before it was measured."""
    ids = [
        # (1,000 MiB - 1,010 MiB) / 1,010 MiB = -0.990099 %
        db.add(model="tiny-llama", profile="hf", method="lora", device="cpu",
               settings={"batch_size": 2, "seq_len": 128}, predicted_peak=1000 * MIB),
        # (1,100 MiB - 1,000 MiB) / 1,000 MiB = +10 %
        db.add(model="tiny-llama", profile="hf", method="lora", device="cpu", predicted_peak=1100 * MIB),
        # (3 GiB - 4 GiB) / 4 GiB = -25 %
        db.add(model="big", profile="unsloth", method="qlora", device="cuda:0", predicted_peak=3 * 2**30,
               predicted_reserved=4 * 2**30),
        db.add(model="big", profile="hf", method="full", device="cuda:0", predicted_peak=5 * 2**30),
    ]
    db.update(ids[0], measured_peak=1010 * MIB, measured={"peak": 1010 * MIB}, measured_steps=2)
    db.update(ids[1], measured_peak=1000 * MIB, measured_steps=2)
    # reserved: (4 GiB - 5 GiB) / 5 GiB = -20 %
    db.update(ids[2], measured_peak=4 * 2**30, measured_reserved=5 * 2**30, measured_steps=3)
    return ids


def test_error_percent_is_predicted_minus_measured_over_measured():
    assert error_percent(110, 100) == pytest.approx(10.0)  # (110 - 100) / 100
    assert error_percent(90, 100) == pytest.approx(-10.0)
    assert error_percent(100, None) is None
    assert error_percent(None, 100) is None
    assert error_percent(100, 0) is None


def test_rows_round_trip_with_their_errors(tmp_path):
    db = RunsDB(tmp_path / "sub" / "runs.sqlite3")  # the folder is created on the first write
    ids = _fill(db)
    runs = db.runs()
    assert [r.id for r in runs] == ids
    first, second, third, fourth = runs
    assert first.model == "tiny-llama" and first.settings == {"batch_size": 2, "seq_len": 128}
    assert first.measured == {"peak": 1010 * MIB} and first.measured_steps == 2
    assert first.updated is not None and first.started.endswith("+00:00")
    assert first.error == pytest.approx(-0.990099, abs=1e-6)
    assert second.error == pytest.approx(10.0)
    assert third.error == pytest.approx(-25.0) and third.reserved_error == pytest.approx(-20.0)
    assert fourth.error is None and fourth.measured is None and fourth.notes == []
    assert db.get(ids[2]).model == "big" and db.get(12345) is None
    assert first.to_dict()["error_percent"] == pytest.approx(-0.990099, abs=1e-6)


def test_summary_per_profile_and_method(tmp_path):
    db = RunsDB(tmp_path / "runs.sqlite3")
    _fill(db)
    got = {(g["profile"], g["method"]): g for g in summarize(db.runs())}
    lora = got[("hf", "lora")]
    # |−0.990099| and |10|: mean 5.4950495, largest 10
    assert (lora["runs"], lora["measured"]) == (2, 2)
    assert lora["mean_abs_error_percent"] == pytest.approx(5.4950495, abs=1e-6)
    assert lora["max_abs_error_percent"] == pytest.approx(10.0)
    assert got[("unsloth", "qlora")]["max_abs_error_percent"] == pytest.approx(25.0)
    full = got[("hf", "full")]
    assert (full["runs"], full["measured"], full["mean_abs_error_percent"]) == (1, 0, None)


def test_the_table_is_bounded_to_the_newest_rows(tmp_path):
    db = RunsDB(tmp_path / "runs.sqlite3", limit=3)
    ids = [db.add(model=f"m{i}") for i in range(5)]
    assert [r.model for r in db.runs()] == ["m2", "m3", "m4"]
    assert db.update(ids[0], measured_peak=1) is False  # pruned
    assert [r.model for r in db.runs(limit=2)] == ["m3", "m4"]
    assert db.add(model="m5") == ids[-1] + 1  # ids are never reused


def test_schema_version_and_bad_files(tmp_path):
    path = tmp_path / "runs.sqlite3"
    RunsDB(path).add(model="m")
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UsageError, match="newer"):
        RunsDB(path).runs()
    with pytest.raises(UsageError, match="newer"):
        RunsDB(path).add(model="m")
    junk = tmp_path / "junk.sqlite3"
    junk.write_text("not a database\n" * 100)
    with pytest.raises(UsageError, match="not a runs database"):
        RunsDB(junk).runs()
    with pytest.raises(UsageError, match="unknown run field"):
        RunsDB(path).add(modle="m")
    with pytest.raises(UsageError, match="limit"):
        RunsDB(path, limit=0)
    assert RunsDB(tmp_path / "absent.sqlite3").runs() == []
    assert not (tmp_path / "absent.sqlite3").exists()  # reading creates nothing


def test_a_large_json_value_is_replaced_by_a_note(tmp_path):
    db = RunsDB(tmp_path / "runs.sqlite3")
    run = db.get(db.add(model="m", predicted={"warnings": ["x" * 300_000]}))
    assert set(run.predicted) == {"omitted"} and "over the" in run.predicted["omitted"]


def test_concurrent_writers(tmp_path):
    path = tmp_path / "runs.sqlite3"
    errors: list = []

    def write(k: int) -> None:
        try:
            db = RunsDB(path)
            for i in range(10):
                run_id = db.add(model=f"w{k}", predicted_peak=i)
                db.update(run_id, measured_peak=i + 1)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = RunsDB(path).runs()
    assert len(runs) == 40 and all(r.measured_peak == r.predicted_peak + 1 for r in runs)


def test_default_path(monkeypatch, tmp_path):
    assert default_path({"VRAMWISE_RUNS_DB": str(tmp_path / "x.db")}) == tmp_path / "x.db"
    assert default_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "vramwise" / "runs.sqlite3"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path({}) == Path(tmp_path) / ".cache" / "vramwise" / "runs.sqlite3"
    monkeypatch.setenv("VRAMWISE_RUNS_DB", str(tmp_path / "env.sqlite3"))
    assert RunsDB().path == tmp_path / "env.sqlite3"


# -- vramwise runs ------------------------------------------------------------------------------

def test_runs_json(tmp_path, capsys):
    path = tmp_path / "runs.sqlite3"
    _fill(RunsDB(path))
    assert main(["runs", "--json", "--db", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["database"] == str(path)
    assert [r["model"] for r in data["runs"]] == ["tiny-llama", "tiny-llama", "big", "big"]
    assert data["runs"][1]["error_percent"] == pytest.approx(10.0)
    assert data["runs"][3]["error_percent"] is None
    assert {(g["profile"], g["method"]) for g in data["summary"]} == {("hf", "lora"), ("hf", "full"), ("unsloth", "qlora")}
    assert main(["runs", "--json", "--db", str(path), "--limit", "1"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [4]


def test_runs_table(tmp_path):
    path = tmp_path / "runs.sqlite3"
    _fill(RunsDB(path))
    out = io.StringIO()
    assert runs_cli.run(Namespace(db=str(path), json=False, limit=None), out) == 0
    text = out.getvalue()
    assert text.startswith(f"4 runs in {path}\n")
    lines = text.splitlines()
    first = next(line for line in lines if line.lstrip().startswith("1 "))
    # 1,000 MiB predicted, 1,010 MiB measured, -0.99 %
    assert "1,000.0 MiB" in first and "1,010.0 MiB" in first and "-0.99 %" in first and "2 x 128" in first
    third = next(line for line in lines if line.lstrip().startswith("3 "))
    assert "3.00 GiB" in third and "4.00 GiB" in third and "-25.00 %" in third
    summary = next(line for line in lines if line.startswith("hf") and "lora" in line)
    assert summary.split()[2:] == ["2", "2", "5.50", "%", "10.00", "%"]


def test_runs_without_a_database_and_bad_arguments(tmp_path, capsys):
    assert main(["runs", "--db", str(tmp_path / "none.sqlite3")]) == 0
    assert "no runs recorded" in capsys.readouterr().out
    assert main(["runs", "--db", str(tmp_path / "none.sqlite3"), "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"x" * 2048)
    assert main(["runs", "--db", str(junk)]) == 2
    assert "not a runs database" in capsys.readouterr().err
