"""Tuning on a slice of the cluster (`--trial-nodes N`): slice trials and their proxies, how
the extrapolation misses with scale, the leaders confirmed at full size, which worker runs
each, and what trials cost in GPU-hours."""
