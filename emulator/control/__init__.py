"""The pure control plane shared by the live, virtual and analytic engines: no I/O, time passed in."""
