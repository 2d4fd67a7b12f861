"""Upper bounds on every number and size that enters from outside (scenario files, `--set`, control
messages, trace rows, sockets). One table, so the schema, the parsers and the README's Safety
section quote the same figures. Each bound is chosen so that a run inside it finishes on a 2-core,
24 GiB machine; nothing here is a default, only a ceiling.
"""

from __future__ import annotations

# Tokens: the longest prompt a scenario, trace row or threshold may name (1 Mi tokens, beyond every
# model the paper considers; block hashing of such a prompt takes milliseconds).
MAX_TOKENS = 1_048_576
MAX_OUTPUT_TOKENS = 65_536

# Time: a scenario's arrivals last at most 30 days of (simulated) time; timeline events and
# scheduler intervals fall inside that.
MAX_DURATION_S = 30 * 24 * 3600.0
MAX_INTERVAL_S = 24 * 3600.0

# Load: requests per run and per second. 2 M requests simulate in under a minute at the virtual
# engine's measured ~50k requests/s.
MAX_REQUESTS = 2_000_000
MAX_RATE_PER_S = 100_000.0

# Clusters: instances per cluster (virtual) and requests per decode batch.
MAX_INSTANCES = 4_096
MAX_DECODE_BATCH = 4_096
MAX_SEED = 2**32 - 1
MAX_CACHE_MIB = 64 * 1024 * 1024.0  # 64 TiB of prefix cache per cluster
MAX_SPEED_FACTOR = 1_000.0

# Inputs read from files and sockets.
MAX_SCENARIO_BYTES = 1 << 20  # a scenario file (the paper's case study is 4 KiB)
MAX_NESTING = 32  # YAML / JSON depth of a scenario, an override value or a control message
MAX_CONTROL_BYTES = 4_096  # one MQTT control message

# The live gateway's worker port: a connection must prove its hello (emulator/live/auth.py) within
# the timeout, in a line of at most MAX_HELLO_BYTES; at most MAX_PENDING_HANDSHAKES connections
# may be unproven at once (a run has at most a few dozen workers, each answering in milliseconds).
HANDSHAKE_TIMEOUT_S = 5.0
MAX_HELLO_BYTES = 4_096
MAX_PENDING_HANDSHAKES = 16
