"""Consumer groups: ``group_skip``, ``group_rewind``, ``rebalance_stall``, and redeliveries.

The group canary (``monitor/group/member.py``) runs N members of one consumer group, each its own
process, subscribed to the canary topic with ``read_committed`` and explicit commits. Every member
appends what it does to one *observation log* (a topic of one partition, so its offsets order
every member's observations): ``started``; ``assigned`` (written and flushed in the rebalance
callback, before the assignment takes effect and so before the committed offsets are fetched);
``consumed`` (per partition, the offsets a poll returned); ``intent`` (the offsets about to be
committed, flushed after the ``consumed`` observations they cover and before the commit is sent);
``ack`` (the commit's result: ``ok``, an error the broker answered — nothing committed — or an
unknown outcome); ``revoked`` / ``lost``; ``progress`` every second (the partitions it owns);
``stopped``. Ordering is by the log: an ``ack`` written before an ``assigned`` was acknowledged
before that assignment's fetch; an ``intent`` written after a ``consumed`` was sent after that
fetch's records arrived. Nothing else is assumed about clocks.

**``group_skip``** (a loss to the application). A record a reference ``read_committed`` reader of
the canary read on partition p, below the value of an acknowledged commit X on p, that no member
had consumed when X's ``ack`` was written. Each record is judged by the first acknowledged commit
(in log order) that passes it, so the verdict does not depend on how far the reference reader
was when the commit was seen. Not judged below the canary's log start (retention took it, and
``auto.offset.reset`` then moves a group on by design). Live, a skip counts only once the reference
reader read its offset again and found a record there (:mod:`invariants.reference_confirm`), and
the ledger was read a few seconds past the skipped record's own intent (a rewrite's acknowledgements
may exempt it: ``Checker._ledger_behind``, ``Checker._intent_unread``).

**``group_rewind``** (a delivery below what the group acknowledged). When a member starts
consuming a partition it was assigned, the committed offset it fetched is one of: the commits
acknowledged before its ``assigned`` that no other acknowledged commit before it superseded (a
commit whose ``intent`` follows another's ``ack`` was sent after it), and the commits whose
outcome was not yet known then and whose ``intent`` precedes its first ``consumed``. A record it
consumes below the lowest of those is ``group_rewind``; so is, within one assignment, a record
consumed below a commit the member itself had acknowledged in it, and an acknowledged commit
that goes backwards within one assignment (counted once). A revoked member committing late, after
the new owner fetched, lowers nothing here: that commit's ``ack`` follows the new ``assigned``
(at-least-once behaviour). Per record.

**Redeliveries** (``vigil_group_redeliveries_total``, at-least-once behaviour, not a violation):
a record consumed at or below the highest offset the group had consumed on its partition, and
not a ``group_rewind``.

**Resets and lost observations.** A member's ``assigned`` says which committed offsets it read
itself (-1: none — expired, deleted, a new group) and which were out of the log's range (a
truncated log): there the client starts where ``auto.offset.reset`` (earliest) says, and no floor
holds. Nor where the member could not list the log's range (``uk``: the partition's leader not
answering, as with a node down holding its only replica): the committed offset may be out of range
once the log is back (found on the local cluster: a node back without its RF-1 partition, the
group rebalancing while it was down; the member's first fetch reset to the new log's start, and a
floor taken from the old log's commits called 1,500 records rewound). A member starting below its
committed offset there shows the log rewritten, as with one out of range. Within an assignment,
a backward jump the member did not announce (``seek``, which only the rewind drill does) is the
client resetting an out-of-range position: no floor holds from there either (``resets`` counts both); what is consumed again is redelivered, not rewound.
Observations that are missing (a gap in the log's offsets, or its head deleted) make the judge
forget assignments and commits (no rewind until the next assignment) and stop judging
``group_skip`` (``observations_lost``): what the members consumed then is unknown. Each member
may also have had a commit in flight whose ``intent`` was lost, landing after a commit the judge
knows: until it is settled (the member's next ``intent``, an ``ack`` of no known ``intent``, its
process starting or stopping; a member commits one at a time and observes nothing meanwhile) and
a known commit sent after that covers the partition, an assignment there has no floor. A
malformed observation is no lost one.

**A recreated canary topic** (a new topic ID under its name) starts the judge again, blind:
commits name topics, not IDs, so the members go on committing the positions they held in the old
log for a while (the coordinator drops a deleted topic's offsets; they commit them again), and
where they resume in the new one (that offset, or ``auto.offset.reset`` when it lies past the new
log's end) says nothing about the group. Commits are forgotten and ``group_skip`` is no longer judged on the new log
(``recreations``); ownership is kept, so stalls are judged throughout, but no rewind is judged in
an assignment that began before. After it, a commit by a member without a fresh assignment on the
partition is no floor there (it may be the old log's position), and an assignment whose member
could not read its committed offsets has no floor. The audit, which reads the log after the fact,
does not judge ``group_skip`` at all where the ledger shows the canary topic recreated.

**A rewritten log** (a node back without its data, an unclean election: a partition's offsets
reused for other records). A member's client resetting its position backwards (or finding its
committed offset past the log's end and starting below it) shows it in the log; the live checker
also knows it when its own reader finds offsets it read holding other records. From there on,
commits acknowledged before are judged below the rewrite only, what was read at or above it is
forgotten, and so is what was consumed there when a member resets to it (Vigil's reader alone
seeing it keeps the consumption: a member carrying on past the rewrite consumed the old records):
the old log's commits and consumption say nothing of the new log's records at the same offsets
(found on the local cluster: 242 false ``group_skip`` by the audit, 2 live, a node's partition
wiped under the group, at offsets where the old log held transaction markers). No member need
reset: one newly assigned the partition starts at the committed offset, which carries no leader
epoch (KIP-320 validates only a position that has one), so where the new log already reached it
the member fetches on from there and the new records below it never reach the group — as Kafka
specifies. The writers' acknowledgements show the reused offsets (:func:`reused_by_rewrite`, from
the ledger, the same for the audit and the checker): there no ``group_skip`` is judged at all
(:meth:`GroupJudge.rewritten`; found in a targeted run of the wiped-partition test: 241 false
``group_skip`` by the audit, 9 live, none of the members having reset). The group may have
committed past the old log's highest acknowledged write (past a final marker, writes never
acknowledged); each in-order writer's first acknowledgement going backwards also says when the
rewrite began (:func:`begins_rewrite`, by the writer's clock), and a commit acknowledged before that
(by the member's) passed the old log only: no skip is judged below its value either.

**``rebalance_stall``** (liveness). A partition with no owner alive on it for longer than
``stall_ms``: the gap, by the observations' timestamps, between two observations showing some
member owning it (``assigned``, ``consumed``, ``progress``) — a paused member, a dead one the
group has not noticed yet, a rebalance that takes long. Counted once per gap, when the gap
closes. A member stopped on purpose (``stopped``) starts no clock for the partitions it owned (and
an ``assigned`` it writes after that, from inside its close, is ignored); when the whole log was
silent for longer than ``stall_ms`` (no member ran, or none could write) no clock ran either.

**Rebalances** are counted from each member's ``progress`` (librdkafka's own count and its last
reason): a static member restarted within its session timeout must cause none in the others
under the classic protocol (KIP-345). ``progress`` also says, per partition, which broker serves
the member's fetches, the leader, and the member's lag: a rack-aware member (``client.rack``)
fetches from a follower in its rack (KIP-392); what it consumed is judged by the same rules.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from invariants.doc_runs import run_offsets
from invariants.offset_set import OffsetSet, ranges_of
from invariants.promises import NOT_IDEMPOTENT, WriteClass

@dataclass(frozen=True)
class GroupFinding:
    invariant: str  # "group_skip" | "group_rewind" | "rebalance_stall"
    partition: int
    offset: int  # the record's (a stall: -1)
    member: str = ""
    at: int = -1  # the observation's offset in the observation log


@dataclass
class _Commit:
    member: str
    values: dict[int, int]  # partition -> offset committed
    intent_at: int
    ack_at: int | None = None
    # "" while in flight; "ok"; "refused" (the group answered with an error: nothing committed);
    # "unknown" (a timeout, a lost connection, a member gone: it may have been committed)
    result: str = ""
    unknown_log: frozenset = frozenset()  # partitions whose value may be a position in a log since recreated


@dataclass
class _Span:
    """One member's ownership of one partition, from its ``assigned``."""
    assigned_at: int
    floor: int | None = None  # lowest committed offset it may have fetched (None: not known / none)
    started: bool = False  # consumed something
    own_ack: int = -1  # highest commit it acknowledged in this span
    last: int = -1  # the last offset it consumed
    seeking: bool = False  # the member said it seeks back (a drill): the next backward jump is its own
    no_floor: bool = False  # the member saw no committed offset, or one out of the log's range
    stale: bool = False  # owned across a recreation of the topic: kept for stalls, no rewind judged in it
    committed: int = -1  # the committed offset the member read at its assignment (-1: none, or not read)


@dataclass
class GroupJudge:
    """Fed the observation log in order (``observe``) and, in any interleaving, the reference
    reader's reads (``read_reference``); ``judge`` returns what became decidable."""

    stall_ms: int = 60_000
    spans: dict[tuple[str, int], _Span] = field(default_factory=dict)
    commits: list[_Commit] = field(default_factory=list)  # recent ones, in intent order
    pending_ack: dict[str, _Commit] = field(default_factory=dict)  # member -> its commit in flight
    first_consumed: dict[int, dict[int, int]] = field(default_factory=dict)  # p -> offset -> obs index, unjudged
    max_consumed: dict[int, int] = field(default_factory=dict)
    to_judge: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # p -> (value, ack index), log order
    judged_to: dict[int, int] = field(default_factory=dict)
    reference: dict[int, OffsetSet] = field(default_factory=dict)  # p -> offsets read, not judged yet
    read_to: dict[int, int] = field(default_factory=dict)
    alive_at: dict[int, int] = field(default_factory=dict)  # p -> ms of the last observation of an owner
    rebalance_seen: dict[str, int] = field(default_factory=dict)  # member -> librdkafka's rebalance count
    rebalances: Counter = field(default_factory=Counter)  # (member, reason) -> rebalances
    redeliveries: int = 0
    judged_records: int = 0  # reference records a commit passed and that were judged
    fetching: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)  # (member, p) -> (broker, leader, lag)
    findings: list[GroupFinding] = field(default_factory=list)  # the observation-side ones, not returned yet
    next_at: int = 0  # the next observation's offset (one read before is passed over)
    last_ts: int | None = None  # ms of the last observation of any kind
    stopped: set[str] = field(default_factory=set)  # members whose process said it stopped (not started since)
    blind: bool = False  # observations were lost: commits are taken, not judged
    observations_lost: int = 0  # gaps in the observation log (its head deleted counts as one)
    resets: int = 0  # positions the members reported reset (out of range)
    recreations: int = 0  # the canary topic recreated under its name while judged (see recreated())
    reused: dict[int, OffsetSet] = field(default_factory=dict)  # p -> offsets a rewrite reused, above judged_to: no skip judged (see rewritten())
    # p -> (the member's ms at its ack, value) of the last COMMIT_MEMORY_MS of acknowledged commits, and
    # p -> (ms, offset) of each rewrite a writer saw begin: commits acknowledged before it passed the old
    # log (see rewritten())
    commit_times: dict[int, deque[tuple[int, int]]] = field(default_factory=dict)
    rewrite_marks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    exempted: dict[tuple[int, int], int] = field(default_factory=dict)  # (p, lo) -> hi newly exempt: take_exempted()
    # commits lost with observations (a member's, value and partitions unknown): no floor they may
    # undercut (see _lost_observations()); and the members seen since the last loss (None: no loss)
    lost_commits: list[_Commit] = field(default_factory=list)
    seen_since_loss: set[str] | None = None

    MAX_UNJUDGED = 1_000_000  # reference offsets per partition waiting for a commit to pass them
    # how long a commit's time is kept for a rewrite learnt after it (live, the ledger and the observation
    # log are read side by side: what one is behind the other by)
    COMMIT_MEMORY_MS = 30 * 60_000

    # -- the observation log ------------------------------------------------------------------
    def observe(self, at: int, obs: Mapping) -> None:
        """The observation at offset ``at`` of the log; offsets below one observed are passed over
        (a batch read again), so the log is taken once and in order."""
        if at < self.next_at:
            return
        if at > self.next_at:
            self._lost_observations()
        self.next_at = at + 1
        kind, member, ts = obs.get("k"), str(obs.get("m", "")), int(obs.get("t", 0))
        if self.last_ts is not None and ts - self.last_ts > self.stall_ms:
            self.alive_at.clear()  # the whole log silent (no member ran, or none could write): no clock ran
        self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        if self.seen_since_loss is not None:  # (set at a loss, and only then are there lost commits)
            self._settle_lost_commit(member, kind, str(obs.get("r", "unknown")), at)
        if kind == "started":
            self._end_spans(member)
            self._unknown_outcome(member, at)
            self.stopped.discard(member)
        elif kind == "assigned":
            if member in self.stopped:
                return  # (from inside its close(), after it said it stopped)
            committed, out, unlisted = obs.get("c") or {}, set(obs.get("oor") or []), set(obs.get("uk") or [])
            for p in obs.get("p", []):
                # no committed offset, or one out of range (or whose range the member could not list:
                # it may be): the client starts where auto.offset.reset says
                no_floor = committed.get(str(p)) == -1 or int(p) in out or int(p) in unlisted or \
                    (self.recreations > 0 and str(p) not in committed)  # (read none: maybe an old log's)
                self.spans[(member, int(p))] = _Span(at, no_floor=no_floor, committed=int(committed.get(str(p), -1)))
                self.resets += int(p) in out
                self._alive(int(p), ts, member, at)
        elif kind == "seek":
            span = self.spans.get((member, int(obs.get("p", -1))))
            if span is not None:
                span.seeking = True
        elif kind in ("revoked", "lost"):
            for p in obs.get("p", []):
                self.spans.pop((member, int(p)), None)
                self.fetching.pop((member, int(p)), None)
        elif kind == "stopped":
            for (m, p) in [k for k in self.spans if k[0] == member]:
                self.alive_at.pop(p, None)
            self._end_spans(member)
            self._unknown_outcome(member, at)
            self.stopped.add(member)
        elif kind == "consumed":
            for p_str, runs in obs.get("r", {}).items():
                self._consumed(member, int(p_str), run_offsets(runs), at)
                if (member, int(p_str)) in self.spans:
                    self._alive(int(p_str), ts, member, at)
        elif kind == "intent":
            values = {int(p): int(o) for p, o in obs.get("o", {}).items()}
            unknown = frozenset(p for p in values if self.recreations and
                                ((member, p) not in self.spans or self.spans[(member, p)].stale))
            commit = _Commit(member, values, at, unknown_log=unknown)
            self.commits.append(commit)
            self.pending_ack[member] = commit
        elif kind == "ack":
            self._ack(member, str(obs.get("r", "unknown")), at, ts)
        elif kind == "progress":
            for p in obs.get("p", []):
                if (member, int(p)) in self.spans:
                    self._alive(int(p), ts, member, at)
            for p_str, (broker, leader, lag) in (obs.get("ff") or {}).items():
                self.fetching[(member, int(p_str))] = (int(broker), int(leader), int(lag))
            count, reason = int(obs.get("rc", 0)), str(obs.get("rr", ""))
            if count > self.rebalance_seen.get(member, count):
                self.rebalances[(member, reason)] += count - self.rebalance_seen[member]
            self.rebalance_seen[member] = count

    def _unknown_outcome(self, member: str, at: int) -> None:
        """A member process gone with a commit in flight: its outcome is unknown for good."""
        commit = self.pending_ack.pop(member, None)
        if commit is not None:
            commit.ack_at, commit.result = at, "unknown"
            self._prune()

    def _lost_observations(self) -> None:
        """Observations are missing (the log's head deleted by retention, or a gap): what the
        members did then is not known. Assignments and commits are forgotten (no floor is known:
        no rewind is judged until the next assignment), and ``group_skip`` is no longer judged —
        any record may have been consumed then, unseen (judging again from the first record
        written after the loss needs the records' timestamps: not done yet)."""
        self.spans.clear()
        self.commits.clear()
        self.pending_ack.clear()
        self.alive_at.clear()
        self.blind = True
        self.observations_lost += 1
        self.seen_since_loss = set()

    def _settle_lost_commit(self, member: str, kind: object, result: str, at: int) -> None:
        """After lost observations, each member may have had a commit in flight whose ``intent``
        was lost: any partitions, any values, applied whenever before it is settled — after a
        commit the judge knows, too (found by a property test: a floor taken from the known
        commit, 19, where a revoked member's lost commit, 8, landed last: five false
        ``group_rewind``). It is settled at the member's next ``ack`` that no known ``intent``
        precedes (its outcome), its next ``intent`` (it commits one at a time) or its process
        starting or stopping (unknown); a floor that such a commit may undercut is none
        (:meth:`_fetch_floor`). A member whose first observation after the loss is an ``intent`` had
        none in flight."""
        if not member:
            return
        if self.seen_since_loss is not None and member not in self.seen_since_loss:
            self.seen_since_loss.add(member)
            if kind != "intent":
                self.lost_commits.append(_Commit(member, {}, at))
        if kind in ("intent", "started", "stopped") or (kind == "ack" and member not in self.pending_ack):
            for c in self.lost_commits:
                if c.member == member and c.ack_at is None:
                    c.ack_at, c.result = at, (result if kind == "ack" else "unknown")
            self.lost_commits = [c for c in self.lost_commits if c.result != "refused"]

    def recreated(self) -> None:
        """The canary topic was recreated under its name (a new topic ID). Commits name topics,
        not IDs, so for a while the members commit the positions they held in the old log, and
        where they resume in the new one (that offset, or ``auto.offset.reset`` past its end) says
        nothing about the group. Commits are forgotten and ``group_skip`` is no longer judged;
        ownership is kept (``rebalance_stall`` is judged throughout) but no rewind is judged in an
        assignment that began before. After
        it, a commit by a member without a fresh assignment on a partition is no floor there, and
        an assignment whose member could not read its committed offsets has none."""
        for span in self.spans.values():
            span.stale, span.started, span.floor, span.no_floor, span.own_ack, span.last = True, True, None, True, -1, -1
            span.seeking = False
        for log in (self.commits, self.pending_ack, self.first_consumed, self.max_consumed, self.to_judge,
                    self.judged_to, self.reference, self.read_to, self.reused, self.commit_times, self.rewrite_marks,
                    self.exempted):
            log.clear()
        self.blind = True
        self.recreations += 1

    def log_rewritten(self, p: int, offset: int, consumed_again: bool = True) -> None:
        """Partition p's log holds other records from ``offset`` on than it did (a node back
        without its data, an unclean election: offsets reused): what was consumed and read there
        was of the old log, and a commit acknowledged so far passed the old log's records, not the
        new one's. Commits so far are judged below ``offset`` only; reference reads at or above it
        are forgotten (a new log's record there is judged by later commits, or not at all if the
        reference reader read it before this was known), and so is consumption there when the
        group consumes again from there (``consumed_again``: a member's client reset its position
        to ``offset``; not when only Vigil's reader saw the rewrite: a member that carries on
        past it consumed the old records there, and the audit, which sees only the members'
        observations, credits them the same)."""
        if p in self.to_judge:
            self.to_judge[p] = [(min(value, offset), ack) for value, ack in self.to_judge[p]]
        seen = self.first_consumed.get(p)
        if seen and consumed_again:
            for o in [o for o in seen if o >= offset]:
                del seen[o]
        ref = self.reference.get(p)
        if ref:
            ref.discard_from(offset)

    def rewritten(self, p: int, lo: int, hi: int, since_ms: int | None = None) -> None:
        """Offsets ``[lo, hi)`` of p were reused by a rewrite: the old log reached ``hi`` (the
        writers' acknowledgements before theirs went backwards), the new one holds other records
        from ``lo`` on. No ``group_skip`` is judged there, by any commit and whenever this is
        learnt: a commit acknowledged before passed the old records, and a member whose fetch
        starts at a committed offset inside the new log (one without a leader epoch is not
        validated, KIP-320) never fetches the new records below it, as Kafka specifies; what was
        consumed there says nothing either (found on the local cluster: 241 false ``group_skip`` by
        the audit, 9 live, at the old log's transaction markers, no member having reset).

        The old log may have reached past ``hi``: transaction markers, aborted records and writes
        never acknowledged stand above the writers' highest acknowledgement, and the group commits
        past them. ``since_ms`` (given with a writer's first acknowledgement that went backwards:
        its time, by the writer's clock, after the new log began) marks the rewrite: a commit the
        group acknowledged before it (by the member's clock at its ``ack``) passed the old log only,
        so no skip is judged below its value either, from ``lo`` on — whether that commit is
        observed before this is learnt or after (found on the local cluster: 140 false
        ``group_skip`` by the audit, 9 live, commits past the old log's last acknowledged write
        judged against the new log's records). It compares the writers' clock with the members'
        (one host under ``vigil run``); a new log's commit acknowledged before the writer saw its
        acknowledgement go back exempts what it passed too."""
        if since_ms is not None:
            add_rewrite_mark(self.rewrite_marks.setdefault(p, []), since_ms, lo)
            hi = max([hi] + [value for ts, value in self.commit_times.get(p, []) if ts < since_ms])
        self._exempt(p, lo, hi)

    def _exempt(self, p: int, lo: int, hi: int) -> None:
        """No skip judged on p in ``[lo, hi)`` (:meth:`rewritten`)."""
        if lo >= hi:
            return
        self.exempted[(p, lo)] = max(hi, self.exempted.get((p, lo), hi))  # (one rewrite, commit after commit)
        lo = max(lo, self.judged_to.get(p, 0))  # (below, nothing is judged any more: kept no longer)
        if lo >= hi:
            return
        reused = self.reused.setdefault(p, OffsetSet())
        if reused.covers(lo, hi):
            return  # (known already: each acknowledgement below the old log's end says it again)
        reused.add_range(lo, hi)
        ref = self.reference.get(p)
        if ref:
            ref.discard_range(lo, hi)

    def take_exempted(self) -> list[tuple[int, int, int]]:
        """The ranges (p, lo, hi) made exempt from ``group_skip`` since the last call, below what is
        judged too: a live checker drops the skips it holds there, unconfirmed."""
        out = [(p, lo, hi) for (p, lo), hi in self.exempted.items()]
        self.exempted.clear()
        return out

    def _end_spans(self, member: str) -> None:
        for key in [k for k in self.spans if k[0] == member]:
            del self.spans[key]
        for key in [k for k in self.fetching if k[0] == member]:
            del self.fetching[key]
        self.rebalance_seen.pop(member, None)

    def _alive(self, p: int, ts: int, member: str, at: int) -> None:
        last = self.alive_at.get(p)
        if last is not None and ts - last > self.stall_ms:
            self.findings.append(GroupFinding("rebalance_stall", p, -1, member, at))
        self.alive_at[p] = max(ts, last or ts)

    def _fetch_floor(self, p: int, span: _Span, first_consumed_at: int) -> int | None:
        """The lowest committed offset on p the span's fetch may have returned (None: none known)."""
        acked = [c for c in self.commits if p in c.values and p not in c.unknown_log and c.result == "ok"
                 and c.ack_at is not None and c.ack_at < span.assigned_at]
        latest = [c for c in acked if not any(d.intent_at > c.ack_at for d in acked)]  # type: ignore[operator]
        maybe = [c for c in self.commits if p in c.values and p not in c.unknown_log and c.result != "refused"
                 and not (c.result == "ok" and c.ack_at is not None and c.ack_at < span.assigned_at)
                 and c.intent_at < first_consumed_at]
        if not latest:
            return None  # it may have found no committed offset at all
        for lost in self.lost_commits:  # (any value on any partition: unless a later known commit covers it)
            if lost.ack_at is None or not any(
                    c.intent_at > lost.ack_at and c.ack_at < span.assigned_at for c in acked):  # type: ignore[operator]
                return None
        return min(c.values[p] for c in latest + maybe)

    def _consumed(self, member: str, p: int, offsets: list[int], at: int) -> None:
        span = self.spans.get((member, p))
        if span is not None and not span.started:
            span.started = True
            span.floor = None if span.no_floor else self._fetch_floor(p, span, at)
            if span.no_floor and offsets and 0 <= offsets[0] < span.committed:
                self.log_rewritten(p, offsets[0])  # its committed offset lay past the log's end
        if span is not None and offsets and 0 <= offsets[0] <= span.last:  # it went back
            if span.seeking:
                span.seeking = False  # the member's own seek: judged
            else:  # the client reset its position (out of range: a truncated log): no floor holds
                span.floor, span.own_ack = None, -1
                self.resets += 1
                self.log_rewritten(p, offsets[0])
        if span is not None and offsets:
            span.last = offsets[-1]  # (after a jump back, from there)
        floor = -1
        if span is not None:
            floor = max(span.floor if span.floor is not None else -1, span.own_ack)
        seen = self.first_consumed.setdefault(p, {})
        top = self.max_consumed.get(p, -1)
        below = self.judged_to.get(p, 0)
        for o in offsets:
            if o < floor:
                self.findings.append(GroupFinding("group_rewind", p, o, member, at))
            elif o <= top:
                self.redeliveries += 1
            if o >= below and o not in seen:
                seen[o] = at
            top = max(top, o)
        self.max_consumed[p] = top

    def _ack(self, member: str, result: str, at: int, ts: int) -> None:
        commit = self.pending_ack.pop(member, None)
        if commit is None:
            return
        commit.ack_at, commit.result = at, result
        if result != "ok":
            return
        for p, value in sorted(commit.values.items()):
            times = self.commit_times.setdefault(p, deque())
            times.append((ts, value))
            while times[0][0] < ts - self.COMMIT_MEMORY_MS:
                times.popleft()
            before = [lo for since, lo in self.rewrite_marks.get(p, []) if ts < since]
            if before:  # acknowledged before a rewrite began: it passed the old log there (rewritten())
                self._exempt(p, min(before), value)
            span = self.spans.get((member, p))
            if span is not None and not span.stale and commit.intent_at > span.assigned_at:  # sent in this assignment
                if value < span.own_ack:
                    self.findings.append(GroupFinding("group_rewind", p, value, member, at))
                span.own_ack = max(span.own_ack, value)
            # after lost observations, what a commit passes may have been consumed unseen: taken, not judged
            self.to_judge.setdefault(p, []).append((value, -1 if self.blind else at))
        self._prune()

    def _prune(self) -> None:
        """Drop the commits no fetch can return any more: refused ones, and acknowledged ones that,
        on each partition they name, an acknowledged commit sent after their ack superseded
        before every assignment still waiting for its first records began."""
        waiting = min((s.assigned_at for s in self.spans.values() if not s.started), default=None)

        def superseded(c: _Commit) -> bool:
            if c.result == "refused":
                return True
            if c.ack_at is None:
                return False
            return all(any(d.result == "ok" and d.ack_at is not None and p in d.values and d.intent_at > c.ack_at
                           and (waiting is None or d.ack_at < waiting) for d in self.commits) for p in c.values)

        self.commits = [c for c in self.commits if not superseded(c)]
        known = set(self.max_consumed) | {p for _m, p in self.spans}
        self.lost_commits = [c for c in self.lost_commits if c.ack_at is None or not known or not all(
            any(d.result == "ok" and d.ack_at is not None and p in d.values and d.intent_at > c.ack_at
                and (waiting is None or d.ack_at < waiting) for d in self.commits) for p in known)]

    # -- the reference reader -----------------------------------------------------------------
    def read_reference(self, p: int, offsets: Iterable[int], reader_at: int | None = None) -> None:
        """What a ``read_committed`` reader of the canary read on partition p, in order; everything
        below its last offset + 1 (or ``reader_at``, its position past control records) is read."""
        self.read_reference_ranges(p, ranges_of(offsets), reader_at)

    def read_reference_ranges(self, p: int, ranges: Iterable[tuple[int, int]], reader_at: int | None = None) -> None:
        """:meth:`read_reference` of the offsets in ``[lo, hi)`` ranges, ascending."""
        below = self.judged_to.get(p, 0)
        top = None
        for lo, hi in ranges:
            lo = max(lo, below)
            if lo < hi:
                self.reference.setdefault(p, OffsetSet()).add_range(lo, hi)
                top = hi if top is None else max(top, hi)
        if top is not None:
            pending = self.reference[p]
            for first, count in self.reused.get(p, OffsetSet()).to_runs():  # judged by no commit (rewritten())
                pending.discard_range(first, first + count)
            self.read_to[p] = max(self.read_to.get(p, 0), top)
            if len(pending) > self.MAX_UNJUDGED:  # no commit passing them for that long: the oldest are the audit's
                self._judged_below(p, pending.nth(len(pending) - self.MAX_UNJUDGED * 9 // 10))
        if reader_at is not None:
            self.read_to[p] = max(self.read_to.get(p, 0), reader_at)

    def judge(self, log_start: Mapping[int, int] | None = None) -> list[GroupFinding]:
        """The observation-side findings since the last call, and the skips now decidable: each
        acknowledged commit in log order, as far as the reference reader has read below it."""
        found, self.findings = self.findings, []
        starts = log_start or {}
        for p, queue in sorted(self.to_judge.items()):
            while queue:
                value, ack_at = queue[0]
                below = self.judged_to.get(p, 0)
                if ack_at < 0:  # a commit after lost observations: taken, what it passes not judged
                    self._judged_below(p, value)
                    queue.pop(0)
                    continue
                limit = min(value, self.read_to.get(p, 0))
                if limit > below:
                    seen = self.first_consumed.get(p, {})
                    for o in list(self.reference.get(p, OffsetSet()).below(limit)):
                        self.judged_records += 1
                        first = seen.get(o)
                        if o >= starts.get(p, 0) and (first is None or first > ack_at):
                            found.append(GroupFinding("group_skip", p, o, "", ack_at))
                    self._judged_below(p, limit)
                if self.judged_to.get(p, 0) < value:
                    break  # the reference reader is not that far yet: later commits on p wait behind this one
                queue.pop(0)
        return found

    def _judged_below(self, p: int, limit: int) -> None:
        """Everything on p below ``limit`` is judged (or given up): forgotten."""
        if limit <= self.judged_to.get(p, 0):
            return
        for offsets in (self.reference.get(p), self.reused.get(p)):
            if offsets:
                offsets.discard_below(limit)
        seen = self.first_consumed.get(p, {})
        for o in [o for o in seen if o < limit]:
            del seen[o]
        self.judged_to[p] = limit

    # -- the saved form -----------------------------------------------------------------------
    def to_doc(self) -> dict:
        index = {id(c): i for i, c in enumerate(self.commits)}
        return {
            "stall_ms": self.stall_ms, "next_at": self.next_at, "redeliveries": self.redeliveries,
            "judged_records": self.judged_records, "last_ts": self.last_ts, "stopped": sorted(self.stopped),
            "blind": self.blind, "observations_lost": self.observations_lost, "resets": self.resets,
            "recreations": self.recreations,
            "reused": {str(p): s.to_runs() for p, s in self.reused.items() if s},
            "commit_times": {str(p): [list(x) for x in q] for p, q in self.commit_times.items() if q},
            "rewrite_marks": {str(p): [list(x) for x in q] for p, q in self.rewrite_marks.items() if q},
            "fetching": [[m, p, *f] for (m, p), f in sorted(self.fetching.items())],
            "spans": [[m, p, s.assigned_at, s.floor, s.started, s.own_ack, s.last, s.seeking, s.no_floor, s.stale,
                       s.committed]
                      for (m, p), s in self.spans.items()],
            "commits": [[c.member, {str(p): v for p, v in c.values.items()}, c.intent_at, c.ack_at, c.result,
                         sorted(c.unknown_log)] for c in self.commits],
            "pending_ack": {m: index[id(c)] for m, c in self.pending_ack.items()},
            "lost_commits": [[c.member, c.intent_at, c.ack_at, c.result] for c in self.lost_commits],
            "seen_since_loss": None if self.seen_since_loss is None else sorted(self.seen_since_loss),
            "first_consumed": {str(p): [[o, at] for o, at in sorted(m.items())] for p, m in self.first_consumed.items() if m},
            "max_consumed": {str(p): v for p, v in self.max_consumed.items()},
            "to_judge": {str(p): [list(x) for x in q] for p, q in self.to_judge.items() if q},
            "judged_to": {str(p): v for p, v in self.judged_to.items()},
            "reference": {str(p): s.to_runs() for p, s in self.reference.items() if s},
            "read_to": {str(p): v for p, v in self.read_to.items()},
            "alive_at": {str(p): v for p, v in self.alive_at.items()},
            "rebalance_seen": dict(self.rebalance_seen),
            "rebalances": [[m, r, n] for (m, r), n in sorted(self.rebalances.items())],
            "findings": [[f.invariant, f.partition, f.offset, f.member, f.at] for f in self.findings],
        }

    @classmethod
    def from_doc(cls, doc: Mapping) -> "GroupJudge":
        j = cls(stall_ms=int(doc.get("stall_ms", 60_000)))
        j.next_at, j.redeliveries = int(doc.get("next_at", 0)), int(doc.get("redeliveries", 0))
        j.judged_records = int(doc.get("judged_records", 0))
        j.last_ts = None if doc.get("last_ts") is None else int(doc["last_ts"])
        j.stopped = {str(m) for m in doc.get("stopped", [])}
        j.blind, j.observations_lost = bool(doc.get("blind", False)), int(doc.get("observations_lost", 0))
        j.resets = int(doc.get("resets", 0))
        j.recreations = int(doc.get("recreations", 0))
        j.reused = {int(p): OffsetSet.from_runs(runs) for p, runs in doc.get("reused", {}).items()}
        j.commit_times = {int(p): deque((int(t), int(v)) for t, v in q) for p, q in doc.get("commit_times", {}).items()}
        j.rewrite_marks = {int(p): [(int(t), int(o)) for t, o in q] for p, q in doc.get("rewrite_marks", {}).items()}
        j.fetching = {(str(m), int(p)): (int(b), int(ld), int(lag)) for m, p, b, ld, lag in doc.get("fetching", [])}
        j.spans = {(str(m), int(p)): _Span(int(a), None if f is None else int(f), bool(s), int(o), int(last),
                                           bool(seeking), bool(nf), bool(rest[0]) if rest else False,
                                           int(rest[1]) if len(rest) > 1 else -1)
                   for m, p, a, f, s, o, last, seeking, nf, *rest in doc.get("spans", [])}
        j.commits = [_Commit(str(m), {int(p): int(v) for p, v in values.items()}, int(i),
                             None if a is None else int(a), str(r), frozenset(int(q) for q in (rest[0] if rest else [])))
                     for m, values, i, a, r, *rest in doc.get("commits", [])]
        j.pending_ack = {str(m): j.commits[int(i)] for m, i in doc.get("pending_ack", {}).items()}
        j.lost_commits = [_Commit(str(m), {}, int(i), None if a is None else int(a), str(r))
                          for m, i, a, r in doc.get("lost_commits", [])]
        seen = doc.get("seen_since_loss")
        j.seen_since_loss = None if seen is None else {str(m) for m in seen}
        j.first_consumed = {int(p): {int(o): int(at) for o, at in pairs} for p, pairs in doc.get("first_consumed", {}).items()}
        j.max_consumed = {int(p): int(v) for p, v in doc.get("max_consumed", {}).items()}
        j.to_judge = {int(p): [(int(v), int(a)) for v, a in q] for p, q in doc.get("to_judge", {}).items()}
        j.judged_to = {int(p): int(v) for p, v in doc.get("judged_to", {}).items()}
        j.reference = {int(p): OffsetSet.from_runs(runs) for p, runs in doc.get("reference", {}).items()}
        j.read_to = {int(p): int(v) for p, v in doc.get("read_to", {}).items()}
        j.alive_at = {int(p): int(v) for p, v in doc.get("alive_at", {}).items()}
        j.rebalance_seen = {str(m): int(n) for m, n in doc.get("rebalance_seen", {}).items()}
        j.rebalances = Counter({(str(m), str(r)): int(n) for m, r, n in doc.get("rebalances", [])})
        j.findings = [GroupFinding(str(i), int(p), int(o), str(m), int(a)) for i, p, o, m, a in doc.get("findings", [])]
        return j


def reused_by_rewrite(max_acked: dict, key: tuple, first: int, last: int) -> tuple[int, int] | None:
    """One acknowledgement of records at offsets ``first..last``, ``key`` naming the writer
    incarnation, topic ID and partition; ``max_acked`` holds each key's highest acknowledged offset
    (updated here). An acknowledgement below that highest offset shows the log rewritten there:
    the offsets ``[first, highest + 1)`` were reused (None when it does not go back). Acks arrive
    in each writer incarnation's ledger order, so the audit and the checker find the same ranges."""
    top = max_acked.get(key)
    max_acked[key] = max(last, top if top is not None else -1)
    return (first, top + 1) if top is not None and first < top else None


def begins_rewrite(rewriting: set, key: tuple, reused: tuple[int, int] | None, last: int) -> bool:
    """Whether one acknowledgement of offsets up to ``last`` (``reused``: what
    :func:`reused_by_rewrite` made of it) is its writer incarnation's first to go backwards since
    its acknowledgements last reached the old log's end: where the writer saw a rewrite begin
    (:meth:`GroupJudge.rewritten`'s ``since_ms``). ``rewriting`` holds the keys whose
    acknowledgements went backwards and are still below the old end (updated here): the same
    however the acknowledgements are split into runs (the checker takes a ledger run in pieces, the
    audit whole)."""
    if reused is None:
        rewriting.discard(key)
        return False
    begins = key not in rewriting
    if last < reused[1] - 1:
        rewriting.add(key)
    else:
        rewriting.discard(key)
    return begins


def add_rewrite_mark(marks: list[tuple[int, int]], since_ms: int, lo: int) -> bool:
    """Keep ``(since_ms, lo)`` in ``marks`` unless one there covers it (a later or equal time and a
    lower or equal offset exempt all it does); drop those it covers. The same set in any order of
    arrival. Whether it was kept."""
    if any(t >= since_ms and o <= lo for t, o in marks):
        return False
    marks[:] = [(t, o) for t, o in marks if not (since_ms >= t and lo <= o)] + [(since_ms, lo)]
    return True


def rewrite_began(rewriting: set, marks: dict, key: tuple, reused: tuple[int, int] | None, last: int,
                  ack_ts_us: int, in_order: bool) -> int | None:
    """One acknowledgement of offsets up to ``last`` by writer incarnation ``key`` = (writer, inc,
    topic ID, partition), ``reused`` what :func:`reused_by_rewrite` made of it: where it begins a
    rewrite (:func:`begins_rewrite`) of an in-order writer, its time in ms (the writer's clock),
    kept in ``marks[(topic ID, partition)]`` (:func:`add_rewrite_mark`); else None. The checker and
    the audit's book both take each acknowledgement through here, so they mark alike."""
    begins = begins_rewrite(rewriting, key, reused, last)
    if reused is None or not (begins and in_order and ack_ts_us > 0):
        return None
    since = ack_ts_us // 1000
    add_rewrite_mark(marks.setdefault(key[2:], []), since, reused[0])
    return since


def acks_in_order(cls: WriteClass) -> bool:
    """Whether a writer's acknowledgements come in its records' offset order on each partition, so
    one going backwards shows a rewrite: not a writer without idempotence, whose retried batch may
    land behind a later one (its class says so; an unknown class is taken as in order, on both
    sides alike)."""
    return cls.order.reason != NOT_IDEMPOTENT
