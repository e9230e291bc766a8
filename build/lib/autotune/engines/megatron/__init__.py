"""Megatron-core and Megatron-LM: its engine, exports, rank worker and users' commands."""
