"""The node check's verdict: which node is well outside its peers."""

from __future__ import annotations

from autotune.nodes.judge import LinkReading, NodeCheck, NodeReading, judge, per_node


def _nodes(*compute: float, memory: float = 10.0) -> list[NodeReading]:
    return [NodeReading(f"n{i}", c, memory) for i, c in enumerate(compute, start=1)]


def test_of_two_nodes_the_throttled_one_is_named_by_what_is_slow() -> None:
    check = judge(_nodes(0.10, 0.42))
    assert list(check.slow) == ["n1"] and check.slow["n1"] == "compute 0.24x its peers'"
    assert check.healthy == ("n2",)


def test_nodes_within_the_checks_own_spread_are_all_healthy() -> None:
    check = judge(_nodes(1.0, 0.93, 0.88, 1.04, 0.97, 0.81))
    assert check.slow == {} and len(check.healthy) == 6
    assert check.line() == "node check: 6 nodes, none outside its peers"


def test_half_the_nodes_slow_does_not_move_the_yardstick() -> None:
    check = judge(_nodes(1.0, 0.5, 1.02, 0.49, 0.98, 0.5, 1.01, 0.52))
    assert sorted(check.slow) == ["n2", "n4", "n6", "n8"]


def test_memory_bandwidth_alone_names_a_node() -> None:
    readings = _nodes(1.0, 1.0, 1.0)
    readings[2] = NodeReading("n3", 1.0, 4.0)
    assert judge(readings).slow == {"n3": "memory bandwidth 0.40x its peers'"}


def test_a_node_is_read_by_its_slowest_device() -> None:
    rows = [
        {"node": "a", "compute_tflops": 900.0, "memory_gbps": 2000.0},
        {"node": "a", "compute_tflops": 300.0, "memory_gbps": 2100.0},
        {"node": "b", "compute_tflops": 880.0, "memory_gbps": 1900.0},
    ]
    assert per_node(rows) == (NodeReading("a", 300.0, 2000.0), NodeReading("b", 880.0, 1900.0))
    assert list(judge(per_node(rows)).slow) == ["a"]


def test_a_slow_link_is_put_on_the_node_its_slow_links_share() -> None:
    nodes = _nodes(1.0, 1.0, 1.0, 1.0)
    ring = [("n1", "n2", 20.0), ("n2", "n3", 5.0), ("n3", "n4", 5.0), ("n4", "n1", 21.0)]
    links = [LinkReading((a, b), g) for a, b, g in ring]
    assert list(judge(nodes, links).slow) == ["n3"]
    one_bad = [LinkReading((a, b), 20.0 if b != "n3" else 4.0) for a, b, _ in ring]
    assert sorted(judge(nodes, one_bad).slow) == ["n2", "n3"]


def test_the_check_survives_the_study_record() -> None:
    check = judge(_nodes(0.1, 0.4), [LinkReading(("n1", "n2"), 3.0)])
    assert NodeCheck.from_dict(check.as_dict()) == check
    assert check.line() == "node check: 2 nodes; kept out of trials: n1 compute 0.25x its peers'"
