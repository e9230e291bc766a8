"""autotune: find the fastest way to run a training job on a cluster."""

__version__ = "0.1.0"
