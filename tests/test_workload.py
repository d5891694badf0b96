"""Synthetic master/worker-of-pipelines workloads (003): the spec's checks, the plan's processors
and message counts (the source's Cuadros 8-9 exactly), the model and the tuner."""
from __future__ import annotations

import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

from autotune import synthetic
from autotune.cli import command as cli
from autotune.core import workload
from autotune.core.workload import LIMITS, MAX_DEGREE, MAX_LAUNCH, MAX_STAGES, RULES, SpecError, launch_of, plan
from autotune.core.workload_read import load_spec
from autotune.models import pipeline as model_pipeline
from autotune.models.pipeline import makespan, nominal_hop, predict
from autotune.select import pipeline as select_pipeline
from autotune.select.pipeline import MAX_OPTIONS, count_options, options, rules, search_space, tune

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


def test_a_network_message_takes_its_cpu_from_the_stage_beside_it():
    """1 s of CPU per network message at each end, every stage on its own host: the head sends
    (6 s a task), the middle receives and sends (12 s), the tail receives and replies (6 s)."""
    serial = plan(one([{"mean": 5}, {"mean": 10}, {"mean": 4}]))
    host = serial.host_of(serial.processors)
    assert len(set(host)) == 4
    busy = nominal_hop(0.0, 0.0, 0.0, 0.0, cpu_net=1.0)
    assert makespan(serial, 0, np.zeros(1), busy, host, wake=0.0)[0] == pytest.approx(6 + 10 * 12 + 6)
    together = (0, 0, 0, 0)                                 # one host: no network messages
    assert makespan(serial, 0, np.zeros(1), busy, together, wake=0.0)[0] == pytest.approx(5 + 100 + 4)


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


# -- a spec file's faults and the bounds (LIMITS): one line each, for check, tune and run alike ----------

SMALL = {"task_bytes": 10, "initial_messages": 2, "iterations": 1, "reply_bytes": 1, "mean": 1.0, "workers": 1,
         "stages": 1}


def small(**change):
    return {**SMALL, **change}


@pytest.mark.parametrize("raw, words", [
    (b"name: \xff\xfe\ntask_bytes: 1\n", "not UTF-8 text: byte 0xff at offset 6"),
    (b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested deeper than"),
    (b"task_bytes: 10\ntask_bytes: 20\n", "key 'task_bytes' repeated, first on line 1"),
    (b"workers:\n  - stages:\n      - {mean: 1, mean: 2}\n", "key 'mean' repeated"),
    (b"task_bytes: " + b"1" * 5000 + b"\n", "a value cannot be read"),
    (b"name: 2020-13-45\n", "a value cannot be read"),
    (b"- 1\n- 2\n", "a spec is a mapping"),
    (b"a: 1\n" * 20000, "bytes"),
])
def test_a_bad_spec_file_is_one_line(tmp_path, raw, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(raw)
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert len(exc.value.problems) == 1 and "\n" not in exc.value.problems[0], exc.value.problems
    assert words in exc.value.problems[0], exc.value.problems


def test_a_yaml_merge_may_override_without_a_duplicate():
    spec = load_spec("task_bytes: 10\ninitial_messages: 2\niterations: 1\nreply_bytes: 1\n"
                     "workers: [{stages: [{<<: {mean: 1, spread: 0.5}, mean: 2}]}]\n")
    assert spec.workers[0].stages[0].mean == 2.0


WIDE = [{"stages": [{"mean": 1, "type": "REP_64"}] + [{"mean": 1}] * 7}] * 8


@pytest.mark.parametrize("limit, spec", [
    ("workers", small(workers=10 ** 6)), ("workers", small(workers=[{}] * 9)),
    ("stages", small(stages=10 ** 6)), ("stages", small(workers=[{"stages": [{}] * 9}])),
    ("degree", small(workers=[{"stages": [{"type": "REP_10000"}]}])),
    ("degree", small(workers=[{"stages": [{"type": "REP_" + "9" * 18}]}])),
    ("initial_messages", small(initial_messages=10 ** 6)), ("tasks", small(iterations=10 ** 12)),
    ("stage_tasks", small(iterations=25_000, workers=8, stages=8)),
    ("bytes", small(task_bytes=10 ** 9)), ("bytes", small(reply_bytes=10 ** 9)),
    ("seconds", small(mean=1e7)), ("seed", small(seed=-1)), ("launch", small(workers=WIDE))])
@pytest.mark.timeout(120)      # milliseconds each: work growing with the bounded value would never end
def test_each_bound_gives_one_line_naming_it(limit, spec):
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    lines = [p for p in exc.value.problems if p.startswith(f"limit ({LIMITS[limit]})")]
    assert len(lines) == 1 and "\n" not in lines[0], exc.value.problems


def test_a_huge_integer_is_a_problem_not_a_traceback():
    with pytest.raises(SpecError, match="must be a finite number"):
        load_spec(small(mean=10 ** 400))


@pytest.mark.timeout(120)      # milliseconds: counts growing past k-linear would not end in time
def test_specs_at_the_bounds_plan_fast_and_count_replicas_exactly():
    """REP_64 on every stage of 8 x 8 is too many ranks; REP_64 once plans in milliseconds with the
    replicas' shares summing to the tasks (their counts were quadratic in k)."""
    spec = load_spec(small(iterations=7, workers=[{"stages": [{"type": f"REP_{MAX_DEGREE}"}]}]))
    pl = plan(spec)
    replicas = [p for p in pl.processes if p.role == "replica"]
    assert len(replicas) == MAX_DEGREE and sum(p.sends - 1 for p in replicas) == spec.tasks
    assert launch_of(spec.configuration) == (pl.launch, pl.processors, len(pl.processes), pl.level)


def test_check_and_tune_agree_on_huge_iterations():
    """check accepted iterations 1e12 and tune died allocating 466 TiB: both read load_spec's bound."""
    with pytest.raises(SpecError, match="iterations x initial_messages"):
        synthetic.check(small(iterations=10 ** 12))


def test_launch_of_is_the_plans_launch():
    spec = case("case1")
    for types in [t for t, _ in options(spec.workers[0], 6)][::7]:
        s = spec.configured((types, types))
        pl = plan(s)
        assert launch_of(s.configuration) == (pl.launch, pl.processors, len(pl.processes), pl.level), types


def test_tuner_and_rules_keep_within_the_launch_bound(monkeypatch):
    """With room for 12 ranks, 8 processors can replicate nothing (8 x 2 ranks): every choice the
    tuner and the rules make is a spec load_spec accepts."""
    monkeypatch.setattr(workload, "MAX_LAUNCH", 12)
    monkeypatch.setattr(select_pipeline, "MAX_LAUNCH", 12)
    spec = case("case1")
    for choice in tune(spec, GBIT, 8):
        assert launch_of(choice.configuration)[0] <= 12
        assert load_spec(choice.spec.to_dict()) == choice.spec
    assert launch_of(rules(spec, 8).configuration)[0] <= 12


def test_tuner_screens_a_bounded_number_of_options():
    for n in range(1, MAX_STAGES + 1):
        for most in (n, 4 * n, MAX_LAUNCH):
            r, g = search_space(n, most)
            assert count_options(n, most, r, g) <= MAX_OPTIONS, (n, most)
            assert n < 2 or (r >= 2 and g >= 2), (n, most, r, g)     # both replication and grouping kept
    five = workload.Pipeline(case("case1").workers[0].stages[:1] * 5, 10)
    assert count_options(5, 20) == len(options(five, 20))


def test_many_workers_are_combined_by_their_slowest_not_exhaustively():
    """8 workers' fronts of 10 options: 10^8 combinations exhaustively, at most 80 by the slowest."""
    fronts = [[((f"w{w}o{k}",), k + 1, np.full(4, 10.0 - k)) for k in range(10)] for w in range(8)]
    picks = list(select_pipeline._combinations(fronts, 1000))
    assert 0 < len(picks) <= 80
    assert all(len({o[2][0] for o in pick}) == 1 for pick in picks)      # each: every worker at one pace


def test_vectorised_queues_equal_their_recurrences():
    rng = np.random.default_rng(3)
    arrive = np.sort(rng.uniform(0, 5, (4, 40)), axis=1)
    t, gap = rng.uniform(0, 1, (4, 40)), 0.3
    free, served, paced = np.zeros(4), np.empty_like(arrive), arrive.copy()
    for i in range(40):
        free = np.maximum(arrive[:, i], free) + t[:, i]
        served[:, i] = free
        if i:
            paced[:, i] = np.maximum(paced[:, i], paced[:, i - 1] + gap)
    assert np.allclose(model_pipeline._served(arrive, t), served, rtol=1e-12)
    assert np.allclose(model_pipeline._paced(arrive, gap), paced, rtol=1e-12)


@pytest.mark.parametrize("factor", [0, -1, float("nan"), float("inf")])
def test_scaled_takes_a_finite_positive_factor(factor):
    with pytest.raises(ValueError, match="finite number > 0"):
        synthetic.scaled(case("case1"), factor)


def test_scaled_stage_times_keep_the_bound():
    with pytest.raises(SpecError, match="mean \\+ spread"):
        synthetic.scaled(case("case1"), 1e300)
