"""PyTorch-native: its engine, exports, rank worker and users' commands (torchtitan, the
autotune.step helper)."""
