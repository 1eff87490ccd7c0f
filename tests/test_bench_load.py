"""The benchmark's load generator (bench/load.py) and its hot-path goals (bench/report.py): the
clients are dealt out among processes, every unit and error is counted, and a rate that
falls as clients grow is a missed goal."""

from __future__ import annotations

import os
import pickle
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bench.hotpath import Captured, RawSqlFloor
from bench.load import LoadGenerator
from bench.report import goals, hot_path_goals


@dataclass(frozen=True)
class Tagged:
    """A unit of work that says which client did it, in which process; ``failing`` clients
    raise."""

    failing: tuple[int, ...] = ()

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        time.sleep(0.01)
        if client in self.failing:
            raise RuntimeError("down")
        return {"client": float(client), "pid": float(os.getpid())}


@pytest.fixture(scope="module")
def load() -> Iterator[LoadGenerator]:
    with LoadGenerator(2) as generator:
        yield generator


def test_the_clients_are_dealt_out_among_the_processes(load: LoadGenerator) -> None:
    result = load.run(5, 1.0, Tagged())
    pids = dict(zip(result.parts["client"], result.parts["pid"], strict=True))
    assert sorted(pids) == [0, 1, 2, 3, 4]
    assert set(pids.values()) == set(load.pids) and os.getpid() not in load.pids
    assert pids[0] == pids[2] == pids[4] != pids[1] == pids[3]
    assert result.clients == 5 and result.errors == 0
    assert result.units == len(result.latencies) == len(result.parts["client"]) > 5
    assert 1.0 <= result.seconds < 10


def test_a_failing_unit_is_an_error_and_the_others_go_on(load: LoadGenerator) -> None:
    result = load.run(2, 0.5, Tagged(failing=(1,)))
    assert result.errors > 0 and result.units > 0
    assert set(result.parts["client"]) == {0.0}


def test_fewer_clients_than_processes_use_as_many_processes(load: LoadGenerator) -> None:
    result = load.run(1, 0.3, Tagged())
    assert result.clients == 1 and set(result.parts["client"]) == {0.0}
    assert len(set(result.parts["pid"])) == 1


class Unreadable:
    """Work a load generator process cannot unpickle."""

    def __init__(self) -> None:
        self.state = "pickled with it"

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        raise RuntimeError("cannot be read here")


@dataclass(frozen=True)
class Dying:
    """Work whose process dies at its first unit."""

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        os._exit(3)


@pytest.mark.parametrize(
    ("work", "error"), [(Unreadable(), RuntimeError), (Dying(), EOFError)], ids=["unread", "dies"]
)
def test_a_process_that_fails_or_dies_stops_the_load_instead_of_hanging(
    work: object, error: type[BaseException]
) -> None:
    generator = LoadGenerator(2)
    began = time.monotonic()
    with pytest.raises(error):
        generator.run(4, 0.5, work)  # type: ignore[arg-type]
    assert time.monotonic() - began < 30
    assert not any(process.is_alive() for process in generator.processes)


def test_the_raw_floors_connections_are_divided_among_the_processes() -> None:
    captured = Captured([], [], "key", uuid.uuid4(), 1, 2, False, True, [], [])
    floor = RawSqlFloor("postgres://x@127.0.0.1/x", captured, False, "raw", 5)
    parts = [floor.share(index, 2).connections for index in range(2)]
    assert parts == [3, 2]
    copy = pickle.loads(pickle.dumps(floor.share(1, 2)))  # noqa: S301 - bytes made here
    assert copy.connections == 2 and copy.dsn == floor.dsn
    assert all(copy._turns.acquire(blocking=False) for _ in range(2))
    assert copy._turns.acquire(blocking=False) is False


def _row(rate: float, web: float = 3.0, generator: float = 0.5) -> dict[str, object]:
    return {
        "calls_per_second": rate,
        "ratio_vs_raw_sql": 0.6,
        "p50_ms": 3.5,
        "cpu_ms_per_request": {"hot_path": {"web": web, "load_generator": generator}},
    }


def _met(by_clients: dict[str, dict[str, object]]) -> dict[str, bool]:
    return {row["goal"].split(" (")[0]: row["met"] for row in hot_path_goals(by_clients)}


def test_a_rate_that_holds_meets_its_goal_and_one_that_falls_does_not() -> None:
    holding = {"1": _row(90), "8": _row(200), "32": _row(230), "64": _row(210), "256": _row(225)}
    assert all(_met(holding).values())
    falling = {**holding, "128": _row(150)}
    met = _met(falling)
    assert met["tool calls/s holds from 8 to 256 clients"] is False
    assert [name for name, ok in met.items() if not ok] == [
        "tool calls/s holds from 8 to 256 clients"
    ]


def test_a_load_generator_dearer_than_the_server_misses_its_goal() -> None:
    by_clients = {"1": _row(90), "8": _row(200, web=1.0, generator=1.2)}
    failed = [row for row in hot_path_goals(by_clients) if not row["met"]]
    assert [row["goal"] for row in failed] == [
        "the load generator's CPU per request < the server's, at every level"
    ]
    assert "8: 1.2 vs 1.0 ms" in failed[0]["value"]


def _batch(per_batch: dict[str, float], per_call: dict[str, float], ratio: float) -> dict:
    return {
        "hot_path": {"by_clients": {}},
        "statements": {"calls": 3, "complete": 3},
        "batch": {
            "size": 8,
            "cpu_ms_per_batch": per_batch,
            "cpu_ms_per_call_alone": per_call,
            "server_cpu_batch_in_calls_alone": ratio,
        },
    }


def test_a_batch_dearer_than_three_calls_alone_misses_its_goal() -> None:
    alone = {"web": 2.8, "postgres": 0.5, "load_generator": 0.3}
    cheap = goals(_batch({"web": 7.0, "postgres": 2.0, "load_generator": 0.3}, alone, 2.73))
    dear = goals(_batch({"web": 10.0, "postgres": 2.5, "load_generator": 0.3}, alone, 3.79))
    name = "a batch of 8 calls < 3 calls alone (server CPU)"
    assert [(g["met"], g["value"]) for g in cheap if g["goal"] == name] == [
        (True, "2.73 calls alone (web + PostgreSQL: 9.0 ms a batch, 3.3 ms a call)")
    ]
    assert [g["met"] for g in dear if g["goal"] == name] == [False]
