"""Benchmarks: scripts that print figures, each beside a peer measured in the same run."""
