"""Workload and cluster descriptions: frozen data, loaded from presets or YAML files."""

from autotune.specs.cluster import Cluster, DeviceKind, Link
from autotune.specs.loading import load_cluster, load_workload
from autotune.specs.workload import Workload

__all__ = ["Cluster", "DeviceKind", "Link", "Workload", "load_cluster", "load_workload"]
