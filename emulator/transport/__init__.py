"""KV transport: chunk frames, reassembly, multi-connection TCP and congestion monitoring."""
