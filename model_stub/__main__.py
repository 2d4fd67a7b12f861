"""`python -m model_stub {bench,kv} ...`: the model's benchmark and the KV calculator."""

from __future__ import annotations

import sys

USAGE = "usage: python -m model_stub {bench,kv} [options]   (add --help after a command for its options)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "bench":
        from model_stub import bench

        return bench.main(rest)
    if command == "kv":
        from model_stub import kv_calculator

        return kv_calculator.main(rest)
    print(f"model_stub: unknown command {command!r}; {USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
