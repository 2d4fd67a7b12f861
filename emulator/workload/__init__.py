"""Workloads: arrivals, length distributions, trace readers and token synthesis; no sockets."""
