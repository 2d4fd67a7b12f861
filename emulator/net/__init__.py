"""Shaped cross-datacenter links: namespaces per datacenter joined by a netem, tun or proxy link."""
