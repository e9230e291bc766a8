"""The project's benchmarks: each a module run as `python -m benchmarks.<name>`, its report kept
in results/bench/ (docs/reference/benchmarks.md lists them with what each shows)."""
