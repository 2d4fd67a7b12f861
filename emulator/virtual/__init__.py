"""The virtual engine: a discrete-event simulation of a scenario on cost models (profiles, KV sizes,
a fluid link), driving the same control plane as the live engine. `engine.run_virtual` is its API.
"""
