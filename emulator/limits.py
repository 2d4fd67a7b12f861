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
# The slowest arrival rate (and replay speed) a knob takes: one request in about 11.6 days, so a run
# of MAX_DURATION_S sees 2.6 on average (a bench uses it for "bursts only"). Below it a rate means
# no request at all, and at 1e-310 the clock's arithmetic overflows to infinity (issue 25).
MIN_RATE_PER_S = 1e-6

# Clusters: instances per cluster (virtual) and requests per decode batch.
MAX_INSTANCES = 4_096
MAX_DECODE_BATCH = 4_096
MAX_SEED = 2**32 - 1
MAX_CACHE_MIB = 64 * 1024 * 1024.0  # 64 TiB of prefix cache per cluster
MAX_SPEED_FACTOR = 1_000.0
MAX_GPUS = 64  # GPU indices a cluster's `devices` may list (0..MAX_GPUS - 1): beyond any one machine

# Inputs read from files and sockets.
MAX_SCENARIO_BYTES = 1 << 20  # a scenario file (the paper's case study is 4 KiB)
MAX_NESTING = 32  # YAML / JSON depth of a scenario, an override value or a control message
MAX_CONTROL_BYTES = 4_096  # one MQTT control message

# The live gateway's worker port: a connection must prove its hello (emulator/wire/auth.py) within
# the timeout, in a line of at most MAX_HELLO_BYTES; at most MAX_PENDING_HANDSHAKES connections
# may be unproven at once (a run has at most a few dozen workers, each answering in milliseconds).
HANDSHAKE_TIMEOUT_S = 5.0
MAX_HELLO_BYTES = 4_096
MAX_PENDING_HANDSHAKES = 16
# A live run with `rate_per_s: auto` times a few prefills and decode steps on its workers at start
# (emulator/live/calibration.py): at most this many lengths, tokens each and decode steps, which
# keeps the calibration of the `small` preset under a few seconds on one core.
MAX_CALIBRATION_LENGTHS = 4
MAX_CALIBRATION_TOKENS = 8_192
MAX_CALIBRATION_STEPS = 16

# Scenario files (the emulator/scenario package). YAML is composed into at most
# MAX_YAML_NODES nodes (aliases counted once per use), which keeps parsing a file under the size
# cap below ~20 MiB and 1 s; an integer literal has at most MAX_INT_DIGITS digits.
MAX_YAML_NODES = 10_000
MAX_INT_DIGITS = 30
MAX_TEXT_CHARS = 4_096  # a description
MAX_TIMELINE_EVENTS = 1_000  # each event revalidates the scenario once
MAX_RATE_CHANGES = 1_000
MAX_PROFILE_POINTS = 64  # entries of a profile table
MAX_DEVICES = 16  # devices a profile names
MAX_KV_MIB = float(1 << 20)  # KV cache of one request: 1 TiB
MAX_STEP_S = 3_600.0  # one prefill, or one decode step (the profile's decode_step_ms / 1000)
# A profile's `host` (the machine every worker of a live run shares): its cores, and the slowdown
# table indexed by busy workers, each factor in (0, MAX_SLOWDOWN]. A profile file a scenario names
# (`model.profile_file`) is a few KiB; MAX_PROFILE_FILE_BYTES bounds it before it is read.
MAX_HOST_CORES = 4_096
MAX_BUSY_WORKERS = 1_024
MAX_SLOWDOWN = 1_000.0
# A host's loss_rate_factor (scenario/parts.HostSpec): outside, not the stack's effect on TCP but a broken run
MIN_LOSS_RATE_FACTOR, MAX_LOSS_RATE_FACTOR = 0.1, 10.0
# A host's compute_factor (scenario/parts.HostSpec) and any reading against a profile's reference
# (live/speed_reference): outside, not drift but another machine or a broken probe
MIN_COMPUTE_FACTOR, MAX_COMPUTE_FACTOR = 0.2, 5.0
MAX_PROFILE_FILE_BYTES = 256 << 10
MIN_INTERVAL_S = 0.1  # the scheduler's loops: fewer than 10 decisions per (simulated) second
MIN_SPEED_FACTOR = 1 / MAX_SPEED_FACTOR
MAX_CV = 100.0  # gamma arrivals' coefficient of variation
MAX_LOG_MU = 100.0  # log-normal lengths: |mu| and sigma, as emulator/workload/lengths.py checks
MAX_LOG_SIGMA = 20.0
MAX_TRACE_SCALE = 1e6  # trace time_scale and length_scale lie in [1 / this, this]
MAX_PREFIXES = 1_000_000  # synthetic shared prefixes
MAX_SHARED_BLOCKS = 100_000
MAX_EXPECT = 1e18  # |min| and |max| of an `expect:` bound (kv_bytes_total of 2 M requests fits)

# Live runs on this machine: at most LIVE_WORKERS_PER_CORE workers per core, and each worker
# (a torch process with its model) reserves LIVE_WORKER_BYTES of the machine's memory, of which
# LIVE_MEMORY_SHARE may be used.
LIVE_WORKERS_PER_CORE = 4
LIVE_WORKER_BYTES = 1 << 30
LIVE_MEMORY_SHARE = 0.75

# A decode worker's KV receiver (emulator/transport/receiver.py). Connections: in total, and from
# one peer host (every prefill worker of a namespace shares its address; 64 workers x 4 connections).
# The total is also kept under half the process's descriptor limit, so accept never meets EMFILE
# from KV connections alone. Partial requests may hold at most MAX_KV_PARTIAL_BYTES, one peer at
# most KV_PEER_SHARE of it; bytes are counted as they arrive, never as a header claims them.
MAX_KV_CONNECTIONS = 512
MAX_KV_CONNECTIONS_PER_PEER = 256
# Connections that have not yet proven their HELLO with the run's secret (issue 25) have their own
# pool: they never count against the limits above, and when it is full the oldest of them is closed
# to make room, so idle or unproven sockets, however many, cannot keep a sender from its challenge.
MAX_KV_PENDING_HANDSHAKES = 128
MAX_KV_PARTIAL_BYTES = 1 << 30
KV_PEER_SHARE = 0.5

# Sweeps (emulator/sweep): points per sweep (levels x seeds x engines, after sampling), axes, the
# levels of one axis, replicate seeds, fixed overrides, and Ray workers started locally. 10,000
# virtual points of a short scenario run in well under an hour on a 16-core machine.
MAX_SWEEP_POINTS = 10_000
MAX_SWEEP_AXES = 16
MAX_AXIS_VALUES = 1_000
MAX_SWEEP_SEEDS = 100
MAX_SWEEP_SETS = 100
MAX_SWEEP_WORKERS = 1_024

# Files read back from a run or sweep folder (emulator/telemetry/run_files.py), each kind capped before
# it is read. summary.json is 1.5 KiB for a small run and nests 4 levels (sweep.json about 6); its meta
# lists (decisions, knob changes) grow with a run but stay megabytes. report.html is 4.6 MiB (plotly.js
# inlined) plus its charts. requests.parquet takes ~130 bytes a request (~150 uncompressed), so
# MAX_REQUESTS rows are ~260 MiB; the caps leave 4x. Logs are never read whole: only their tail.
MAX_RUN_JSON_BYTES = 64 << 20
MAX_RUN_JSON_DEPTH = 64
MAX_REPORT_BYTES = 64 << 20
MAX_LOG_TAIL_BYTES = 64 << 10
MAX_PARQUET_BYTES = 1 << 30
MAX_PARQUET_DATA_BYTES = 4 << 30  # uncompressed, as the file's footer states it, checked before decoding
MAX_PARQUET_ROWS = 16_000_000  # requests (<= MAX_REQUESTS) or timeseries samples
MAX_PARQUET_COLUMNS = 1_024
