"""Synthetic master/worker-of-pipelines workloads (003): the spec's checks, the plan's processors
and message counts (the source's Cuadros 8-9 exactly), the model and the tuner."""
from __future__ import annotations

import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

from autotune import cli, synthetic
from autotune.models.pipeline import makespan, nominal_hop, predict
from autotune.select.pipeline import options, rules, tune
from autotune.workload import RULES, SpecError, load_spec, plan

CASES = resources.files("autotune.configs") / "synthetic"
FREE = nominal_hop(0.0, 0.0, 0.0, 0.0)
GBIT = nominal_hop(2e-6, 1e-10, 50e-6, 8e-9)
MBIT100 = nominal_hop(2e-6, 1e-10, 100e-6, 8e-8)


def case(name: str):
    return load_spec(str(CASES / f"{name}.yaml"))


@pytest.mark.parametrize("name, processors, launch, sent, received", [
    ("case1", 7, 7, 316, 316), ("case1-tuned", 8, 16, 525, 520),
    ("case2", 8, 8, 372, 372), ("case2-tuned", 8, 16, 581, 576)])
def test_source_cases_processors_and_message_totals(name, processors, launch, sent, received):
    pl = plan(case(name))
    assert (pl.processors, pl.launch, pl.sends, pl.receives) == (processors, launch, sent, received)


def test_per_process_counts_follow_the_source_tables():
    """Cuadro 8 (tuned): master 12/100, first stages 51/6, managers 103/101, a last stage 50/51."""
    pl = plan(case("case1-tuned"))
    by_role = {}
    for p in pl.processes:
        by_role.setdefault(p.role, []).append((p.sends, p.receives))
    assert by_role["master"] == [(12, 100)]
    assert by_role["manager"] == [(103, 101), (103, 101)]
    assert sorted(by_role["stage"]) == [(50, 51), (51, 6), (51, 6), (51, 51)]
    assert sum(s for s, _ in by_role["replica"]) == 2 * (50 + 2)


def test_processors_are_one_plus_independent_plus_replicas_minus_grouped():
    spec = load_spec({"task_bytes": 10, "initial_messages": 2, "iterations": 1, "reply_bytes": 1, "mean": 1,
                      "workers": [{"stages": [{"type": "AGR_3"}, {}, {}, {"type": "REP_3"}]},
                                  {"stages": [{}, {"type": "REP_2"}]}]})
    pl = plan(spec)
    assert pl.processors == 1 + 1 + 3 + 1 + 2
    assert pl.level == 3 and pl.launch == pl.processors * 3
    cpu = {p.index: p.processor for p in pl.processes}
    grouped = [p for p in pl.processes if p.worker == 0 and p.stage < 3]
    assert len({cpu[p.index] for p in grouped}) == 1
    manager = next(p for p in pl.processes if p.role == "manager" and p.worker == 0)
    assert cpu[manager.index] == cpu[manager.replicas[0]]
    assert len({cpu[r] for r in manager.replicas}) == 3


GOOD = {"task_bytes": 1000, "initial_messages": 10, "iterations": 5, "reply_bytes": 10,
        "workers": [{"stages": [{"mean": 1.0, "spread": 0.1}, {"mean": 2.0, "spread": 0.2}]}]}


def bad(**change):
    spec = {**GOOD, **change}
    return {k: v for k, v in spec.items() if v is not None}


def stages(*items):
    return [{"stages": list(items)}]


@pytest.mark.parametrize("rule, spec", [
    (1, bad(workers=0)), (2, bad(task_bytes=0)), (3, bad(initial_messages=-1)), (4, bad(workers=[{"stages": 0}])),
    (5, bad(reply_bytes=0)), (6, bad(workers=stages({"mean": 0}, {"mean": 1}))),
    (7, bad(workers=stages({"mean": 1, "spread": 2}))), (7, bad(workers=stages({"mean": 1, "spread": -0.5}))),
    (8, bad(workers=stages({"mean": 1, "type": "FAST_2"}))), (9, bad(workers=stages({"mean": 1, "type": "REP_1"}))),
    (9, bad(workers=stages({"mean": 1, "type": "AGR_0"}), )),
    (10, bad(workers=stages({"mean": 1, "type": "AGR_3"}, {"mean": 1}))),
    (10, bad(workers=stages({"mean": 1, "type": "AGR_2"}, {"mean": 1, "type": "REP_2"})))])
def test_each_rule_gives_one_line_naming_it(rule, spec):
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    lines = [p for p in exc.value.problems if p.startswith(f"rule {rule} ")]
    assert len(lines) == 1 and RULES[rule] in lines[0] and "\n" not in lines[0], exc.value.problems


@pytest.mark.parametrize("spec, words", [
    (bad(iterations=0), "iterations"), (bad(task_bytes=1.5), "integer"), (bad(task_bytes=True), "integer"),
    (bad(colour=3), "unknown parameter 'colour'"), (bad(work="spin"), "work must be"),
    (bad(workers="two"), "workers must be"), (bad(task_bytes=None), "task_bytes is missing"),
    (bad(workers=stages({"mean": float("nan")})), "finite")])
def test_type_and_range_checks(spec, words):
    with pytest.raises(SpecError, match=words):
        load_spec(spec)


def test_one_line_per_rule_however_many_stages_break_it():
    with pytest.raises(SpecError) as exc:
        load_spec(bad(workers=[{"stages": [{"mean": -1}] * 5}] * 3))
    assert exc.value.problems == [f"rule 6 ({RULES[6]}): worker 0 stage 0's mean is -1 (and 14 more)"]


@pytest.mark.parametrize("text, lines", [("task_bytes: [", 1), ("- 1\n- 2\n", 1), ("task_bytes: 0\nworkers: 2\n", 5)])
def test_cli_check_exits_2_one_line_per_problem(tmp_path, capsys, text, lines):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert cli.main(["synthetic", "check", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == lines and all(line.startswith(f"autotune synthetic: error: {path}: ") for line in err), err


def test_cli_bad_spec_has_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("task_bytes: 1000\ninitial_messages: 2\niterations: 1\nreply_bytes: 1\n"
                    "workers: [{stages: [{mean: 1, type: AGR_3}, {mean: 1}]}]\n")
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "synthetic", "tune", str(path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "rule 10" in proc.stderr, proc.stderr


def test_cli_check_prints_the_plan(capsys):
    assert cli.main(["synthetic", "check", str(CASES / "case2-tuned.yaml")]) == 0
    out = capsys.readouterr().out
    assert "581 sent, 576 received, 5 ends drained" in out and "launch 16 ranks" in out


def test_configured_and_scaled_round_trip():
    spec = case("case1")
    tuned = spec.configured(case("case1-tuned").configuration)
    assert tuned.configuration == case("case1-tuned").configuration
    assert load_spec(tuned.to_dict()) == tuned
    half = synthetic.scaled(spec, 0.5)
    assert half.workers[0].stages[2].mean == 5.0 and half.workers[0].stages[2].spread == 0.75
    with pytest.raises(SpecError, match="rule 10"):
        spec.configured((("AGR_3", "REP_2", "IND"), ("IND", "IND", "IND")))


# -- model -----------------------------------------------------------------------------------------

def one(stages_, cm=10, task=1000, work="wait"):
    return load_spec({"task_bytes": task, "initial_messages": cm, "iterations": 1, "reply_bytes": 10, "work": work,
                      "workers": [{"stages": stages_}]})


def test_makespan_by_hand_without_message_costs():
    """5 s, 10 s on two replicas, 4 s; 10 tasks: the replicas keep pace with the first stage, so
    the last task leaves stage 0 at 50, stage 1 at 60 and the pipeline at 64."""
    pl = plan(one([{"mean": 5}, {"mean": 10, "type": "REP_2"}, {"mean": 4}]))
    assert makespan(pl, 0, np.zeros(3), FREE, pl.host_of(pl.processors), wake=0.0) == pytest.approx([64.0] * 3)
    serial = plan(one([{"mean": 5}, {"mean": 10}, {"mean": 4}]))
    assert makespan(serial, 0, np.zeros(1), FREE, serial.host_of(serial.processors), wake=0.0)[0] == \
        pytest.approx(5 + 100 + 4)


def test_compute_stages_sharing_a_processor_add_their_times():
    grouped = plan(one([{"mean": 1, "type": "AGR_2"}, {"mean": 2}], cm=4, work="compute"))
    waits = plan(one([{"mean": 1, "type": "AGR_2"}, {"mean": 2}], cm=4))
    host = grouped.host_of(grouped.processors)
    assert makespan(grouped, 0, np.zeros(1), FREE, host, wake=0.0)[0] == pytest.approx(4 * 3)
    assert makespan(waits, 0, np.zeros(1), FREE, host, wake=0.0)[0] == pytest.approx(1 + 4 * 2)


def test_model_reproduces_the_source_original_times():
    """Stage means read off the tables predict the source's measured totals (548.37 s, 545.44 s)."""
    assert predict(plan(case("case1")), GBIT).seconds == pytest.approx(548.37, rel=0.03)
    assert predict(plan(case("case2")), GBIT).seconds == pytest.approx(545.44, rel=0.03)
    ratio = predict(plan(case("case1-tuned")), GBIT).seconds / predict(plan(case("case1")), GBIT).seconds
    assert ratio == pytest.approx(0.584, abs=0.07)


HEAVY = [{"mean": 0.02}, {"mean": 0.02}, {"mean": 0.02}]


def test_links_between_hosts_cost_more_than_within():
    """256 KB tasks at 100 Mbit/s: the same stages on one host (a group) beat them on three by at
    least the two network hops between them (pipelined, later tasks hide more of them)."""
    apart = plan(one(HEAVY, cm=6, task=1 << 18))
    together = plan(one([{**HEAVY[0], "type": "AGR_3"}, *HEAVY[1:]], cm=6, task=1 << 18))
    gap = predict(apart, MBIT100).seconds - predict(together, MBIT100).seconds
    hop_net = 100e-6 + 8e-8 * (1 << 18)
    assert gap > 2 * hop_net * 0.9
    assert predict(apart, FREE).seconds == pytest.approx(predict(together, FREE).seconds, rel=1e-9)


def test_tuner_keeps_a_heavy_pair_on_one_host_first():
    """A pair exchanging 256 KB tasks at 100 Mbit/s: the model's first choice groups them."""
    spec = one([{"mean": 0.01}, {"mean": 0.01}, {"mean": 0.08}], cm=8, task=1 << 18)
    best = tune(spec, MBIT100, processors=4)[0]
    assert best.configuration[0][0] == "AGR_2", best.configuration
    gbit = tune(spec, FREE, processors=4)[0]
    assert predict(plan(best.spec), MBIT100).seconds <= predict(plan(gbit.spec), MBIT100).seconds


def test_rules_reproduce_the_source_tuned_cases():
    assert rules(case("case1"), 8).configuration == case("case1-tuned").configuration
    assert rules(case("case2"), 8).configuration == case("case2-tuned").configuration


def test_tuner_is_never_worse_than_rules_by_its_model():
    for name in ("case1", "case2"):
        spec = case(name)
        best = tune(spec, GBIT, 8)[0]
        assert best.processors <= 8
        assert best.prediction.seconds <= predict(plan(rules(spec, 8)), GBIT).seconds * 1.001


def test_options_respect_the_budget():
    w = case("case1").workers[0]
    got = options(w, 3)
    assert all(cost <= 3 for _, cost in got)
    assert (("IND", "IND", "IND"), 3) in got and (("AGR_3", "IND", "IND"), 1) in got
    assert (("AGR_2", "IND", "REP_2"), 3) in got
    with pytest.raises(ValueError, match="processors"):
        tune(case("case2"), GBIT, 3)
