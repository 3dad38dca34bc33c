"""Workloads below the runtimes: client operations and their types, the generators (stock
quotes, the high-rate publisher's burst, bulk data) and the brute-force oracle."""
