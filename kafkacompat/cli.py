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
from kafkacompat.config import BrokerConfig, ConfigError

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
    # Future commands plug in here, one function each: _add_dev_cluster_command, _add_dump_log_command.
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

    run_broker(config)


def load_config_or_exit(args: argparse.Namespace) -> BrokerConfig:
    """BrokerConfig from the serve arguments; a ConfigError ends the process with status 2."""
    try:
        return BrokerConfig.load(
            args.config,
            dict(args.overrides),
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            broker_id=args.broker_id,
            advertised_host=args.advertised_host,
        )
    except ConfigError as error:
        print(f"kafkacompat: configuration error: {error}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS) from None


def configure_logging(level: str) -> None:
    """Log records as 'time LEVEL logger: message' lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
