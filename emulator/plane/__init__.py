"""A run's control plane from its scenario, the same for every engine: the throughput model's inputs
(inputs.py: profile tables, workload lengths, the link, in the code's units) and the control plane
built on them (control_plane.py: router, prefix-cache index, scheduler, starting threshold and
split). The optimizer's command is emulator.analytic, above this package."""

from emulator.plane.control_plane import ControlPlane, make_control_plane

__all__ = ["ControlPlane", "make_control_plane"]
