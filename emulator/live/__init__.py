"""The live engine: gateway, prefill and decode worker processes, and the launcher starting them."""
