"""Command line: ``kafkacompat serve`` (and, later, ``dev-cluster`` and ``dump-log``).

Each subcommand is one ``_add_<name>_command`` function that registers its arguments and the
function that runs it. Heavy modules (trio, the broker) are imported only inside the command that
needs them, so ``kafkacompat --help`` and configuration errors stay fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from kafkacompat import __version__
from kafkacompat.config import BrokerConfig, ConfigError, StartupError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CONFIG_ERROR_EXIT_STATUS = 2


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``kafkacompat`` and ``python -m kafkacompat``.

    Exits through SystemExit on errors (status 2 for usage and configuration errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run_command = getattr(args, "run_command", None)
    if run_command is None:
        parser.print_help()
        return
    run_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkacompat", description="A Kafka wire-protocol-compatible broker written in Python on Trio."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_serve_command(commands)
    _add_dev_cluster_command(commands)
    # Future commands plug in here, one function each: _add_dump_log_command.
    return parser


# -- serve ------------------------------------------------------------------------------------


def _add_serve_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="run a broker",
        description=(
            "Run one broker. Settings are read from a Kafka server.properties (--config), then "
            "--set key=value overrides, then the explicit flags below, each winning over the previous."
        ),
    )
    serve.add_argument("--config", type=Path, metavar="FILE", help="a Kafka server.properties file")
    serve.add_argument(
        "--set",
        dest="overrides",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a Kafka broker config key, e.g. --set num.partitions=3 (repeatable)",
    )
    serve.add_argument("--host", help="address to listen on (default: 0.0.0.0, or the host in listeners)")
    serve.add_argument("--port", type=int, help="port to listen on (default: 9092, or the port in listeners)")
    serve.add_argument(
        "--data-dir", type=Path, metavar="DIR", help="log directory (default: ./data, or log.dirs / log.dir)"
    )
    serve.add_argument("--broker-id", type=int, metavar="ID", help="broker id (default: 0, or broker.id)")
    serve.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="host name published to clients (default: advertised.listeners, else the listen host)",
    )
    serve.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="join a replicated cluster whose metadata lives in this ZooKeeper (zookeeper.connect); "
        "without it the broker runs alone",
    )
    serve.add_argument(
        "--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="logging level (default: INFO)"
    )
    serve.set_defaults(run_command=run_serve)


def parse_key_value(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def run_serve(args: argparse.Namespace) -> None:
    configure_logging(args.log_level)
    config = load_config_or_exit(args)
    from kafkacompat.broker import run_broker  # imported here: it pulls in trio and the whole broker
    from kafkacompat.controller.store import StoreError

    try:
        run_broker(config)
    except BaseException as exc:  # noqa: BLE001 - looking for our errors inside exception groups
        store_error = _find_exception(exc, StoreError)
        startup_error = _find_exception(exc, StartupError)
        if store_error is not None:
            print(f"kafkacompat: metadata store error: {store_error}", file=sys.stderr)
        elif startup_error is not None:
            print(f"kafkacompat: cannot start: {startup_error}", file=sys.stderr)
        else:
            raise
        raise SystemExit(1) from None


def _find_exception(exc: BaseException, kind: type) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` inside it (exception groups, causes)."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        stack.extend(getattr(current, "exceptions", ()))
        stack.extend((current.__cause__, current.__context__))
    return None


def load_config_or_exit(args: argparse.Namespace) -> BrokerConfig:
    """BrokerConfig from the serve arguments; a ConfigError ends the process with status 2."""
    overrides = dict(args.overrides)
    if getattr(args, "zookeeper", None):
        overrides["zookeeper.connect"] = args.zookeeper
    try:
        return BrokerConfig.load(
            args.config,
            overrides,
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            broker_id=args.broker_id,
            advertised_host=args.advertised_host,
        )
    except ConfigError as error:
        print(f"kafkacompat: configuration error: {error}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS) from None


# -- dev-cluster ------------------------------------------------------------------------------


def _add_dev_cluster_command(commands: argparse._SubParsersAction) -> None:
    dev = commands.add_parser(
        "dev-cluster",
        help="run N replicating brokers in one process (local testing)",
        description=(
            "Run N brokers on ports P..P+N-1 in one process, sharing an embedded metadata store, "
            "with real replication between them over loopback sockets. Prints the bootstrap string. "
            "Each broker keeps its data in DIR/broker-<id>; topics survive a restart."
        ),
    )
    dev.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default: 3)")
    dev.add_argument("--port", type=int, default=9092, metavar="P", help="first port (default: 9092)")
    dev.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    dev.add_argument("--data-dir", type=Path, default=Path("dev-cluster-data"), metavar="DIR",
                     help="data directory (default: ./dev-cluster-data)")
    dev.add_argument("--set", dest="overrides", type=parse_key_value, action="append", default=[],
                     metavar="KEY=VALUE", help="a broker config key for every broker (repeatable)")
    dev.add_argument(
        "--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="logging level (default: INFO)"
    )
    dev.set_defaults(run_command=run_dev_cluster)


def run_dev_cluster(args: argparse.Namespace) -> None:
    configure_logging(args.log_level)
    if args.brokers < 1:
        print("kafkacompat: --brokers must be at least 1", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS)
    try:  # fail early, before any broker starts, on a bad --set
        BrokerConfig.load(None, dict(args.overrides), port=args.port, data_dir=args.data_dir)
    except ConfigError as error:
        print(f"kafkacompat: configuration error: {error}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS) from None
    import signal

    import trio

    from kafkacompat.dev_cluster import InProcessCluster

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                cluster = InProcessCluster(nursery, args.data_dir, host=args.host, overrides=dict(args.overrides))
                for index in range(args.brokers):
                    await cluster.start_broker(index, args.port + index)
                print(f"dev-cluster: {args.brokers} broker(s) ready; bootstrap servers: {cluster.bootstrap()}",
                      flush=True)
                async for _ in signals:
                    break
                await cluster.stop_all()
                nursery.cancel_scope.cancel()

    trio.run(main)


def configure_logging(level: str) -> None:
    """Log records as 'time LEVEL logger: message' lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
