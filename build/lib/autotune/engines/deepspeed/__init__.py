"""DeepSpeed: its engine, exports, rank worker and users' commands."""
