"""``run`` chooses blocks: tuned by default (modeled in the test suite), cached,
``--block`` overrides, ``--tune off`` keeps the defaults; the JSON and the text
report say which and whether the cache answered."""

import json
import os
import subprocess
import sys

import pytest

SMALL = ["attention", "--size", "N=150", "--size", "D=24", "--backend", "reference"]


def bb(*args, cache, env=None):
    environ = {**os.environ, "BLOCKBUSTER_CACHE": str(cache), **(env or {})}
    return subprocess.run([sys.executable, "-m", "blockbuster", *args], capture_output=True,
                          text=True, timeout=120, env=environ)


def report(*args, cache, env=None):
    r = bb("run", *args, "--json", cache=cache, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_tuned_then_cached(tmp_path):
    first = report(*SMALL, cache=tmp_path)
    t = first["tuning"]
    assert t["mode"] == "model" and t["source"] == "model" and t["from_cache"] is False
    assert set(t["blocks"]) == {"N", "S", "D"}
    assert {d: first["blocks"][d] for d in t["blocks"]} == t["blocks"]
    assert t["blocks"] != {"N": 64, "S": 64, "D": 24}      # 150 rows: not the defaults
    assert first["validation"]["passed"]
    again = report(*SMALL, cache=tmp_path)
    assert again["tuning"]["from_cache"] is True and again["tuning"]["source"] == "cache"
    assert again["blocks"] == first["blocks"]


def test_block_overrides_tuning(tmp_path):
    r = report(*SMALL, "--block", "N=32", cache=tmp_path)
    assert r["blocks"] == {"N": 32, "S": 64, "D": 24}      # the rest keep their defaults
    assert r["tuning"]["source"] == "given" and r["tuning"]["given"] == {"N": 32}
    assert not (tmp_path / "tuning").exists()


def test_tune_off_keeps_the_defaults(tmp_path):
    r = report(*SMALL, "--tune", "off", cache=tmp_path)
    assert r["blocks"] == {"N": 64, "S": 64, "D": 24}
    assert r["tuning"]["source"] == "off"


def test_measure_when_asked(tmp_path):
    r = report("attention", "--size", "N=40", "--size", "D=8", "--backend", "reference",
               "--tune", "measure", "--tune-seconds", "5", cache=tmp_path)
    t = r["tuning"]
    assert t["mode"] == "measure" and t["source"] == "measure"
    timed = [c for c in t["candidates"] if c["measured_s"] is not None]
    assert timed and t["blocks"] in [c["blocks"] for c in timed]
    assert r["validation"]["passed"]


def test_text_report_names_the_blocks(tmp_path):
    r = bb("run", *SMALL, cache=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("blocks "))
    assert "tuned" in line and "modeled" in line
    again = bb("run", *SMALL, cache=tmp_path)
    assert "from the tuning cache" in again.stdout


@pytest.mark.parametrize("env,args", [({"BLOCKBUSTER_TUNE": "fast"}, []),
                                      ({}, ["--tune", "fast"])])
def test_bad_mode_is_one_line(tmp_path, env, args):
    r = bb("run", *SMALL, *args, cache=tmp_path, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("error: ") and "fast" in r.stderr
