"""Software releases of a serving runtime (explorer/runtime.py ``Release``, ``pick_release``): which
measured release a run is read as, the served-kernel speed it carries into the simulator, how
calibration finds and anchors releases, and the ``NAME@RELEASE`` surface."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from explorer.api import evaluate
from explorer.calibrate import measured_releases, write_runtime_fit
from explorer.errors import SpecError
from explorer.runtime import Release, _load_file, load_runtime, pick_release, version_key
from explorer.validate import Case

TABLE = (Release("2025-11", "2025-11-02", 0.8),  # runs that named no version: their month is the label
         Release("0.5.6", "2025-12-31", 0.7),
         Release("0.5.9", "2026-03-25", 0.9),
         Release("0.5.12", "2026-05-22", 1.0))


def test_version_key_orders_versions_and_refuses_dates():
    assert version_key("1.2.0rc6.post3") == (1, 2, 0, 6, 3)
    assert version_key("0.5.12") > version_key("0.5.9")  # numeric, not text order
    assert version_key("2025-11-02") is None and version_key("gpt-oss-dev") is None


@pytest.mark.parametrize("label, date, expected", [
    ("0.5.9", "2026-09-01", "0.5.9"),        # the same release, whatever the date
    ("", "2025-11-20", "2025-11"),           # a run naming no version: its month's entry
    ("", "2025-10-20", "2025-11"),           # older than every release: the oldest
    ("0.5.10", "2026-04-10", "0.5.9"),       # unseen version with a date: the last release measured before it
    ("", "2027-01-01", "0.5.12"),            # newer than all: the newest
    ("0.5.7", "", "0.5.6"),                  # no date: by version, the newest measured at or below it
    ("0.4.0", "", "0.5.6"),                  # below every measured version: the oldest version
    ("0.9.0", "", "0.5.12"),
])
def test_pick_release_by_hand(label, date, expected):
    r = pick_release(TABLE, label, date)
    assert r is not None and r.label == expected


def test_pick_release_without_information_is_the_newest():
    assert pick_release(TABLE, "", "") is None  # speed 1.0: the newest
    assert pick_release((), "0.5.9", "2026-03-25") is None
    assert pick_release(TABLE, "gpt-oss-dev", "") is None  # not a version, no date: nothing to go by


def test_release_speed_reaches_the_design_columns():
    rt = replace(load_runtime("sglang"), releases={"h200": TABLE, "b300": ()})
    assert rt.release_speed("h200") == 1.0  # no release named: the newest
    assert rt.at_release("0.5.6").release_speed("h200") == 0.7
    assert rt.at_release("0.5.6").release_speed("h200", "dense") == 1.0  # measured on MoE models only
    assert rt.at_release("0.5.6").release_speed("b300") == 1.0  # its own table: one release measured
    assert rt.at_release("0.5.6").release_speed("mi300x") == 1.0  # no table of its own or a sibling's
    assert rt.without_fit("h200").at_release("0.5.6").release_speed("h200") == 1.0  # no hopper sibling's
    assert rt.without_fit("h200").at_release("0.5.6").release_speed("gh200") == 1.0


def test_a_kind_without_its_own_table_takes_its_siblings():
    """MI300X held out (no table of its own): its generation's tables (CDNA3), else its family's (CDNA),
    each release at the median of their speeds; a kind fitted on one release keeps its empty table (speed 1); NVIDIA kinds are not
    siblings of AMD ones."""
    from dataclasses import replace

    base = load_runtime("sglang")
    rt = replace(base, releases={"mi325x": (Release("0.5.9", "2026-02-27", 0.6), Release("0.5.12", "2026-05-18", 1.0)),
                                 "mi355x": (Release("0.5.9", "2026-02-20", 0.8), Release("0.5.12", "2026-05-27", 1.0)),
                                 "b200": (Release("0.5.9", "2026-03-25", 0.1),),
                                 "b300": ()}, transferred_from={})
    table = rt.release_table("mi300x")  # its generation's (cdna3: MI325X) before its family's
    assert [(r.label, r.date, r.speed) for r in table] == [("0.5.9", "2026-02-27", pytest.approx(0.6)),
                                                            ("0.5.12", "2026-05-18", 1.0)]
    assert rt.at_release("0.5.9").release_speed("mi300x") == pytest.approx(0.6)
    fam = replace(rt, releases={k: v for k, v in rt.releases.items() if k != "mi325x"}).release_table("mi325x")
    assert [(r.label, r.speed) for r in fam] == [("0.5.9", pytest.approx(0.8)), ("0.5.12", 1.0)]  # then cdna's
    both = replace(rt, releases={**rt.releases, "mi300x": (Release("0.5.9", "2026-02-21", 0.5),)})
    assert both.release_table("mi325x") == both.releases["mi325x"]  # a kind's own table first
    assert [(r.label, r.date, r.speed) for r in both.without_releases_on("mi325x").release_table("mi325x")] == [
        ("0.5.9", "2026-02-21", 0.5)]  # of two generations' tables, its own generation's alone
    assert rt.at_release("0.5.9").release_speed("b300") == 1.0  # its own (empty) table
    assert rt.at_release("0.5.9").release_speed("gb200") == pytest.approx(0.1)  # blackwell: b200's
    assert rt.release_table("h100") == ()  # no hopper table: a Blackwell build's speed does not cross families
    assert rt.at_release("0.5.9").release_speed("mi300x", "dense") == 1.0


def _c(label: str, date: str, runtime: str = "sglang", kind: str = "curve") -> Case:
    return Case("x", "tok_s_user", "tok/s/user", 1.0, kind=kind,
                values={"runtime": runtime, "release": label, "release_date": date})


def test_measured_releases_anchor_the_latest_first_run():
    cases = [_c("0.5.9", "2026-03-25"), _c("0.5.9", "2026-03-01"), _c("", "2025-11-02"),
             _c("0.5.12", "2026-05-22"), _c("0.5.12", "2026-05-30", runtime="vllm"), _c("9.9", "2030-01-01", kind="inference")]
    got = measured_releases(cases, "sglang")
    assert got == {("moe", "2025-11"): ("2025-11-02", False), ("moe", "0.5.9"): ("2026-03-01", False),
                   ("moe", "0.5.12"): ("2026-05-22", True)}
    dense = [_c("0.10.2", "2025-10-29"), _c("0.18.0", "2026-03-27")]
    for c in dense:
        c.family = "dense"
    both = measured_releases(cases + dense + [_c("0.18.0", "2026-03-27")], "sglang")
    assert both[("dense", "0.18.0")] == ("2026-03-27", True) and both[("moe", "0.5.12")][1]
    assert both[("moe", "0.18.0")] == ("2026-03-27", False)  # the families anchor apart
    assert measured_releases(cases, "vllm") == {}  # one release: nothing to tell apart, no parameter


def test_an_older_release_is_slower_and_never_beats_the_roofline():
    """A release at speed 0.5 runs its memory-bound kernels at half the memory efficiency: a
    memory-bound MoE decode step is then slower (host costs, kernel latencies and compute do not
    change, so by less than 2x);
    a release faster than the newest (speed 1.5) is capped at efficiency 1 and stays under the
    roofline evaluate reports."""
    base = load_runtime("sglang")
    kw = dict(batch=4, isl=1024, osl=1024, tp=8, precision="fp8")
    table = (Release("0.1", "2025-01-01", 0.5), Release("0.2", "2025-06-01", 1.5), Release("1.0", "2026-01-01", 1.0))
    rts = {lab: base.with_releases("h200", table).at_release(lab) for lab in ("0.1", "0.2", "1.0")}
    r = {lab: evaluate("deepseek-r1", "h200", runtime=rt, **kw) for lab, rt in rts.items()}
    assert r["1.0"]["tpot_s"] == pytest.approx(evaluate("deepseek-r1", "h200", runtime="sglang", **kw)["tpot_s"])
    assert 1.2 < r["0.1"]["tpot_s"] / r["1.0"]["tpot_s"] < 2.0
    assert r["0.2"]["tpot_s"] < r["1.0"]["tpot_s"]
    assert r["0.1"]["runtime_release"] == {"release": "0.1", "family": "moe", "speed": 0.5, "latency": 1.0}
    assert "runtime_release" not in r["1.0"] or r["1.0"]["runtime_release"]["speed"] == 1.0
    from explorer.calibrate import CURVE_FILES
    from explorer.validate import load_cases, validate

    cases = [c for c in load_cases(CURVE_FILES[1]) if c.supported][:60]
    for c in cases:  # every run read as the release that measured 1.5x faster than the newest
        c.values = {**c.values, "release": "0.2", "release_date": ""}
    fast = {name: load_runtime(name) for name in {c.runtime for c in cases}}
    for c in cases:
        fast[c.runtime] = fast[c.runtime].with_releases(c.hardware, table)
    out = validate(cases=cases, runtimes=fast)
    assert out["summary"]["above_roofline"] == []
    assert sum(r["supported"] for r in out["cases"]) > 40


def test_name_at_release_surfaces(tmp_path):
    rt = load_runtime("sglang@0.5.9")
    assert (rt.name, rt.release, rt.release_date) == ("sglang", "0.5.9", "")
    rt = load_runtime("SGLang@2025-11-02")
    assert (rt.release, rt.release_date) == ("", "2025-11-02")
    with pytest.raises(SpecError, match="NAME@RELEASE"):
        load_runtime("sglang@")
    out = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--runtime",
                          "vllm@0.10.2", "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and '"runtime": "vllm"' in out.stdout and '"runtime_release"' in out.stdout
    bad = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--runtime", "vllm@"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--runtime" in bad.stderr


def test_release_table_round_trips_through_the_profile_file(tmp_path):
    src = load_runtime("vllm")
    p = tmp_path / "vllm.yaml"
    p.write_text(open(src.path).read())
    rt = _load_file(p).with_releases("zz9", (Release("0.10.2", "2025-10-29", 0.83, "dense", 1.7),
                                             Release("0.18.0", "2026-03-27", 1.0, "dense")))
    write_runtime_fit(rt, "zz9", "test", path=p)
    back = _load_file(p)
    assert back.releases["zz9"] == rt.releases["zz9"]
    assert back.at_release("0.10.2").release_speed("zz9", "dense") == pytest.approx(0.83)
    assert back.at_release("0.10.2").release_latency("zz9", "dense") == pytest.approx(1.7)
    assert back.at_release("0.18.0").release_latency("zz9", "dense") == 1.0
    text = p.read_text()
    for good, wrong in (("speed: 0.83", "speed: 7"), ("latency: 1.7", "latency: 9")):
        p.write_text(text.replace(good, wrong))
        with pytest.raises(SpecError, match="releases.zz9"):
            _load_file(p)


def test_release_latency_scales_the_fixed_step_costs_by_hand():
    """A release at latency 2 (Release.latency) pays twice the fixed per-step costs -- kernel
    launches, the engine's host step and per-sequence work -- and nothing else: its kernels
    (GEMM, MoE, collectives) cost what the newest's do.  DeepSeek-R1 on 8 x H200 under SGLang, 4
    clients: the overhead component doubles (to 1e-4: the decode batch moves by 0.3 %, and with it
    the per-sequence host term), the kernel components are equal, and TPOT rises by exactly the
    overhead it adds."""
    base = load_runtime("sglang")
    table = (Release("0.1", "2025-01-01", 1.0, "moe", 2.0), Release("1.0", "2026-01-01", 1.0, "moe", 1.0))
    kw = dict(batch=4, isl=1024, osl=1024, tp=8, precision="fp8")
    old, new = (evaluate("deepseek-r1", "h200", runtime=base.with_releases("h200", table).at_release(lab), **kw)
                for lab in ("0.1", "1.0"))
    assert old["runtime_release"]["latency"] == 2.0 and new["runtime_release"]["latency"] == 1.0
    assert old["breakdown"]["overhead"] == pytest.approx(2.0 * new["breakdown"]["overhead"], rel=1e-4)
    for k in ("gemm", "moe", "comm"):
        assert old["breakdown"][k] == new["breakdown"][k]
    added = old["breakdown"]["overhead"] - new["breakdown"]["overhead"]
    assert old["tpot_s"] - new["tpot_s"] == pytest.approx(
        added + old["breakdown"]["prefill"] - new["breakdown"]["prefill"]
        + old["breakdown"]["attention"] - new["breakdown"]["attention"], rel=1e-9)
    # the release table of a kind without its own takes its siblings' medians of both figures
    sib = replace(base, releases={"mi300x": (Release("0.5.9", "2026-02-27", 0.6, "moe", 2.0),),
                                  "mi325x": (Release("0.5.9", "2026-02-27", 0.8, "moe", 3.0),)})
    got = sib.at_release("0.5.9")
    assert got.release_latency("mi355x") == pytest.approx(2.5) and got.release_speed("mi355x") == pytest.approx(0.7)


def test_a_space_lists_releases_side_by_side(tmp_path):
    """``deployment.runtime: [sglang, sglang@0.5.9]`` puts today's build and an older one on one
    front; the older one is read at its fitted speed (MI300X: SGLang 0.5.9's MoE kernels)."""
    import yaml

    from explorer.space import load_space

    spec = yaml.safe_load(open("search_spaces/llama-3.1-70b-deploy.yaml"))
    spec["deployment"]["runtime"] = ["sglang", "sglang@0.5.9"]
    p = tmp_path / "rel.yaml"
    p.write_text(yaml.safe_dump(spec))
    s = load_space(p)
    assert sorted(s.searched["runtime"].choices) == ["sglang", "sglang@0.5.9"]
    spec["deployment"]["runtime"] = "sglang@"
    p.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="deployment.runtime"):
        load_space(p)
    old = load_runtime("sglang@0.5.9")
    assert old.release_speed("mi300x", "moe") < 1.0  # fitted: the 0.5.12 build is faster
    kw = dict(batch=8, isl=1024, osl=1024, tp=8, precision="fp8")
    slow = evaluate("deepseek-r1", "mi300x", runtime="sglang@0.5.9", **kw)["tokens_per_s_per_user"]
    fast = evaluate("deepseek-r1", "mi300x", runtime="sglang", **kw)["tokens_per_s_per_user"]
    assert slow < fast
