"""What runs inside a rank and imports torch: the harness, measurement, failures, the model, warm
and forked pools. Importing this package imports nothing."""
