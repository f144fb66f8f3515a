"""Hardware files: every shipped file loads, names and aliases resolve, unsupported formats are
infeasible points (not exceptions), and malformed files fail with one line naming the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.api import evaluate
from explorer.errors import SpecError
from explorer.hardware import HARDWARE_DIR, hardware_files, list_hardware, load_hardware
from explorer.precision import TENSOR_FORMATS

NAMES = ["a100-80gb", "h100", "h200", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi355x", "l40s",
         "h800", "h200-nvl", "gh200", "rtx-pro-6000", "h20"]


def test_every_file_loads():
    files = hardware_files()
    assert len(files) >= len(NAMES)
    kinds = list_hardware()
    assert len(kinds) == len(files)
    for h in kinds:
        assert h.hbm_bw > 1e11 and h.hbm_bytes > 1e10  # SI units: bytes/s and bytes
        assert all(1e13 < v < 1e17 for v in h.peak_flops.values())  # FLOP/s, not TFLOPS
        assert "bf16" in h.peak_flops or "fp16" in h.peak_flops
        assert set(h.peak_flops) <= set(TENSOR_FORMATS)
        assert h.sms >= 1 and h.gemm_tiles and h.max_split_k >= 1
        for eta in (h.eta_compute, h.eta_memory, h.eta_network):
            assert 0 < eta <= 1
        assert 0 < h.usable_fraction <= 1
        assert h.scaleup_domain >= 1 and h.scaleout_bw > 0
        assert h.kernel_launch_s < 1e-3 and h.step_overhead_s < 1e-1  # seconds, not microseconds
        assert h.efficiency_kind in ("assumption", "calibration")


@pytest.mark.parametrize("name", NAMES)
def test_names_resolve(name):
    h = load_hardware(name)
    assert h.name == name
    assert Path(h.path).resolve().parent == HARDWARE_DIR.resolve()


def test_aliases_and_case():
    assert load_hardware("a100").name == "a100-80gb"
    assert load_hardware("H100").name == "h100"
    for h in list_hardware():
        for a in h.aliases:
            assert load_hardware(a).name == h.name


def test_units_converted_once():
    """h200.yaml: 141 GB, 4.8 TB/s, 989.4 dense bf16 TFLOPS, 450 GB/s NVLink."""
    h = load_hardware("h200")
    assert h.hbm_bytes == pytest.approx(141e9)
    assert h.hbm_bw == pytest.approx(4.8e12)
    assert h.peak_flops["bf16"] == pytest.approx(989.4e12)
    assert h.scaleup_bw == pytest.approx(450e9)


def test_unknown_hardware_suggests():
    with pytest.raises(SpecError, match=r"unknown hardware 'h2000'.*did you mean 'h200'"):
        load_hardware("h2000")


def test_h20_is_the_capped_hopper_part():
    """h20.yaml: 78 SMs, 148 / 296 dense bf16 / fp8 TFLOPS, 4.0 TB/s, NVLink 450 GB/s per direction."""
    h = load_hardware("h20")
    assert (h.sms, h.arch) == (78, "hopper")
    assert h.peak_flops["bf16"] == pytest.approx(148e12) and h.peak_flops["fp8"] == pytest.approx(296e12)
    assert h.hbm_bw == pytest.approx(4.0e12) and h.scaleup_bw == pytest.approx(450e9)


@pytest.mark.parametrize("hw, precision, fmt", [("h100", "fp4", "fp4"), ("a100-80gb", "fp8", "fp8"),
                                                ("mi300x", "nvfp4", "fp4")])
def test_unsupported_format_is_an_infeasible_point(hw, precision, fmt):
    r = evaluate("llama-3.1-8b", hw, batch=1, precision=precision)
    assert r["feasible"] is False
    assert r["reason_code"] == 1
    assert fmt in r["reason"] and hw in r["reason"]
    assert r["tokens_per_s_per_user"] > 0  # figures still computed, finite


def test_supported_formats_are_feasible():
    assert evaluate("llama-3.1-8b", "h100", batch=1, precision="fp8")["feasible"]
    assert evaluate("llama-3.1-8b", "b200", batch=1, precision="fp4")["feasible"]


# -------------------------------------------------------------------------- malformed files


def _copy_h100(tmp_path: Path, edit=lambda s: s, name="custom.yaml") -> Path:
    text = (HARDWARE_DIR / "h100.yaml").read_text(encoding="utf-8")
    p = tmp_path / name
    edited = edit(text)
    assert edited != text or name == "custom.yaml", "the edit did not apply: h100.yaml changed?"
    p.write_text(edited, encoding="utf-8")
    return p


def test_a_valid_copy_loads_by_path(tmp_path):
    p = _copy_h100(tmp_path)
    assert load_hardware(str(p)).name == "h100"


def test_malformed_yaml_names_the_file(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: broken\ncompute: {peak_TFLOPS: [1, 2\n", encoding="utf-8")
    with pytest.raises(SpecError) as e:
        load_hardware(str(p))
    msg = str(e.value)
    assert str(p) in msg and "malformed YAML" in msg
    assert "\n" not in msg


def test_missing_file_names_the_file(tmp_path):
    p = tmp_path / "nope.yaml"
    with pytest.raises(SpecError, match="file not found") as e:
        load_hardware(str(p))
    assert str(p) in str(e.value)


def test_unknown_key_did_you_mean(tmp_path):
    p = _copy_h100(tmp_path, lambda s: s.replace("hbm_TB_per_s:", "hbm_TB_per_sec:"), "typo.yaml")
    with pytest.raises(SpecError) as e:
        load_hardware(str(p))
    msg = str(e.value)
    assert str(p) in msg and "memory.hbm_TB_per_sec" in msg and "did you mean 'hbm_TB_per_s'" in msg
    assert "\n" not in msg


def test_out_of_range_value_named(tmp_path):
    p = _copy_h100(tmp_path, lambda s: re.sub(r"usable_fraction: [0-9.]+", "usable_fraction: 1.5", s), "range.yaml")
    with pytest.raises(SpecError, match=r"memory\.usable_fraction: must be <= 1"):
        load_hardware(str(p))


def test_wrong_type_named(tmp_path):
    p = _copy_h100(tmp_path, lambda s: re.sub(r"sms: [0-9]+", "sms: many", s), "type.yaml")
    with pytest.raises(SpecError, match=r"compute\.sms: expected a whole number, got 'many'"):
        load_hardware(str(p))


def test_bad_tiles_named(tmp_path):
    def edit(s: str) -> str:
        start = s.index("gemm_tiles:")
        end = s.index("\n", start)
        return s[:start] + "gemm_tiles: [[128, 0]]" + s[end:]
    p = _copy_h100(tmp_path, edit, "tiles.yaml")
    with pytest.raises(SpecError, match=r"gemm_tiles\[0\]"):
        load_hardware(str(p))
