"""The watch job's query listener: Spark's progress as its JSON, turned into the runtime's clock."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from monitor.watch.main import _Freshness, _ProgressAsJson

STAMP = "2026-11-29T14:05:00.250Z"
AT = datetime(2026, 11, 29, 14, 5, 0, 250000, tzinfo=timezone.utc).timestamp()


class Runtime:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_progress(self, caught_up_trigger_start=None, durations_ms=None) -> None:
        self.calls.append((caught_up_trigger_start, durations_ms))


class JProgress:
    def __init__(self, doc: dict) -> None:
        self.doc = doc

    def json(self) -> str:
        return json.dumps(self.doc)


class JEvent:  # what Py4J hands the listener: Java objects whose fields are methods
    def __init__(self, doc: dict | None = None, timestamp: str = STAMP) -> None:
        self._doc, self._timestamp = doc, timestamp

    def progress(self) -> JProgress:
        return JProgress(self._doc)

    def timestamp(self) -> str:
        return self._timestamp


def _source(end: dict, latest: dict | None) -> dict:
    return {"description": "KafkaV2[Subscribe[t]]", "startOffset": end, "endOffset": end, "latestOffset": latest,
            "numInputRows": 3}


def _progress(*sources: dict) -> dict:  # (the fields Spark's StreamingQueryProgress.json has that this reads)
    return {"timestamp": STAMP, "batchId": 7, "durationMs": {"addBatch": 900, "triggerExecution": 1500},
            "sources": list(sources)}


def _deliver(doc: dict) -> Runtime:
    runtime = Runtime()
    _ProgressAsJson(_Freshness(runtime)).onQueryProgress(JEvent(doc))
    return runtime


def test_a_trigger_that_read_all_there_was_marks_its_start_and_reports_its_durations():
    rt = _deliver(_progress(_source({"t": {"0": 5}}, {"t": {"0": 5}}), _source({"l": {"1": 2}}, {"l": {"1": 2}})))
    assert rt.calls == [(AT, {"addBatch": 900, "triggerExecution": 1500})]


def test_a_trigger_behind_any_source_marks_no_start_but_still_reports_its_durations():
    behind = _source({"t": {"0": 5}}, {"t": {"0": 9}})
    rt = _deliver(_progress(_source({"l": {"1": 2}}, {"l": {"1": 2}}), behind))
    assert rt.calls == [(None, {"addBatch": 900, "triggerExecution": 1500})]
    unknown = _source({"t": {"0": 5}}, None)  # a source that did not say where the log ends
    assert _deliver(_progress(unknown)).calls == [(None, {"addBatch": 900, "triggerExecution": 1500})]


def test_an_idle_trigger_marks_its_time():
    runtime = Runtime()
    _ProgressAsJson(_Freshness(runtime)).onQueryIdle(JEvent(timestamp=STAMP))
    assert runtime.calls == [(AT, None)]


def test_pyspark_s_own_event_gives_the_same_answer():
    doc = _progress(_source({"t": {"0": 5}}, {"t": {"0": 5}}))

    class Event:
        class progress:  # noqa: N801 (PySpark's attribute)
            json = json.dumps(doc)

    runtime = Runtime()
    _Freshness(runtime).onQueryProgress(Event())
    assert runtime.calls == _deliver(doc).calls
