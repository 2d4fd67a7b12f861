"""KV calculator: growing KV bytes per token and fixed state bytes per request, as JSON.

Covers the real models in `real_models.py` and this project's small presets (`config.py`), so the
emulator's cost models and `python -m model_stub kv` report both the same way. No torch needed.
"""

from __future__ import annotations

import argparse
import json
import sys

from model_stub.config import PRESET_NAMES, SIZES, ModelConfig, get_preset
from model_stub.real_models import DTYPE_NAMES, REAL_MODELS, RealModelSpec

__all__ = ["REAL_MODELS", "RealModelSpec", "get_real_model", "kv_report", "main"]

_MIB = 1 << 20


def _valid_names() -> str:
    return ", ".join([*REAL_MODELS, *PRESET_NAMES])


def get_real_model(name: str) -> RealModelSpec:
    """The real model called `name`: a REAL_MODELS key or the model's full name, any case."""
    wanted = name.strip().lower()
    for key, spec in REAL_MODELS.items():
        if wanted in (key, spec.name.lower(), spec.hf_repo.lower()):
            return spec
    raise KeyError(f"model: unknown model {name!r}; choose one of {_valid_names()}")


def _sizes(tokens: int, kv_per_token: int, fixed: int) -> dict[str, int | float]:
    total = tokens * kv_per_token + fixed
    return {
        "kv_bytes_per_token": kv_per_token,
        "growing_bytes": tokens * kv_per_token,
        "fixed_bytes": fixed,
        "total_bytes": total,
        "total_mib": round(total / _MIB, 3),
    }


def _dtypes(
    kv: str, kv_bytes: int, state: str, state_bytes: int, conv: str, conv_bytes: int
) -> dict:
    return {
        "kv": kv, "kv_bytes": kv_bytes,
        "state": state, "state_bytes": state_bytes,
        "conv": conv, "conv_bytes": conv_bytes,
    }  # fmt: skip


def _real_report(spec: RealModelSpec, tokens: int) -> dict:
    def name(nbytes: int) -> str:
        return DTYPE_NAMES.get(nbytes, f"{nbytes}-byte")

    kv, state, conv = spec.kv_dtype_bytes, spec.state_dtype_bytes, spec.conv_dtype_bytes
    return {
        "model": spec.name,
        "tokens": tokens,
        "num_layers": spec.num_layers,
        "layer_counts": spec.layer_counts,
        **_sizes(tokens, spec.kv_bytes_per_token(), spec.fixed_bytes(tokens)),
        "dtype": _dtypes(name(kv), kv, name(state), state, name(conv), conv),
        "source": spec.source,
        "note": spec.note,
    }


def _preset_report(config: ModelConfig, tokens: int) -> dict:
    counts: dict[str, int] = {}
    for kind in config.layer_kinds:
        counts[kind.value] = counts.get(kind.value, 0) + 1
    # The presets keep every cache tensor (KV, recurrent and conv state) in the model dtype.
    dtype, nbytes = config.dtype, config.itemsize
    return {
        "model": f"{config.name} ({config.size})",
        "tokens": tokens,
        "num_layers": config.num_layers,
        "layer_counts": counts,
        **_sizes(tokens, config.kv_bytes_per_token(), config.fixed_bytes(tokens)),
        "dtype": _dtypes(dtype, nbytes, dtype, nbytes, dtype, nbytes),
        "source": f"model_stub.config preset {config.name!r} size {config.size!r}",
        "note": "this project's small model preset, not a real model",
    }


def kv_report(name: str, tokens: int, size: str | None = None) -> dict:
    """JSON-ready cache report for a real model or a project preset (`size`: presets only)."""
    if tokens < 0:
        raise ValueError(f"--tokens: {tokens} is negative; use 0 or more tokens")
    try:
        spec = get_real_model(name)
    except KeyError:
        preset = name.strip().lower()
        if preset not in PRESET_NAMES:
            raise
    else:
        if size is not None:
            raise ValueError(f"--size: {size!r} applies only to the presets, not to {spec.name}")
        return _real_report(spec, tokens)
    size = size or "small"
    if size not in SIZES:
        raise KeyError(f"--size: unknown size {size!r}; choose one of {', '.join(SIZES)}")
    return _preset_report(get_preset(preset, size), tokens)


class _UsageError(Exception):
    """Raised instead of argparse's usage dump, so bad input costs one line on stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def _make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m model_stub kv",
        description="Growing KV bytes per token and fixed state bytes per request, as JSON.",
    )
    parser.add_argument("model", nargs="?", help=f"one of: {_valid_names()}")
    parser.add_argument("--tokens", type=int, required=True, help="context length in tokens")
    parser.add_argument("--all", action="store_true", help="report every real model (a JSON list)")
    parser.add_argument("--size", choices=SIZES, help="preset size (presets only; default small)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`kv MODEL --tokens N [--all] [--size S]`: JSON on stdout (0), or one line on stderr (2)."""
    try:
        args = _make_parser().parse_args(argv)
        if args.all == bool(args.model):
            raise _UsageError("give either MODEL or --all")
        if args.all:
            out: object = [kv_report(key, args.tokens, args.size) for key in REAL_MODELS]
        else:
            out = kv_report(args.model, args.tokens, args.size)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except (_UsageError, KeyError, ValueError) as exc:
        print(f"kv: error: {exc.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
