"""Cloud scale-out fabrics (explorer/fabrics.py): the collective model with a fabric's own hop,
rows mapped to their fabric, the stored fit reproducible."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.costs.comm import collective_s
from explorer.errors import SpecError
from explorer.fabrics import FIT_PARAMS, _fabric, fabric_in, fabrics, fit_fabric, with_fabric
from explorer.hardware import load_hardware
from explorer.kernel_cases import (
    load_kernel_cases,
    on_own_fabric,
    predict_kernel_cases,
    roofline_kernel_cases,
)


def test_hierarchical_allreduce_over_a_fabric_by_hand():
    # 16 GPUs = 2 domains of 8; 1 GB; one protocol: no base, scale-up step 1 us at full bandwidth,
    # the fabric's hop 100 us at a quarter of its 25 GB/s.
    S, up, out, eta = 1e9, 450e9, 25e9, 1.0
    t = collective_s(S, 16, domain=8, up_bw=up, up_step_s=1e-6, out_bw=out, out_step_s=5e-6, eta_n=eta,
                     protocols=[(0.0, 1e-6, 1.0, 100e-6, 0.25)])
    # hierarchical: 2*7 intra steps + 2*1 fabric steps + the slower of the two transfers:
    # intra 2*7/8*S/up = 3.889 ms, across 2*1/2*(S/8)/(out*0.25) = 20 ms
    hier = 14e-6 + 200e-6 + max(2 * 7 / 8 * S / up, (S / 8) / (out * 0.25))
    # flat ring: 30 steps at the fabric's 100 us, 2*15/16*S over min(up, 8*out*0.25) = 50 GB/s
    ring = 30 * 100e-6 + 2 * 15 / 16 * S / min(up, 8 * out * 0.25)
    assert float(t) == pytest.approx(min(hier, ring), rel=1e-12)
    assert float(t) == pytest.approx(hier, rel=1e-12)


def test_a_protocol_without_fabric_figures_is_todays_model():
    args = dict(domain=8, up_bw=450e9, up_step_s=1e-6, out_bw=50e9, out_step_s=5e-6, eta_n=0.8)
    S = np.logspace(3, 10, 15)
    a = collective_s(S, 32, protocols=[(8.4e-6, 1e-6, 1.0), (6.6e-6, 0.5e-6, 0.3)], **args)
    b = collective_s(S, 32, protocols=[(8.4e-6, 1e-6, 1.0, 5e-6, 1.0), (6.6e-6, 0.5e-6, 0.3, 5e-6, 0.3)], **args)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_fabrics_swap_only_the_scale_out_hop():
    h = load_hardware("h100")
    f = fabrics()["gcp-a3-mega-tcpxo"]
    g = with_fabric(h, f)
    assert g.scaleout_bw == 25e9 and g.scaleout_latency_s == f.simple_step_s and g.fabric == f.name
    assert (g.scaleup_bw, g.scaleup_domain, g.eta_network) == (h.scaleup_bw, h.scaleup_domain, h.eta_network)
    assert with_fabric(h, None) is h
    # a group inside one domain never sees the fabric
    kw = dict(domain=8, up_bw=h.scaleup_bw, up_step_s=h.scaleup_latency_s, eta_n=h.eta_network)
    from explorer.costs.comm import protocols_of
    a = collective_s(1e6, 8, out_bw=h.scaleout_bw, out_step_s=h.scaleout_latency_s, protocols=protocols_of(h), **kw)
    b = collective_s(1e6, 8, out_bw=g.scaleout_bw, out_step_s=g.scaleout_latency_s, protocols=protocols_of(g), **kw)
    assert float(a) == float(b)


@pytest.mark.parametrize("text, name", [
    ("B200 (AWS p6-b200, 4 nodes, 8x50GB/s EFA v4 per node)", "aws-efa"), ("p5en.48xlarge", "aws-efa"),
    ("H100 80GB HBM3 (GCP A3 Mega, 2 nodes x 8)", "gcp-a3-mega-tcpxo"), ("DGX H100, InfiniBand NDR", None),
    ("ip5x", None),
])
def test_rows_name_their_fabric(text, name):
    f = fabric_in(text)
    assert (f.name if f else None) == name


def test_cloud_fabric_rows_are_scored_and_kept_out_of_the_hardware_fits():
    cases = load_kernel_cases()
    over = [c for c in cases if c.supported and c.values.get("fabric")]
    assert {c.values["fabric"] for c in over} == {"aws-efa", "gcp-a3-mega-tcpxo"}
    assert all(c.values["n"] > 8 and not on_own_fabric(c) for c in over)
    inside = [c for c in cases if c.supported and c.kind == "allreduce" and c.values["n"] <= 8]
    assert inside and not any(c.values.get("fabric") for c in inside)
    pred = predict_kernel_cases(over)
    roof = roofline_kernel_cases(over)
    lat = np.array([c.metric == "latency_us" for c in over])
    assert np.all(np.isfinite(pred))
    assert np.all(np.where(lat, pred >= roof * (1 - 1e-9), pred <= roof * (1 + 1e-9)))  # never past the roofline


def test_the_stored_fit_is_what_the_fit_gives():
    cases = load_kernel_cases()
    for name, f in fabrics().items():
        mine = [c for c in cases if c.supported and c.values.get("fabric") == name]
        values, _ = fit_fabric(f, mine, load_hardware)
        for k in FIT_PARAMS:
            assert values[k] == pytest.approx(f.raw[k], rel=0.02), (name, k)
        assert f.raw["fit"]["rows"] == len(mine)


@pytest.mark.parametrize("entry, key", [
    ({"name": "x", "match": "x", "scaleout_GB_per_s": 50, "simple_step_us": 5, "ll_step_us": 5, "source": "s"},
     "ll_bw_fraction"),
    ({"name": "x", "match": "(", "scaleout_GB_per_s": 50, "simple_step_us": 5, "ll_step_us": 5,
      "ll_bw_fraction": 0.5, "source": "s"}, "match"),
    ({"name": "x", "match": "x", "scaleout_GB_per_s": -1, "simple_step_us": 5, "ll_step_us": 5,
      "ll_bw_fraction": 0.5, "source": "s"}, "scaleout_GB_per_s"),
])
def test_a_bad_fabric_entry_names_its_key(entry, key):
    with pytest.raises(SpecError, match=key):
        _fabric(entry, 0)


def test_evaluate_over_a_cloud_fabric():
    from explorer.api import evaluate

    kw = dict(tp=16, precision="fp8", batch=16)
    ib = evaluate("llama-3.1-405b", "h100", **kw)
    efa = evaluate("llama-3.1-405b", "h100", fabric="aws-efa", **kw)
    one_node = [evaluate("llama-3.1-405b", "h100", tp=8, precision="fp8", batch=16, fabric=f) for f in (None, "aws-efa")]
    # tensor parallelism across two nodes pays the fabric's per-step latency on every all-reduce
    assert efa["tokens_per_s_per_user"] < ib["tokens_per_s_per_user"]
    # inside one node the fabric is never touched
    assert one_node[0]["tokens_per_s_per_user"] == one_node[1]["tokens_per_s_per_user"]


def test_an_unknown_fabric_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--fabric", "nope"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--fabric: unknown fabric 'nope'; allowed: aws-efa" in r.stderr


def test_kind_at_fabric_names_the_kind_with_that_fabric():
    h = load_hardware("h100@aws-efa")
    assert (h.name, h.fabric, h.label) == ("h100", "aws-efa", "h100@aws-efa")
    assert h.scaleout_bw == fabrics()["aws-efa"].scaleout_bw
    with pytest.raises(SpecError, match="unknown fabric 'nope'"):
        load_hardware("h100@nope")


def test_a_space_puts_a_kind_on_its_own_fabric_and_a_cloud_fabric_on_one_front(tmp_path):
    import subprocess
    import sys

    import pandas as pd
    import yaml

    space = {"hardware": ["h100", "h100@aws-efa"], "model": "llama-3.1-405b", "workload": {"isl": 1024, "osl": 1024},
             "deployment": {"precision": "fp8", "tp": [8, 16], "batch": [8, 64]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(space))
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", "s.yaml", "--sampler", "grid", "--out", "out",
                        "--no-report"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    d = pd.read_csv(tmp_path / "out" / "s.csv").set_index(["hardware", "tp", "batch"])["tokens_per_s_per_user"]
    assert set(d.index.get_level_values(0)) == {"h100", "h100@aws-efa"}
    for b in (8, 64):
        assert d[("h100@aws-efa", 8, b)] == d[("h100", 8, b)]  # one node: the fabric is never crossed
        assert d[("h100@aws-efa", 16, b)] < d[("h100", 16, b)]  # two nodes: every all-reduce crosses EFA
    space["hardware"] = ["h100@nope"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(space))
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", "bad.yaml", "--out", "o2", "--no-report"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "bad.yaml: hardware[0]: unknown fabric 'nope'" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and not (tmp_path / "o2").exists()
