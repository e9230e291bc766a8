"""Which nodes are well outside their peers, from the node check's readings. Pure.

Each node is read by its slowest device (one slow GPU holds back every step of a job that
spans it) and compared with its peers: the median of the nodes at or above the median, so
that half the nodes can be slow without moving the yardstick, and two nodes compare with the
faster. A node below `SLOW_BELOW` of that, in compute or memory bandwidth, is slow. Links
are judged the same way where there are at least three to compare; a slow link is put on
the node it shares with another slow link, or on both of its nodes. A trial that spans
nodes is judged the same way on each node's compute time in its profiled step, where the
slow node's excess is a material share of the step (`slow_in_trial`)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SLOW_BELOW = 0.6
"""A node (or link) below this share of its peers' reading is slow. Healthy nodes' readings
lie within about 10% of each other on a cluster, and within about 40% on this project's
two-node test cluster (two network namespaces sharing one host's 2 cores and memory); a
throttled GPU, a failing link or a noisy neighbour costs more. A slow reading is confirmed
by a second check before a node is kept out (`check.confirmed_check`)."""
MATERIAL_SHARE = 0.25
"""A node found slow within a trial holds its step back by its compute beyond its peers'; below
this share of the step, the trial's speed is still the config's (one profiled step of a small
model on a shared host can read 1.7x on a healthy node, and cost the step a tenth)."""
METRICS = {"compute_tflops": "compute", "memory_gbps": "memory bandwidth"}


@dataclass(frozen=True)
class NodeReading:
    node: str
    compute_tflops: float
    memory_gbps: float


@dataclass(frozen=True)
class LinkReading:
    nodes: tuple[str, str]
    gbps: float


@dataclass(frozen=True)
class NodeCheck:
    """The readings, and the nodes found slow, each with why."""

    nodes: tuple[NodeReading, ...]
    links: tuple[LinkReading, ...] = ()
    slow: Mapping[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> tuple[str, ...]:
        return tuple(r.node for r in self.nodes if r.node not in self.slow)

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": [vars(r) for r in self.nodes],
            "links": [{"nodes": list(r.nodes), "gbps": r.gbps} for r in self.links],
            "slow": dict(self.slow),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeCheck:
        return cls(
            nodes=tuple(NodeReading(**r) for r in data["nodes"]),
            links=tuple(LinkReading(tuple(r["nodes"]), r["gbps"]) for r in data["links"]),
            slow=dict(data["slow"]),
        )

    def line(self) -> str:
        """One line for the summary: what was checked and what was kept out."""
        checked = f"node check: {len(self.nodes)} nodes"
        if not self.slow:
            return f"{checked}, none outside its peers"
        named = "; ".join(f"{node} {why}" for node, why in self.slow.items())
        return f"{checked}; kept out of trials: {named}"


def per_node(rows: Iterable[Mapping[str, Any]]) -> tuple[NodeReading, ...]:
    """Each node by its slowest device (the worker's rows are one per rank)."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_node.setdefault(str(row["node"]), []).append(row)
    return tuple(
        NodeReading(
            node=node,
            compute_tflops=min(float(r["compute_tflops"]) for r in ranks),
            memory_gbps=min(float(r["memory_gbps"]) for r in ranks),
        )
        for node, ranks in sorted(by_node.items())
    )


def peers(values: Sequence[float]) -> float:
    """The yardstick: the median of the values at or above their median."""
    middle = statistics.median(values)
    return statistics.median([v for v in values if v >= middle])


def judge(nodes: Sequence[NodeReading], links: Sequence[LinkReading] = ()) -> NodeCheck:
    """The check with its slow nodes named."""
    slow: dict[str, str] = {}
    if len(nodes) >= 2:
        for metric, words in METRICS.items():
            values = [getattr(r, metric) for r in nodes]
            yardstick = peers(values)
            for reading, value in zip(nodes, values, strict=True):
                if yardstick > 0 and value < SLOW_BELOW * yardstick:
                    why = f"{words} {value / yardstick:.2f}x its peers'"
                    slow[reading.node] = (
                        f"{slow[reading.node]}, {why}" if reading.node in slow else why
                    )
    slow.update(_slow_links(links, slow))
    return NodeCheck(nodes=tuple(nodes), links=tuple(links), slow=slow)


def _slow_links(links: Sequence[LinkReading], known: Mapping[str, str]) -> dict[str, str]:
    if len(links) < 3:
        return {}
    yardstick = peers([link.gbps for link in links])
    bad = [link for link in links if link.gbps < SLOW_BELOW * yardstick]
    named: dict[str, str] = {}
    for link in bad:
        if any(node in known for node in link.nodes):
            continue  # a slow node explains its links
        shared = [n for n in link.nodes if sum(n in other.nodes for other in bad) > 1]
        for node in shared or link.nodes:
            named[node] = f"link {'-'.join(link.nodes)} {link.gbps / yardstick:.2f}x its peers'"
    return named


def slow_in_trial(compute_s: Mapping[str, float], step_s: float) -> dict[str, str]:
    """The nodes of one trial whose ranks took well longer than their peers' to compute its
    profiled step (time outside collectives, where the others wait for them): each node by
    its slowest rank, against the median of the faster half, as the check reads rates, and
    only where its excess is a material share of the step (`step_s`, the trial's step time).
    Only meaningful where every node does the same work (no pipeline stage split over nodes)."""
    if len(compute_s) < 2 or min(compute_s.values()) <= 0 or step_s <= 0:
        return {}
    yardstick_s = 1 / peers([1 / seconds for seconds in compute_s.values()])
    return {
        node: (
            f"compute {seconds / yardstick_s:.2f}x its peers' time in the profiled step, "
            f"{(seconds - yardstick_s) / step_s:.0%} of a step"
        )
        for node, seconds in compute_s.items()
        if yardstick_s < SLOW_BELOW * seconds and seconds - yardstick_s >= MATERIAL_SHARE * step_s
    }
