"""group_skip / group_rewind / redeliveries / rebalance_stall: the judge against what a simulated
group really did, fed in any split of the reference reader's reads and judged at any moments."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.doc_runs import offset_runs
from invariants.groups import GroupJudge


class Sim:
    """A consumer group over a log with gaps (control records), as the broker and members really
    behave, written down as the members' observation log; what really happened is kept beside it.

    ``concurrent``: commits are sent, applied and acknowledged at separate moments with other
    members' steps in between, fetches happen some time after ``assigned``, and revoked members
    commit late (the judge's floor is then conservative: it may miss a rewind, never invent one). Faults injected: a member that
    drops records it consumed (group_skip), a fetch that returns less than the committed offset or
    a member that seeks back below its own acknowledged commit (group_rewind), a revoked member
    committing late (allowed)."""

    def __init__(self, seed: int, partitions: int = 2, members: int = 3, concurrent: bool = False) -> None:
        self.rng = rng = random.Random(seed)
        self.concurrent = concurrent
        self.log: dict[int, list[int]] = {}
        for p in range(partitions):
            offsets, o = [], rng.randint(0, 3)
            for _ in range(rng.randint(5, 40)):
                offsets.append(o)
                o += rng.choice([1, 1, 1, 2, 3])
            self.log[p] = offsets
        self.obs: list[dict] = []
        self.t = 0
        self.committed: dict[int, int] = {}  # the broker's
        self.owner: dict[int, str] = {}
        self.spans: dict[tuple[str, int], dict] = {}  # fetched: position, own acked, floor (truth)
        self.pending: dict[str, dict] = {}  # member -> commit {values, applied, state}
        self.old: dict[tuple[str, int], int] = {}  # positions of revoked spans (late commits)
        self.consumed: dict[int, set[int]] = {p: set() for p in self.log}
        self.top: dict[int, int] = {}
        self.members = [f"m{i}" for i in range(members)]
        self.true_skips: set[tuple[int, int]] = set()
        self.true_rewinds = 0  # records delivered below the floor
        self.true_commit_rewinds = 0  # acknowledged commits below one acknowledged before in the same span
        self.true_redeliveries = 0
        self.judged_to: dict[int, int] = {}

    def note(self, member: str, kind: str, **fields) -> None:
        self.t += self.rng.choice([10, 100, 500])
        self.obs.append({"v": 1, "m": member, "k": kind, "t": self.t, **fields})

    def step(self) -> None:
        rng = self.rng
        m = rng.choice(self.members)
        owned = [p for p, o in self.owner.items() if o == m]
        choice = rng.random()
        if choice < 0.12:
            free = [p for p in self.log if p not in self.owner]
            if free:
                p = rng.choice(free)
                self.owner[p] = m
                self.note(m, "assigned", p=[p])
                self.spans[(m, p)] = {"fetched": False}
                if not self.concurrent:
                    self.fetch(m, p)
        elif choice < 0.55 and owned:
            p = rng.choice(owned)
            if not self.spans[(m, p)]["fetched"]:
                self.fetch(m, p)
            self.consume(m, p)
        elif choice < 0.75 and m not in self.pending:
            # what it consumed (a member commits nothing of a partition it has not consumed from yet)
            values = {p: s["position"] for (mm, p), s in self.spans.items() if mm == m and s.get("consumed")}
            if values:
                self.commit(m, values)
        elif choice < 0.8 and m in self.pending:
            self.finish(m)
        elif choice < 0.88 and owned and m not in self.pending:
            p = rng.choice(owned)
            span = self.spans.pop((m, p))
            del self.owner[p]
            if span.get("consumed"):
                self.old[(m, p)] = span["position"]
            self.note(m, "revoked", p=[p])
        elif choice < 0.91:  # killed and started again
            for p in owned:
                del self.owner[p]
                self.spans.pop((m, p))
            self.pending.pop(m, None)
            self.note(m, "started")
        elif choice < 0.94 and self.concurrent and m not in self.pending:  # a revoked member commits late
            late = {p: o for (mm, p), o in self.old.items() if mm == m and self.owner.get(p) != m}
            if late:
                self.commit(m, late)
        elif choice < 0.97 and owned:  # seeks back below its own acknowledged commit
            p = rng.choice(owned)
            span = self.spans[(m, p)]
            if span.get("consumed") and span["own"] > 0:
                span["position"] = max(0, span["own"] - rng.randint(1, 4))
                self.note(m, "seek", p=p)  # (as the member does before its rewind drill's seek)

    def fetch(self, m: str, p: int) -> None:
        span = self.spans[(m, p)]
        start = self.committed.get(p, self.log[p][0])
        span.update(fetched=True, floor=self.committed.get(p, -1), own=-1, position=start)
        if self.rng.random() < 0.08 and start > 2:  # a broker returning less than the committed offset
            span["position"] = start - self.rng.randint(1, 3)

    def consume(self, m: str, p: int) -> None:
        span = self.spans[(m, p)]
        took = [o for o in self.log[p] if o >= span["position"]][:self.rng.randint(1, 4)]
        if not took:
            return
        span["position"] = took[-1] + 1
        span["consumed"] = True
        if len(took) > 1 and self.rng.random() < 0.1:
            took = took[:-1]  # consumed and dropped (not reported): what a group_skip drill does
        floor = max(span["floor"], span["own"])
        for o in took:
            if o < floor:
                self.true_rewinds += 1
            elif o <= self.top.get(p, -1):
                self.true_redeliveries += 1
            self.top[p] = max(self.top.get(p, -1), o)
            self.consumed[p].add(o)
        self.note(m, "consumed", r={str(p): offset_runs(took)})

    def commit(self, m: str, values: dict[int, int]) -> None:
        self.note(m, "intent", o={str(p): v for p, v in values.items()})
        self.pending[m] = {"values": values, "applied": False,
                           "spans": {p: self.spans.get((m, p)) for p in values}}  # the assignments it was sent in
        if not self.concurrent:
            self.apply(m)
            self.finish(m)

    def apply(self, m: str) -> None:
        c = self.pending[m]
        c["applied"] = True
        self.committed.update(c["values"])

    def finish(self, m: str) -> None:
        c = self.pending.pop(m)
        if not c["applied"]:
            if self.rng.random() < 0.3:
                self.note(m, "ack", r="refused")
                return
            if self.rng.random() < 0.3:  # a timeout: applied or not, nobody knows
                if self.rng.random() < 0.5:
                    self.committed.update(c["values"])
                self.note(m, "ack", r="unknown")
                return
            self.committed.update(c["values"])
        self.note(m, "ack", r="ok")
        for p, v in c["values"].items():
            span = self.spans.get((m, p))
            if span is not None and span is c["spans"][p]:
                self.true_commit_rewinds += v < span["own"]
                span["own"] = max(span["own"], v)
            below = self.judged_to.get(p, 0)
            for o in self.log[p]:
                if below <= o < v and o not in self.consumed[p]:
                    self.true_skips.add((p, o))
            self.judged_to[p] = max(below, v)

    def run(self, steps: int) -> "Sim":
        for _ in range(steps):
            if self.concurrent and self.pending and self.rng.random() < 0.2:
                m = self.rng.choice(list(self.pending))
                if not self.pending[m]["applied"] and self.rng.random() < 0.7:
                    self.apply(m)
                continue
            self.step()
        return self


def judged(sim: Sim, seed: int, *, split: bool) -> tuple[GroupJudge, list]:
    """The judge fed the sim's observations and the log as a reader read it; with ``split``, the
    reads arrive in random pieces between observations, ``judge`` is called at random moments,
    and now and then the judge is saved and restored (a restart), and a piece of the observation
    log already taken is fed again (a batch read again)."""
    rng = random.Random(seed)
    judge = GroupJudge(stall_ms=10**9)
    found = []
    cursor = {p: 0 for p in sim.log}
    for at, obs in enumerate(sim.obs):
        if split and at and rng.random() < 0.05:
            for again in range(max(0, at - 3), at):
                judge.observe(again, sim.obs[again])
        judge.observe(at, obs)
        if split and rng.random() < 0.05:
            judge = GroupJudge.from_doc(json.loads(json.dumps(judge.to_doc())))
        if split and rng.random() < 0.3:
            p = rng.choice(list(sim.log))
            n = rng.randint(0, 5)
            judge.read_reference(p, sim.log[p][cursor[p]:cursor[p] + n])
            cursor[p] += n
        if split and rng.random() < 0.3:
            found += judge.judge()
    for p, offsets in sim.log.items():
        judge.read_reference(p, offsets[cursor[p]:], reader_at=offsets[-1] + 3)
    found += judge.judge()
    return judge, found


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9))
def test_in_sequential_histories_the_judge_finds_exactly_what_happened(seed):
    sim = Sim(seed).run(150)
    judge, found = judged(sim, seed, split=True)
    assert {(f.partition, f.offset) for f in found if f.invariant == "group_skip"} == sim.true_skips
    rewinds = [sim.obs[f.at]["k"] for f in found if f.invariant == "group_rewind"]
    assert rewinds.count("consumed") == sim.true_rewinds
    assert rewinds.count("ack") == sim.true_commit_rewinds
    assert judge.redeliveries == sim.true_redeliveries


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9))
def test_with_commits_in_flight_the_judge_never_invents_a_rewind_and_finds_every_skip(seed):
    sim = Sim(seed, concurrent=True).run(200)
    _judge, found = judged(sim, seed, split=True)
    assert {(f.partition, f.offset) for f in found if f.invariant == "group_skip"} == sim.true_skips
    consumed_rewinds = [f for f in found if f.invariant == "group_rewind" and sim.obs[f.at]["k"] == "consumed"]
    assert len(consumed_rewinds) <= sim.true_rewinds


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9))
def test_any_split_of_the_reads_and_any_judging_moments_give_the_whole_history_answer(seed):
    sim = Sim(seed, concurrent=bool(seed % 2)).run(200)
    _a, whole = judged(sim, seed, split=False)
    _b, split = judged(sim, seed + 1, split=True)
    key = lambda f: (f.invariant, f.partition, f.offset, f.at)  # noqa: E731
    assert sorted(map(key, whole)) == sorted(map(key, split))


def test_a_late_commit_by_a_revoked_member_lowers_the_floor_and_is_no_rewind():
    j = GroupJudge()
    obs = [("a", "assigned", {"p": [0]}), ("a", "consumed", {"r": {"0": [[0, 10]]}}),
           ("a", "intent", {"o": {"0": 10}}), ("a", "ack", {"r": "ok"}),
           ("a", "consumed", {"r": {"0": [[10, 5]]}}), ("a", "lost", {"p": [0]}),
           ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[10, 5]]}}),  # from 10: redelivered
           ("b", "intent", {"o": {"0": 15}}), ("b", "ack", {"r": "ok"}),
           ("a", "intent", {"o": {"0": 12}}), ("a", "ack", {"r": "ok"}),  # late, and it went through
           ("b", "revoked", {"p": [0]}), ("c", "assigned", {"p": [0]}),
           ("c", "consumed", {"r": {"0": [[12, 3]]}})]  # from the late commit: allowed
    for at, (m, k, f) in enumerate(obs):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    j.read_reference(0, range(15))
    found = j.judge()
    assert found == [] and j.redeliveries == 8


def test_a_fetch_below_the_acknowledged_commit_is_a_rewind_per_record():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "assigned", {"p": [0]}), ("a", "consumed", {"r": {"0": [[0, 10]]}}),
            ("a", "intent", {"o": {"0": 10}}), ("a", "ack", {"r": "ok"}), ("a", "revoked", {"p": [0]}),
            ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[7, 5]]}})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_rewind", 7), ("group_rewind", 8),
                                                             ("group_rewind", 9)]
    assert j.redeliveries == 0


def test_a_commit_whose_outcome_was_unknown_at_the_fetch_lowers_the_floor():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "assigned", {"p": [0]}), ("a", "consumed", {"r": {"0": [[0, 10]]}}),
            ("a", "intent", {"o": {"0": 5}}), ("a", "ack", {"r": "ok"}),
            ("a", "intent", {"o": {"0": 10}}), ("a", "lost", {"p": [0]}),
            ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[5, 5]]}}),
            ("a", "ack", {"r": "ok"})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert j.judge() == [] and j.redeliveries == 5


def test_a_partition_without_a_live_owner_past_the_threshold_is_one_stall_and_a_stop_starts_no_clock():
    j = GroupJudge(stall_ms=5000)
    for at, (m, k, t, f) in enumerate([
            ("c", "assigned", 0, {"p": [2]}),
            ("a", "assigned", 0, {"p": [0, 1]}), ("a", "progress", 1000, {"p": [0, 1]}),
            ("a", "progress", 2000, {"p": [0, 1]}),  # then paused: nothing for 9 s
            ("c", "progress", 4000, {"p": [2]}), ("c", "progress", 8000, {"p": [2]}),  # (the log goes on)
            ("b", "assigned", 11000, {"p": [0]}), ("b", "progress", 12000, {"p": [0]}),
            ("a", "progress", 12500, {"p": [1]}),  # a came back, still owning 1: 10.5 s without
            ("c", "progress", 12000, {"p": [2]}), ("a", "stopped", 13000, {}), ("c", "progress", 16000, {"p": [2]}),
            ("c", "assigned", 20000, {"p": [1]}),  # a stopped on purpose: no clock ran for 1
            ("a", "assigned", 20500, {"p": [0]}),  # (from inside a's close(): ignored)
            ("c", "progress", 90000, {"p": [1, 2]})]):  # the whole log silent for 70 s: no clock ran
        j.observe(at, {"m": m, "k": k, "t": t, **f})
    stalls = [(f.partition, f.member) for f in j.judge() if f.invariant == "rebalance_stall"]
    assert stalls == [(0, "b"), (1, "a")]
    assert ("a", 0) not in j.spans


def test_rebalances_are_counted_from_each_members_own_count_after_its_first_report():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "progress", {"rc": 1, "rr": "join"}), ("a", "progress", {"rc": 3, "rr": "member left"}),
            ("a", "started", {}), ("a", "progress", {"rc": 1, "rr": "join"}),
            ("a", "progress", {"rc": 2, "rr": "x"})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert dict(j.rebalances) == {("a", "member left"): 2, ("a", "x"): 1}


def test_a_commit_sent_after_the_first_records_arrived_does_not_lower_the_floor():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "assigned", {"p": [0]}), ("a", "consumed", {"r": {"0": [[0, 10]]}}),
            ("a", "intent", {"o": {"0": 10}}), ("a", "ack", {"r": "ok"}), ("a", "lost", {"p": [0]}),
            ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[8, 4]]}}),
            ("a", "intent", {"o": {"0": 3}}), ("b", "consumed", {"r": {"0": [[12, 1]]}}), ("a", "ack", {"r": "ok"})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_rewind", 8), ("group_rewind", 9)]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_a_malformed_observation_is_none_never_an_exception(raw):
    from monitor.group import observations
    obs = observations.decode(raw)
    assert obs is None or obs["k"] in observations.KINDS


def test_an_observation_round_trips():
    from monitor.group import observations
    obs = observations.decode(observations.encode("m1", "consumed", r={"0": [[5, 2]]}))
    assert obs is not None and (obs["m"], obs["k"], obs["r"]) == ("m1", "consumed", {"0": [[5, 2]]})


def test_after_lost_observations_no_skip_is_judged_and_rewinds_only_from_new_commits():
    j = GroupJudge()
    # the log's head was deleted (retention): it starts at 500, where b commits on 1 (so it had no
    # commit in flight whose intent was lost) and a commits 110 on 0
    for at, (m, k, f) in enumerate([
            ("b", "intent", {"o": {"1": 7}}), ("b", "ack", {"r": "ok"}),
            ("a", "consumed", {"r": {"0": [[105, 5]]}}), ("a", "intent", {"o": {"0": 110}}), ("a", "ack", {"r": "ok"}),
            ("a", "consumed", {"r": {"0": [[110, 5]]}}), ("a", "intent", {"o": {"0": 120}}), ("a", "ack", {"r": "ok"}),
            ("a", "revoked", {"p": [0]}), ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[118, 1]]}})],
            start=500):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    j.read_reference(0, range(125))
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_rewind", 118)]
    assert j.observations_lost == 1 and j.judged_records == 0


def test_a_commit_lost_with_observations_may_land_last_so_it_leaves_no_floor_until_a_later_one_covers_it():
    """Found by the property test below (its seed 125707173): the observations' head lost, with a
    revoked member's late commit (8) in it; it landed after another member's known commit (19), so
    the next owner fetched 8 — a floor of 19 made five false group_rewind."""
    def judge(before: list, between: list) -> list:
        j = GroupJudge()
        for at, (m, k, f) in enumerate([("c", "intent", {"o": {"2": 1}}), ("c", "ack", {"r": "ok"})] + before + [
                ("a", "intent", {"o": {"1": 19}})] + between + [("a", "ack", {"r": "ok"}), ("c", "assigned", {"p": [1]}),
                ("c", "consumed", {"r": {"1": [[10, 3]]}})], start=500):
            j.observe(at, {"m": m, "k": k, "t": at, **f})
        return [(f.invariant, f.offset) for f in j.judge()]

    rewinds = [("group_rewind", 10), ("group_rewind", 11), ("group_rewind", 12)]
    # b's first observation after the loss comes after a's 19 was sent: b's commit in flight
    # settled then (it restarted; or its ack), maybe applied after 19: no floor
    assert judge([], [("b", "started", {})]) == []
    assert judge([], [("b", "ack", {"r": "ok"})]) == []
    # ... before it: 19 covers it (and a member whose first observation is an intent had none)
    assert judge([("b", "started", {})], []) == rewinds
    assert judge([("b", "intent", {"o": {"0": 3}}), ("b", "ack", {"r": "ok"})], []) == rewinds
    # ... refused: nothing of it was committed
    assert judge([], [("b", "ack", {"r": "refused"})]) == rewinds
    # ... a restore keeps what is not settled yet
    j = GroupJudge()
    j.observe(500, {"m": "b", "k": "progress", "t": 500, "p": []})
    j = GroupJudge.from_doc(json.loads(json.dumps(j.to_doc())))
    assert [c.member for c in j.lost_commits if c.ack_at is None] == ["b"] and j.seen_since_loss == {"b"}


def test_a_killed_members_commit_in_flight_does_not_hide_later_rewinds():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "assigned", {"p": [0]}), ("a", "consumed", {"r": {"0": [[0, 10]]}}),
            ("a", "intent", {"o": {"0": 10}}), ("a", "started", {}),  # killed with its commit in flight
            ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[10, 90]]}}),
            ("b", "intent", {"o": {"0": 100}}), ("b", "ack", {"r": "ok"}), ("b", "revoked", {"p": [0]}),
            ("c", "assigned", {"p": [0]}), ("c", "consumed", {"r": {"0": [[50, 2]]}})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_rewind", 50), ("group_rewind", 51)]


def test_no_committed_offset_or_one_out_of_range_and_a_silent_jump_back_are_resets_not_rewinds():
    j = GroupJudge()
    for at, (m, k, f) in enumerate([
            ("a", "assigned", {"p": [0, 1]}), ("a", "consumed", {"r": {"0": [[0, 10]], "1": [[0, 10]]}}),
            ("a", "intent", {"o": {"0": 10, "1": 10}}), ("a", "ack", {"r": "ok"}), ("a", "revoked", {"p": [0, 1]}),
            # the committed offsets expired (0: none) or a truncation left 1's out of range: reset
            ("b", "assigned", {"p": [0, 1], "c": {"0": -1, "1": 10}, "oor": [1]}),
            ("b", "consumed", {"r": {"0": [[0, 3]], "1": [[0, 3]]}}),
            ("b", "intent", {"o": {"0": 12}}), ("b", "ack", {"r": "ok"}),
            ("b", "consumed", {"r": {"0": [[12, 2]]}}),
            ("b", "consumed", {"r": {"0": [[5, 1]]}}),  # a silent jump back: the client reset it
            ("b", "seek", {"p": 1}), ("b", "consumed", {"r": {"1": [[1, 1]]}})]):  # its own seek: judged
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    assert [(f.invariant, f.partition, f.offset) for f in j.judge()] == []  # 1: its floor is gone (no own ack)
    assert j.resets == 2 and j.redeliveries == 8
    j.observe(13, {"m": "b", "k": "intent", "t": 13, "o": {"1": 3}})
    j.observe(14, {"m": "b", "k": "ack", "t": 14, "r": "ok"})
    j.observe(15, {"m": "b", "k": "seek", "t": 15, "p": 1})
    j.observe(16, {"m": "b", "k": "consumed", "t": 16, "r": {"1": [[1, 1]]}})
    assert [(f.invariant, f.partition, f.offset) for f in j.judge()] == [("group_rewind", 1, 1)]


def test_a_partition_whose_range_could_not_be_listed_starting_below_its_committed_offset_is_a_rewrite():
    """Found on the local cluster (test_wiped_partitions): a node down with the only replica of
    partition 0 and the group rebalancing meanwhile; the member assigned 0 could not list its
    range. Back without its data, the log's offsets start again at 0: the client's fetch at the
    committed offset (1,300) is out of range and it resets to the start. As recorded before (no
    committed offsets at all), the audit called 1,500 records rewound and 223 skipped; with the
    committed offset and ``uk``, none."""
    def history(assigned: dict) -> list:
        return [("a", "assigned", {"p": [0], "c": {"0": -1}, "oor": []}),
                ("a", "consumed", {"r": {"0": [[0, 1300]]}}),
                ("a", "intent", {"o": {"0": 1300}}), ("a", "ack", {"r": "ok"}), ("a", "revoked", {"p": [0]}),
                ("b", "assigned", {"p": [0], **assigned}),
                ("b", "consumed", {"r": {"0": [[1, 500]]}}),  # (offset 0 of the new log: a marker)
                ("b", "intent", {"o": {"0": 501}}), ("b", "ack", {"r": "ok"})]

    for assigned, want_rewinds in (({}, 500), ({"c": {"0": 1300}, "oor": [], "uk": [0]}, 0)):
        j = GroupJudge()
        for at, (m, k, f) in enumerate(history(assigned)):
            j.observe(at, {"m": m, "k": k, "t": at, **f})
        j.read_reference(0, list(range(1, 600)), reader_at=600)  # the final log: the new records
        found = j.judge()
        assert sum(f.invariant == "group_rewind" for f in found) == want_rewinds
        assert want_rewinds or found == []


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9))
def test_observations_lost_anywhere_never_make_a_false_skip_or_rewind(seed):
    sim = Sim(seed, concurrent=bool(seed % 2)).run(200)
    rng = random.Random(seed)
    lo = rng.randrange(len(sim.obs) or 1)
    hi = lo + rng.randint(1, 20)
    judge = GroupJudge(stall_ms=10**9)
    for at, obs in enumerate(sim.obs):
        if not lo <= at < hi:
            judge.observe(at, obs)
    for p, offsets in sim.log.items():
        judge.read_reference(p, offsets, reader_at=offsets[-1] + 3)
    found = judge.judge()
    assert {(f.partition, f.offset) for f in found if f.invariant == "group_skip"} <= sim.true_skips
    assert sum(f.invariant == "group_rewind" and sim.obs[f.at]["k"] == "consumed" for f in found) <= sim.true_rewinds


def test_a_recreated_canary_topic_judges_no_skip_and_rewinds_only_from_the_next_assignment():
    """Found on the local cluster: the canary topic deleted and recreated under running members.
    Commits name topics, not IDs: a member goes on committing its old log's position (1287) while
    the new log holds 0..; that commit passes records nobody consumed, which says nothing about
    the group."""
    j = GroupJudge()
    j.recreated()
    for at, (m, k, f) in enumerate([
            ("a", "consumed", {"r": {"0": [[1280, 7]]}}),  # prefetched from the old log
            ("a", "intent", {"o": {"0": 1287}}), ("a", "ack", {"r": "ok"}),
            ("a", "consumed", {"r": {"0": [[0, 40]]}}),  # reset to the new log's start
            ("a", "revoked", {"p": [0]}), ("b", "assigned", {"p": [0], "c": {"0": 1287}, "oor": [0]}),
            ("b", "consumed", {"r": {"0": [[0, 60]]}}), ("b", "intent", {"o": {"0": 60}}), ("b", "ack", {"r": "ok"}),
            ("b", "revoked", {"p": [0]}), ("c", "assigned", {"p": [0], "c": {"0": 60}}),
            ("c", "consumed", {"r": {"0": [[55, 10]]}})]):  # below b's acknowledged 60: rewinds
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    j.read_reference(0, range(1300))
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_rewind", o) for o in range(55, 60)]
    assert j.recreations == 1 and j.judged_records == 0 and j.observations_lost == 0
    assert GroupJudge.from_doc(json.loads(json.dumps(j.to_doc()))).recreations == 1


def test_after_a_recreation_an_old_logs_commit_is_no_floor_and_an_assignment_that_read_none_has_none():
    """(Review) a member still owning its partition re-commits its old log's position after the
    recreation; the next owner could not read its committed offsets and starts at the new log's
    beginning: 40 false rewinds before, none now."""
    j = GroupJudge()
    j.observe(0, {"m": "a", "k": "assigned", "t": 0, "p": [0], "c": {"0": 1000}})
    j.observe(1, {"m": "a", "k": "consumed", "t": 1, "r": {"0": [[1000, 287]]}})
    j.recreated()
    for at, (m, k, f) in enumerate([
            ("a", "intent", {"o": {"0": 1287}}), ("a", "ack", {"r": "ok"}), ("a", "revoked", {"p": [0]}),
            ("b", "assigned", {"p": [0]}), ("b", "consumed", {"r": {"0": [[0, 40]]}})], start=2):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    j.read_reference(0, range(40))
    assert j.judge() == [] and j.recreations == 1


def test_ownership_and_the_stall_clock_survive_a_recreation():
    """(Review) a owns partition 0 and hangs across the recreation while m keeps reporting; b gets
    it 130 s later: one stall, as without the recreation."""
    def run(recreate: bool) -> list:
        j = GroupJudge(stall_ms=60_000)
        j.observe(0, {"m": "a", "k": "assigned", "t": 0, "p": [0]})
        j.observe(1, {"m": "a", "k": "progress", "t": 1000, "p": [0]})
        if recreate:
            j.recreated()
        n = 2
        for t in range(11_000, 131_000, 10_000):
            j.observe(n, {"m": "m", "k": "progress", "t": t, "p": [1]})
            n += 1
        j.observe(n, {"m": "b", "k": "assigned", "t": 131_000, "p": [0]})
        return [(f.invariant, f.partition) for f in j.judge()]

    assert run(False) == run(True) == [("rebalance_stall", 0)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9))
def test_a_recreation_noted_anywhere_never_makes_a_false_skip_or_rewind(seed):
    """GroupJudge.recreated only takes away: wherever the switch falls in the observation log (the
    checker notes a new ID at its batch, not where the log has it), no finding is invented."""
    sim = Sim(seed, concurrent=bool(seed % 2)).run(200)
    at_switch = random.Random(seed).randrange(len(sim.obs) + 1)
    judge = GroupJudge(stall_ms=10**9)
    for at, obs in enumerate(sim.obs):
        if at == at_switch:
            judge.recreated()
        judge.observe(at, obs)
    for p, offsets in sim.log.items():
        judge.read_reference(p, offsets, reader_at=offsets[-1] + 3)
    found = judge.judge()
    assert not any(f.invariant == "group_skip" for f in found) or at_switch == len(sim.obs)
    assert {(f.partition, f.offset) for f in found if f.invariant == "group_skip"} <= sim.true_skips
    assert sum(f.invariant == "group_rewind" and sim.obs[f.at]["k"] == "consumed" for f in found) <= sim.true_rewinds


def test_a_rewritten_log_judges_the_old_logs_commits_only_below_the_rewrite():
    """Found on the local cluster (a node's partition wiped under the group, offsets reused): the
    old log held transaction markers at 5 and 9, which no member consumes; a commit of 11 passed
    them. The new log holds records there. The member's client resets to 0 (a backward jump), or
    a new owner finds the committed 11 past the log's end and starts at 0: the old commit passes
    nothing of the new log (the audit counted 242 such offsets, live 2)."""
    old = [("a", "assigned", {"p": [0], "c": {"0": -1}}), ("a", "consumed", {"r": {"0": [[0, 5], [6, 3], [10, 1]]}}),
           ("a", "intent", {"o": {"0": 11}}), ("a", "ack", {"r": "ok"})]
    by_reset = old + [("a", "consumed", {"r": {"0": [[0, 20]]}}), ("a", "intent", {"o": {"0": 20}}),
                      ("a", "ack", {"r": "ok"})]
    by_new_owner = old + [("a", "revoked", {"p": [0]}), ("b", "assigned", {"p": [0], "c": {"0": 11}, "oor": [0]}),
                          ("b", "consumed", {"r": {"0": [[0, 20]]}}), ("b", "intent", {"o": {"0": 20}}),
                          ("b", "ack", {"r": "ok"})]
    for history in (by_reset, by_new_owner):
        j = GroupJudge()
        for at, (m, k, f) in enumerate(history):
            j.observe(at, {"m": m, "k": k, "t": at, **f})
        j.read_reference(0, range(20))  # the new log, read after it all (as the audit reads it)
        assert j.judge() == [] and j.judged_records == 20
    # a record the new log's own commit passed unconsumed is still a skip
    j = GroupJudge()
    for at, (m, k, f) in enumerate(by_reset[:-3] + [("a", "consumed", {"r": {"0": [[0, 7], [8, 12]]}}),
                                                      ("a", "intent", {"o": {"0": 20}}), ("a", "ack", {"r": "ok"})]):
        j.observe(at, {"m": m, "k": k, "t": at, **f})
    j.read_reference(0, range(20))
    assert [(f.invariant, f.offset) for f in j.judge()] == [("group_skip", 7)]
