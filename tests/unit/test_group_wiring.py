"""The group canary's way into the live checker: observation rows of a micro-batch (malformed ones
counted), the canary reader's position from Spark's offset log, the checker's saved document, and
the checkpoint's sources held against the config."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from invariants.checker import Checker
from invariants.ledger_format import Checkpoint, LedgerEntry, Start, TopicSettings, WriterRef, WriterSettings
from invariants.promises import latest_topic_settings, topic_ids_of
from invariants.model import RC, Read, Settings
from monitor.config import parse
from monitor.group import observations
from monitor.watch.batch import apply_batch
from monitor.watch.executor import decode_table
from monitor.watch.main import _same_sources_as_the_checkpoint
from monitor.watch.offset_log import batch_ends
from monitor.watch.state import StateError
from tests.unit.test_eos_wiring import offset_log, read_again


def rows(obs: list[bytes], first: int = 0) -> pa.Table:
    n = len(obs)
    return decode_table(pa.table({
        "src": pa.array([4] * n, pa.int8()), "topic": ["obs"] * n, "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(first, first + n), pa.int64()), "value": pa.array(obs, pa.binary()),
        "ts_us": pa.array([0] * n, pa.int64())}))


def history() -> list[bytes]:
    e = observations.encode
    return [e("a", "assigned", p=[0]), e("a", "consumed", r={"0": [[0, 4]]}), b"junk",
            e("a", "intent", o={"0": 6}), e("a", "ack", r="ok"),  # passes 4 and 5: nobody consumed them
            e("a", "lost", p=[0]), e("b", "assigned", p=[0]), e("b", "consumed", r={"0": [[5, 3]]})]  # 5 < 6: rewind


def test_observation_rows_reach_the_checker_and_a_skip_waits_for_the_reader_and_a_reread_then_survives_a_restart():
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.group_source = "canary"
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(5)])
    found, stats = apply_batch(ck, rows(history()[:5]), lambda _n: "tid", group_reader_at={0: 5})
    assert stats.malformed["group_observation"] == 1
    # offset 5 not read yet: the commit of 6 judged up to it only; the skip at 4 rests on what the
    # reader handed over, and counts once read_committed read offset 4 again
    assert found == []
    assert [(w.topic_id, w.partition, w.lo, w.hi) for w in ck.refetch_wanted()] == [("tid", 0, 4, 5)]
    ck = Checker.from_doc(json.loads(json.dumps(ck.to_doc())), Settings())  # a restart: it still waits
    ck.group_source = "canary"
    assert [(v.invariant.value, v.offsets) for v in read_again(ck)] == [("group_skip", (4,))]
    assert read_again(ck) == [] and ck.refetch_wanted() == []  # counted once
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(5, 9)])
    found, _ = apply_batch(ck, rows(history(), 0), lambda _n: "tid", group_reader_at={0: 9})  # 0..4 read again
    assert [(v.invariant.value, v.partition, v.offsets) for v in found] == [("group_rewind", 0, (5,))]
    found = read_again(ck)
    assert [(v.invariant.value, v.partition, v.offsets) for v in found] == [("group_skip", 0, (5,))]
    assert all(v.topic_id == "tid" for v in found)
    assert ck.groups.redeliveries == 0


def test_a_skip_on_a_record_the_reread_no_longer_finds_is_dropped():
    """The reference reader handed over an old log's record (a prefetched tail) at an offset the new
    log holds a transaction marker at: read again, nothing is there, and nothing is counted — as the
    audit, which reads the final log, finds no record there to judge."""
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.group_source = "canary"
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(5)])
    found, _ = apply_batch(ck, rows(history()[:5]), lambda _n: "tid", group_reader_at={0: 5})
    assert found == [] and ck.refetch_wanted()
    assert [v for v in read_again(ck, held=False) if v.invariant.value == "group_skip"] == []
    assert ck.refetch_wanted() == [] and ck.view(RC, "tid", 0).held(4) is None


def test_a_skip_the_view_is_about_to_forget_before_a_reread_is_judged_on_what_it_holds():
    ck = Checker(Settings(horizon_offsets=10))
    ck.note_topic("canary", "tid")
    ck.group_source = "canary"
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(5)])
    found, _ = apply_batch(ck, rows(history()[:5]), lambda _n: "tid", group_reader_at={0: 5})
    assert found == []
    # 5 read (the commit of 6 now passes it too), and the horizon passes both before any re-read
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(5, 30)])
    assert sorted((v.invariant.value, v.offsets) for v in ck.settle()) == [("group_skip", (4,)), ("group_skip", (5,))]
    assert ck.refetch_wanted() == []


@pytest.mark.parametrize("settings, durability, reason", [
    (TopicSettings(3, 2, False), "guaranteed", ""),
    (TopicSettings(3, 1, True), "at_risk", "unclean leader election enabled"),
    (None, "unknown", "topic settings not observed"),
])
def test_a_group_finding_is_classed_as_a_record_read_on_the_canary_topics_latest_settings(settings, durability,
                                                                                            reason):
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.group_source = "canary"
    if settings is not None:
        ck.topic_settings["tid"] = settings
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(9)])
    found, _ = apply_batch(ck, rows(history()), lambda _n: "tid", group_reader_at={0: 9})
    found += read_again(ck)
    assert sorted(v.invariant.value for v in found) == ["group_rewind", "group_skip", "group_skip"]
    assert {(v.durability.value, v.reason) for v in found} == {(durability, reason)}
    # the audit's settings: the last a writer observed for that topic, in ledger order
    entries = [LedgerEntry(WriterRef("i", 1, 1), n, 0, body) for n, body in enumerate([
        Start("canary", "tid", 3, topic_settings=TopicSettings(3, 2, False)),
        Start("other", "t2", 3, topic_settings=TopicSettings(1, 1, True)),
        Checkpoint("canary", "tid", 3, WriterSettings(), settings)])]
    assert latest_topic_settings(entries, "tid") == (settings or TopicSettings(3, 2, False))
    assert latest_topic_settings(entries, "none") is None


def test_no_group_watched_takes_nothing():
    ck = Checker()
    ck.note_topic("canary", "tid")
    found, _ = apply_batch(ck, rows(history()), lambda _n: "tid", group_reader_at={0: 9})
    assert found == [] and ck.groups.next_at == 0


def test_the_canary_readers_position_is_the_lowest_of_its_sources_in_sparks_offset_log(tmp_path):
    cfg = parse({"state_dir": str(tmp_path), "canary": {"name": "canary"}}, "t.yaml")
    offset_log(cfg, 3, [{"canary": {"0": 9, "1": 4}}, {"canary": {"0": 7, "1": 6}}, {"ledger": {"0": 3}}])
    assert batch_ends(cfg.spark_checkpoint_dir(), 3, "canary") == {0: 7, 1: 4}
    assert batch_ends(cfg.spark_checkpoint_dir(), 4, "canary") == {}


def test_switching_groups_under_an_existing_checkpoint_is_refused_with_the_way_out(tmp_path):
    def cfg(groups: bool, eos: bool = False):
        return parse({"state_dir": str(tmp_path), "groups": {"enabled": groups}, "eos": {"enabled": eos}}, "t.yaml")

    offset_log(cfg(True), 0, [{"vigil-canary": {"0": 1}}, {"vigil-canary": {"0": 1}}, {"vigil-ledger": {"0": 1}},
                              {"vigil-canary-group-obs": {"0": 1}}])
    _same_sources_as_the_checkpoint(cfg(True))
    # as many sources, another topic: the EOS output where the group's observations were read
    with pytest.raises(StateError, match=r"reads 4 sources \(vigil-canary-group-obs after .*this config 4 \(vigil-canary-eos-out\)"):
        _same_sources_as_the_checkpoint(cfg(False, eos=True))
    with pytest.raises(StateError, match="groups.enabled is false.*vigil state rebuild"):
        _same_sources_as_the_checkpoint(cfg(False))
    with pytest.raises(StateError, match="reads 4 sources.*this config 5"):
        _same_sources_as_the_checkpoint(cfg(True, eos=True))
    offset_log(cfg(True), 1, [{"vigil-canary": {"0": 1}}, {}, {"vigil-ledger": {"0": 1}}, {}])  # (no offsets)
    _same_sources_as_the_checkpoint(cfg(True))


@pytest.mark.parametrize("renamed", ["canary", "ledger"])
def test_renaming_the_canary_or_the_ledger_under_an_existing_checkpoint_is_refused(tmp_path, renamed):
    """A batch Spark planned and did not commit is read again from the topic its offsets name; the
    driver names rows after the config's topics: a rename in between would mislabel that batch."""
    def cfg(canary: str = "vigil-canary", ledger: str = "vigil-ledger"):
        return parse({"state_dir": str(tmp_path), "canary": {"name": canary}, "ledger": {"topic": ledger},
                      "groups": {"enabled": False}, "eos": {"enabled": False}}, "t.yaml")

    offset_log(cfg(), 4, [{"vigil-canary": {"0": 7}}, {"vigil-canary": {"0": 9}}, {"vigil-ledger": {"0": 3}}])
    _same_sources_as_the_checkpoint(cfg())
    other = cfg(canary="renamed") if renamed == "canary" else cfg(ledger="renamed-ledger")
    key = "canary.name" if renamed == "canary" else "ledger.topic"
    with pytest.raises(StateError, match=rf"reads topic vigil-\S+ where this config's {key} is renamed.*"
                                         "vigil state rebuild"):
        _same_sources_as_the_checkpoint(other)


def test_the_broker_serving_a_partition_is_the_one_whose_fetch_list_holds_it():
    from monitor.group.member import fetch_sources

    stats = {"brokers": {"a:1/1": {"nodeid": 1, "toppars": {"t-0": {"topic": "t", "partition": 0},
                                                            "u-0": {"topic": "u", "partition": 0}}},
                         "a:2/2": {"nodeid": 2, "toppars": {"t-1": {"topic": "t", "partition": 1}}},
                         "a:3/3": {"nodeid": 3, "toppars": {}}},
             "topics": {"t": {"partitions": {"0": {"leader": 3, "consumer_lag": 7}, "1": {"leader": 2, "consumer_lag": 0},
                                             "-1": {"leader": -1}}}}}
    assert fetch_sources(stats, "t") == {0: [1, 3, 7], 1: [2, 2, 0]}  # 0: a follower (node 1) serves it
    assert fetch_sources({}, "t") == {}


def test_vigil_drill_asks_the_application_canaries_through_their_control_files(tmp_path):
    from typer.testing import CliRunner

    from monitor.cli import app

    path = tmp_path / "v.yaml"
    path.write_text(f"state_dir: {tmp_path / 'state'}\n")
    for kind, control in (("group_skip", "group/control.m0.group_skip"), ("group_rewind", "group/control.m0.group_rewind"),
                          ("eos_loss", "eos/control.eos_loss"), ("eos_duplicate", "eos/control.eos_duplicate")):
        result = CliRunner().invoke(app, ["drill", kind, "--json", "--config", str(path)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / "state" / control).exists(), kind


def test_observations_of_another_canary_topic_are_counted_foreign_and_never_judged():
    """One observation topic given to two instances (or left over from an earlier canary topic):
    the other's members' observations take their offsets and nothing else. Without the topic's
    name (an older member's), an observation is taken."""
    e = observations.encode
    other = [e("x", "assigned", "elsewhere", p=[0]), e("x", "intent", "elsewhere", o={"0": 9}),
             e("x", "ack", "elsewhere", r="ok")]  # would pass 0..8, which nobody here consumed
    ck = Checker()
    ck.note_topic("canary", "tid")
    ck.group_source = "canary"
    ck.apply_reads(RC, "tid", 0, [Read(o, ("x", o, 1)) for o in range(9)])
    mine = [e("a", "assigned", "canary", p=[0]), e("a", "consumed", "canary", r={"0": [[0, 9]]}),
            e("a", "intent", "canary", o={"0": 9}), e("a", "ack", "canary", r="ok")]
    found, stats = apply_batch(ck, rows(other + mine), lambda _n: "tid", group_reader_at={0: 9})
    assert found == [] and stats.malformed["foreign_group_observation"] == 3
    assert ck.groups.observations_lost == 0 and ck.groups.judged_records == 9  # its offsets were taken
    log = observations.in_order(enumerate(other + [e("old", "assigned", p=[0])]), "canary")
    assert (log.foreign, log.malformed, [o.get("m") for _at, o in log.seen]) == (3, 0, [None, None, None, "old"])
    assert observations.in_order(enumerate(other), None).foreign == 0


def test_the_application_canaries_names_default_to_the_canary_topics_so_instances_never_share_them():
    a = parse({"canary": {"name": "vigil-canary"}}, "t.yaml")
    assert (a.groups.group, a.groups.observation_topic, a.eos.group, a.eos.output_topic) == (
        "vigil-canary-group", "vigil-canary-group-obs", "vigil-canary-eos", "vigil-canary-eos-out")
    b = parse({"canary": {"name": "team-b"}, "groups": {"group": "mine"}}, "t.yaml")
    assert (b.groups.group, b.groups.observation_topic, b.eos.output_topic) == ("mine", "team-b-group-obs",
                                                                                "team-b-eos-out")


def test_a_recreated_canary_topic_starts_the_group_judge_again_blind_live_and_in_the_audit():
    """The checker's side of GroupJudge.recreated: a new ID under the canary's name while the group
    is watched; the audit's: the ledger knows more than one ID for the canary's name."""
    e = observations.encode
    ck = Checker()
    ck.note_topic("canary", "old")
    ck.group_source = "canary"
    ck.apply_reads(RC, "old", 0, [Read(o, ("x", o, 1)) for o in range(5)])
    apply_batch(ck, rows([e("a", "assigned", "canary", p=[0]), e("a", "consumed", "canary", r={"0": [[0, 5]]})]),
                lambda _n: "old", group_reader_at={0: 5})
    ck.note_topic("canary", "new")  # deleted and created again under the running members
    ck.apply_reads(RC, "new", 0, [Read(o, ("y", o, 1)) for o in range(3)])
    late = [e("a", "intent", "canary", o={"0": 1287}), e("a", "ack", "canary", r="ok")]  # the old log's position
    found, _ = apply_batch(ck, rows(late, 2), lambda _n: "new", group_reader_at={0: 3})
    assert found == [] and ck.groups.recreations == 1 and ck.group_topic_id == "new"
    entries = [LedgerEntry(WriterRef("i", 1, 1), 0, 0, Start("canary", "old", 3)),
               LedgerEntry(WriterRef("i", 1, 2), 0, 0, Start("canary", "new", 3, replaces="old")),
               LedgerEntry(WriterRef("j", 1, 1), 0, 0, Start("other", "x", 3))]
    assert topic_ids_of(entries, "canary") == {"old", "new"} and topic_ids_of(entries, "other") == {"x"}
    # a checker started on the new ID (a rebuild) that the ledger told of the old one: blind from the start
    ck = Checker()
    ck.fold.watch_topic_id("old")
    ck.note_topic("canary", "new")
    ck.group_source = "canary"
    ck.apply_reads(RC, "new", 0, [Read(o, ("y", o, 1)) for o in range(3)])
    found, _ = apply_batch(ck, rows([e("a", "assigned", "canary", p=[0])] + late, 0), lambda _n: "new",
                           group_reader_at={0: 3})
    assert found == [] and ck.groups.recreations == 1


def test_a_derived_topic_name_kafka_would_refuse_is_a_config_error_naming_the_key():
    from invariants.errors import VigilError

    with pytest.raises(VigilError, match="groups.observation_topic is 250 characters long, Kafka allows 249"):
        parse({"canary": {"name": "c" * 240}}, "t.yaml")


def test_a_member_that_cannot_list_a_partitions_range_still_says_its_committed_offset():
    """The partition's only replica on a node that is down: its range cannot be listed, its
    committed offset can (the coordinator is elsewhere). The member says both, so the judge knows
    the fetch may reset (``uk``) instead of taking a floor from the old log's commits."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from monitor.group.member import Member

    class Consumer:
        def committed(self, tps, timeout):
            return [TopicPartition(tp.topic, tp.partition, {0: 1300, 1: 40, 2: -1001}[tp.partition]) for tp in tps]

        def get_watermark_offsets(self, tp, timeout, cached):
            if tp.partition == 0:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
            return 50, 90

    parts = [TopicPartition("t", p) for p in (0, 1, 2)]
    starts = Member._starts(SimpleNamespace(topic="t"), Consumer(), parts)
    assert starts == {"c": {"0": 1300, "1": 40, "2": -1}, "oor": [1], "uk": [0]}
