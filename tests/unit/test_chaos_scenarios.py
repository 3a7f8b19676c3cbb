"""Chaos scenarios as data: the shipped ones load, a bad one is refused with the key and the reason."""

import pytest
import yaml

from monitor.chaos import scenario
from monitor.chaos.scenario import ScenarioError, parse

MINIMAL = {
    "name": "mine", "title": "a scenario of my own",
    "writers": [{"name": "w", "acks": "1", "idempotence": False}],
    "timeline": [{"at_s": 0, "fault": "kill", "target": "leader", "as": "victim"},
                 {"at_s": 10, "fault": "start", "target": "victim"}],
}


def test_the_chaos_matrix_and_the_extras_ship():
    shipped = scenario.builtin()
    assert [f"S{i}" for i in range(1, 11)] == list(shipped)[:10]
    assert {"txn-coordinator-killed", "full-disk", "cluster-killed", "all-paused"} <= set(shipped)
    assert shipped["S4"].fault_s == 30 and shipped["S4"].timeline[0].bind == "victim"
    assert shipped["S6"].elr == "off" and shipped["S6"].topic.unclean_leader_election is True


def test_a_scenario_of_ones_own_loads_from_a_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    (s,) = scenario.select([], [path])
    assert s.name == "mine" and s.fault_s == 10 and s.expect.promise_kept is None
    assert [x.name for x in scenario.select(["S3", "mine"], [path])] == ["S3", "mine"]


def test_an_unknown_scenario_name_lists_the_known_ones():
    with pytest.raises(ScenarioError, match=r"unknown scenario S99 \(have S1, S2"):
        scenario.select(["S99"])


@pytest.mark.parametrize("change, where, why", [
    ({"colour": "red"}, "colour", "unknown key"),
    ({"timeline": [{"at_s": 0, "fault": "melt", "target": "leader"}]}, "timeline.0.fault", "Input should be"),
    ({"timeline": [{"at_s": 0, "fault": "start", "target": "victim"}]}, "(top level)",
     "timeline[0]: target 'victim' is neither built in nor bound by an earlier step"),
    ({"timeline": [{"at_s": 5, "fault": "kill", "target": "leader"}, {"at_s": 1, "fault": "heal"}]},
     "(top level)", "timeline[1]: at_s 1 is before the step above it (5)"),
    ({"timeline": [{"at_s": 0, "fault": "kill", "target": "leader", "duration_s": 5}]}, "timeline.0",
     "kill cannot be undone after duration_s"),
    ({"timeline": [{"at_s": 0, "fault": "pause"}]}, "timeline.0", "pause needs a target"),
    ({"timeline": [{"at_s": 0, "fault": "cut_link", "args": {"src": 1}}]}, "timeline.0", "needs args src and dst"),
    ({"timeline": [{"at_s": 0, "fault": "kill", "target": "coordinator"}]}, "(top level)",
     "target coordinator needs a transactional writer"),
    ({"expect": {"zero": ["lost_writes"]}}, "expect", "unknown invariant 'lost_writes'"),
    ({"topic": {"replication_factor": 0}}, "topic.replication_factor", "greater than or equal to 1"),
    ({"writers": []}, "writers", "at least 1"),
])
def test_a_bad_scenario_names_the_key_and_the_reason(change, where, why):
    with pytest.raises(ScenarioError) as err:
        parse({**MINIMAL, **change}, "mine.yaml")
    text = str(err.value)
    assert text.startswith("invalid scenario in mine.yaml:")
    assert f"  {where}: " in text and why in text, text


def test_a_run_gives_the_application_canaries_groups_and_topics_of_its_own(tmp_path):
    from monitor.chaos.runner import run_config
    from monitor.config import parse as parse_config

    base = parse_config({"groups": {"enabled": True, "members": 2}, "eos": {"enabled": False}}, "base.yaml")
    s = scenario.builtin()["S3"]
    cfg = run_config(base, s, tmp_path, "20261124", 9471)
    assert cfg.groups.enabled and cfg.groups.members == 2 and not cfg.eos.enabled
    assert cfg.groups.group == "vigil-chaos-s3-20261124-group"
    assert cfg.groups.observation_topic == "vigil-chaos-s3-20261124-group-obs"
    assert (cfg.eos.group, cfg.eos.output_topic) == ("vigil-chaos-s3-20261124-eos", "vigil-chaos-s3-20261124-eos-out")
    assert cfg.canary.name == "vigil-chaos-s3-20261124" and cfg.ledger.topic == "vigil-chaos-s3-20261124-ledger"


def test_warmup_and_recovery_given_on_the_command_line_replace_each_scenarios_own(tmp_path):
    from monitor.cli.chaos_cmd import _phases

    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**MINIMAL, "warmup_s": 40, "recovery_s": 50}))
    chosen = scenario.select(["S3"], [path])
    assert [(s.warmup_s, s.recovery_s) for s in chosen] == [(20, 30), (40, 50)]
    assert [(s.warmup_s, s.recovery_s) for s in _phases(chosen, 10, None)] == [(10, 30), (10, 50)]
    assert [(s.warmup_s, s.recovery_s) for s in _phases(chosen, None, 5)] == [(20, 5), (40, 5)]
    assert _phases(chosen, None, None) == chosen
