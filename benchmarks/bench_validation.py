"""Micro-benchmark of Produce's record-by-record validation (kafkacompat/wire/validation.py).

    python benchmarks/bench_validation.py [--records 2000] [--value-size 100] [--rounds 7] [--callgrind]

For each codec, one batch of --records records (no key, a --value-size value, as librdkafka's
bench producer sends them) is built with kafka-python and validated as the Produce handler does
(validate_client_batch: header checks, decompression, the record walk, the maxTimestamp check),
with the C accelerator and with the pure-Python walk. It prints, per codec and walk, the best of
--rounds timings: us per batch and ns per record for the whole validation, and for its parts
(decompression alone, the walk alone). Wall-clock figures move with the machine's load;
--callgrind also counts instructions (valgrind --tool=callgrind, load-independent): each
(codec, walk) runs in a child process under valgrind with k and 2k validations, and the
difference divided by k is the cost of one validation, interpreter start and imports cancelled.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kafkacompat.wire import validation  # noqa: E402
from kafkacompat.wire.records import read_header  # noqa: E402

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
WALKS = {"c": validation.scan_records, "python": validation.scan_records_py}


def build_batch(codec: int, records: int, value_size: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    now = int(time.time() * 1000)
    for i in range(records):
        value = (b"%08d" % i + b"v" * value_size)[:value_size]
        builder.append(i, timestamp=now + i // 100, key=None, value=value, headers=[])
    return bytes(builder.build())


def validate_once(buf: memoryview, walk) -> None:
    """What the Produce handler does for the batch (which it leaves unchanged: its maxTimestamp
    is right), header read included."""
    validation.scan_records = walk
    validation.validate_client_batch(buf, read_header(buf), "bench-0", log_append_time_topic=False)


def best_of(rounds: int, repeat: int, work) -> float:
    """Seconds per call, the best of ``rounds`` runs of ``repeat`` calls."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeat):
            work()
        best = min(best, (time.perf_counter() - started) / repeat)
    return best


def measure(codec: int, walk_name: str, batch: bytes, records: int, rounds: int) -> dict:
    walk = WALKS[walk_name]
    buf = memoryview(bytearray(batch))
    header = read_header(buf)
    section = validation.records_section(buf, header, "bench-0")
    repeat = 3 if walk_name == "python" else 200
    whole = best_of(rounds, repeat, lambda: validate_once(buf, walk))
    scan = best_of(rounds, repeat, lambda: walk(section, records))
    inflate = best_of(rounds, repeat, lambda: validation.records_section(memoryview(batch), header, "bench-0")) \
        if codec else 0.0
    return {"codec": CODECS[codec], "walk": walk_name, "batch_bytes": len(batch), "section_bytes": len(section),
            "us_per_batch": whole * 1e6, "ns_per_record": whole * 1e9 / records,
            "walk_ns_per_record": scan * 1e9 / records, "inflate_us": inflate * 1e6}


def child_main(codec: int, walk_name: str, records: int, value_size: int, iterations: int) -> None:
    buf = memoryview(bytearray(build_batch(codec, records, value_size)))
    walk = WALKS[walk_name]
    for _ in range(iterations):
        validate_once(buf, walk)


def callgrind_instructions(codec: int, walk_name: str, records: int, value_size: int, iterations: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out", sys.executable,
             str(Path(__file__).resolve()), "--child", str(codec), walk_name, str(records), str(value_size),
             str(iterations)],
            capture_output=True, text=True, timeout=3600, env=dict(os.environ, PYTHONHASHSEED="0"))
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not match:
        raise RuntimeError(f"valgrind failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(match.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        codec, walk_name, records, value_size, iterations = sys.argv[2:7]
        child_main(int(codec), walk_name, int(records), int(value_size), int(iterations))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="records per batch (default 2000)")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value (default 100)")
    parser.add_argument("--rounds", type=int, default=7, help="timing rounds, best taken (default 7)")
    parser.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd", help="comma-separated (default: all)")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions under valgrind")
    parser.add_argument("--callgrind-iterations", type=int, default=20,
                        help="k: validations in the smaller valgrind run (default 20; Python walk: k / 10)")
    args = parser.parse_args()
    if not validation.ACCELERATED:
        raise SystemExit("the C accelerator is not built: pip install -e . (needs gcc)")
    codecs = [code for code, name in CODECS.items() if name in args.codecs.split(",")]
    load = os.getloadavg()[0]
    print(f"# {args.records} records x {args.value_size} B values per batch, no keys; best of {args.rounds}; "
          f"load avg (1 min) {load:.2f}; Python {sys.version.split()[0]}")
    columns = "| codec  | walk   | batch B | records B | validate us/batch | ns/record | walk ns/record | inflate us |"
    if args.callgrind:
        columns += " instructions/batch | instr/record |"
    print(columns)
    print("|" + "|".join("-" * len(cell) for cell in columns.split("|")[1:-1]) + "|")
    for codec in codecs:
        batch = build_batch(codec, args.records, args.value_size)
        for walk_name in WALKS:
            row = measure(codec, walk_name, batch, args.records, args.rounds)
            line = (f"| {row['codec']:<6} | {walk_name:<6} | {row['batch_bytes']:>7} | {row['section_bytes']:>9} | "
                    f"{row['us_per_batch']:>17.1f} | {row['ns_per_record']:>9.1f} | "
                    f"{row['walk_ns_per_record']:>14.1f} | {row['inflate_us']:>10.1f} |")
            if args.callgrind:
                k = max(1, args.callgrind_iterations // (10 if walk_name == "python" else 1))
                small = callgrind_instructions(codec, walk_name, args.records, args.value_size, k)
                large = callgrind_instructions(codec, walk_name, args.records, args.value_size, 2 * k)
                per_batch = (large - small) / k
                line += f" {per_batch:>18,.0f} | {per_batch / args.records:>12,.0f} |"
            print(line, flush=True)


if __name__ == "__main__":
    main()
