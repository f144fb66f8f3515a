"""``explorer evaluate``, ``explorer models``, ``explorer hardware`` from the command line.

Successful runs go through ``explorer.cli.main`` in-process (fast); user errors run the real
``python -m explorer`` in a subprocess so exit code, stderr and the absence of a traceback are
what a user sees.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from explorer.cli import main

JSON_KEYS = {"tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "feasible", "reason", "memory_bytes_per_gpu",
             "params_total", "params_active", "batch", "breakdown"}


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse exits
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, *argv: str) -> dict:
    code, out, err = cli(capsys, "evaluate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_evaluate_json_preset(capsys):
    r = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h200")
    assert JSON_KEYS <= set(r)
    assert r["feasible"] is True and r["reason"] == ""
    assert r["batch"] == 1
    assert r["params_total"] == pytest.approx(8.03e9, rel=1e-3)
    assert r["params_active"] == r["params_total"]
    assert set(r["breakdown"]) == {"gemm", "attention", "moe", "comm", "prefill", "overhead"}
    assert sum(r["breakdown"].values()) == pytest.approx(r["tpot_s"], rel=1e-9)
    assert r["tokens_per_s_per_user"] == pytest.approx(1 / r["tpot_s"])
    assert 0 < r["memory_bytes_per_gpu"] < 141e9


def test_evaluate_text_output(capsys):
    code, out, err = cli(capsys, "evaluate", "--model", "llama-3.1-8b", "--hardware", "h200")
    assert code == 0, err
    for word in ("tokens/s/GPU", "tokens/s/user", "TTFT", "memory per GPU", "gemm", "attention", "total"):
        assert word in out


def test_batch_max_reports_a_feasible_batch(capsys):
    r = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h200", "--batch", "max")
    assert r["feasible"] is True
    assert isinstance(r["batch"], int) and r["batch"] > 1
    assert r["memory_bytes_per_gpu"] <= r["memory_capacity_bytes"]
    one = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h200", "--batch", "1")
    assert r["tokens_per_s_per_gpu"] > one["tokens_per_s_per_gpu"]


def test_custom_dense_shape(capsys):
    """Llama-3.1-8B's shape given by hand (with --vocab) gives Llama-3.1-8B's figures."""
    r = cli_json(capsys, "--hidden", "4096", "--ffn", "14336", "--layers", "32", "--heads", "32", "--kv-heads", "8",
                 "--vocab", "128256", "--hardware", "h200")
    assert r["feasible"] is True
    assert r["params_total"] == 8_030_261_248
    preset = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h200")
    assert r["tokens_per_s_per_user"] == pytest.approx(preset["tokens_per_s_per_user"], rel=1e-12)


def test_custom_moe_shape(capsys):
    """Mixtral-like: 8 experts, top-2, expert width 14336: active = total - 6 experts x 32 layers."""
    r = cli_json(capsys, "--hidden", "4096", "--ffn", "14336", "--layers", "32", "--heads", "32", "--kv-heads", "8",
                 "--vocab", "32000", "--experts", "8", "--experts-per-token", "2", "--expert-ffn", "14336",
                 "--hardware", "h200", "--precision", "fp8")
    assert r["feasible"] is True
    assert r["params_total"] - r["params_active"] == 6 * 3 * 4096 * 14336 * 32
    assert r["params_total"] == pytest.approx(46.7e9, rel=0.01)
    assert r["breakdown"]["moe"] > 0


def test_preset_with_override(capsys):
    r = cli_json(capsys, "--model", "llama-3.1-8b", "--layers", "16", "--hardware", "h200")
    base = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h200")
    assert r["params_total"] < base["params_total"]
    assert r["tokens_per_s_per_user"] > base["tokens_per_s_per_user"]


def test_unsupported_format_is_reported_not_raised(capsys):
    r = cli_json(capsys, "--model", "llama-3.1-8b", "--hardware", "h100", "--precision", "fp4")
    assert r["feasible"] is False and "fp4" in r["reason"]


def test_models_and_hardware_list(capsys):
    code, out, _ = cli(capsys, "models")
    assert code == 0 and "llama-3.1-8b" in out and "deepseek-v3" in out
    code, out, _ = cli(capsys, "hardware")
    assert code == 0
    for name in ("h100", "h200", "b200", "mi300x", "l40s", "h20", "aws-efa", "gcp-a3-mega-tcpxo"):
        assert name in out
    code, out, _ = cli(capsys, "models", "--json")
    assert code == 0 and any(m["name"] == "llama-3.1-8b" for m in json.loads(out))
    code, out, _ = cli(capsys, "hardware", "--json")
    assert code == 0 and any(h["name"] == "h200" for h in json.loads(out))


# ------------------------------------------------------------------ user errors (subprocess)


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "explorer", *argv], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def bad_yaml(tmp_path_factory):
    p = tmp_path_factory.mktemp("hw") / "broken.yaml"
    p.write_text("name: broken\ncompute: {peak_TFLOPS: [1, 2\n", encoding="utf-8")
    return p


ERROR_CASES = {
    "unknown model": (["--model", "llama-9"], "unknown model"),
    "unknown hardware": (["--model", "llama-3.1-8b", "--hardware", "h900"], "unknown hardware"),
    "unknown precision": (["--model", "llama-3.1-8b", "--precision", "fp3"], "unknown precision"),
    "zero batch": (["--model", "llama-3.1-8b", "--batch", "0"], "--batch"),
    "negative hidden": (["--hidden", "-5", "--ffn", "4096", "--layers", "2", "--heads", "8"], "--hidden"),
    "bad batch text": (["--model", "llama-3.1-8b", "--batch", "lots"], "--batch"),
    "missing shape": (["--hidden", "4096"], "--ffn"),
    "bad moe": (["--hidden", "1024", "--ffn", "4096", "--layers", "2", "--heads", "8", "--experts", "8",
                 "--experts-per-token", "9", "--expert-ffn", "512"], "experts_per_token"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_user_errors_exit_2_with_one_line(case):
    argv, needle = ERROR_CASES[case]
    p = run_cli("evaluate", *argv)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert needle in lines[0]
    assert p.stdout == ""


def test_malformed_hardware_yaml_path(bad_yaml):
    p = run_cli("evaluate", "--model", "llama-3.1-8b", "--hardware", str(bad_yaml))
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad_yaml) in lines[0] and "malformed YAML" in lines[0]


def test_console_script_custom_shape_end_to_end():
    """The installed ``explorer`` script, custom MoE shape, JSON out (regression: custom shapes used to
    crash in build_design with a TypeError on the ModelShape defaults)."""
    p = subprocess.run(["explorer", "evaluate", "--hidden", "1024", "--ffn", "4096", "--layers", "2", "--heads", "8",
                        "--experts", "8", "--experts-per-token", "2", "--expert-ffn", "1024", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert JSON_KEYS <= set(r) and r["feasible"] is True
