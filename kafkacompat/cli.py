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
    _add_fault_command(commands)
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
    _add_http_arguments(serve, "the console, /metrics and the /v1 API (faults)")
    serve.set_defaults(run_command=run_serve)


DEFAULT_HTTP_PORT = 9644  # kafkacompat.http.DEFAULT_HTTP_PORT (not imported: it pulls in trio)


def _add_http_arguments(parser: argparse.ArgumentParser, what: str, *, per_broker: bool = False) -> None:
    port_help = (f"port of {what} (default: {DEFAULT_HTTP_PORT}; broker i of dev-cluster gets N+i)" if per_broker
                 else f"port of {what} (default: {DEFAULT_HTTP_PORT}; 0 picks a free one)")
    parser.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT, metavar="N", help=port_help)
    parser.add_argument("--http-host", default="127.0.0.1", metavar="HOST",
                        help="address of the HTTP listener (default: 127.0.0.1; it has no authentication)")
    parser.add_argument("--no-http", action="store_true", help="serve no HTTP at all (and count no metrics)")


def http_settings(args: argparse.Namespace, offset: int = 0):
    """The HttpSettings of these arguments (None with --no-http); ``offset``: dev-cluster's broker index."""
    if args.no_http:
        return None
    if not 0 <= args.http_port <= 65535 - offset:
        print(f"kafkacompat: --http-port must be a port number, got {args.http_port}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_STATUS)
    from kafkacompat.http import HttpSettings

    return HttpSettings(args.http_host, args.http_port + offset if args.http_port else 0)


def parse_key_value(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def run_serve(args: argparse.Namespace) -> None:
    configure_logging(args.log_level)
    config = load_config_or_exit(args)
    http = http_settings(args)
    from kafkacompat.broker import run_broker  # imported here: it pulls in trio and the whole broker
    from kafkacompat.controller.store import StoreError
    from kafkacompat.log.manager import AllLogDirsFailed

    try:
        run_broker(config, http)
    except BaseException as exc:  # noqa: BLE001 - looking for our errors inside exception groups
        store_error = _find_exception(exc, StoreError)
        startup_error = _find_exception(exc, StartupError)
        dirs_failed = _find_exception(exc, AllLogDirsFailed)
        if dirs_failed is not None:
            print(f"kafkacompat: stopped: {dirs_failed}", file=sys.stderr)
        elif store_error is not None:
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
    _add_http_arguments(dev, "each broker's console, /metrics and /v1 API", per_broker=True)
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
    http = [http_settings(args, index) for index in range(args.brokers)]
    import signal

    import trio

    from kafkacompat.dev_cluster import InProcessCluster

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                cluster = InProcessCluster(nursery, args.data_dir, host=args.host, overrides=dict(args.overrides))
                progress = Progress(f"dev-cluster: starting {args.brokers} broker(s)")
                for index in range(args.brokers):
                    progress.update(f"broker {index} of {args.brokers} on port {args.port + index}")
                    await cluster.start_broker(index, args.port + index, http=http[index])
                progress.done()
                print(f"dev-cluster: {args.brokers} broker(s) ready; bootstrap servers: {cluster.bootstrap()}",
                      flush=True)
                for broker in cluster.brokers.values():
                    await broker.http_ready.wait()  # after the Kafka listeners: HTTP never delays them
                if cluster.http_summary():
                    print(f"dev-cluster: consoles: {cluster.http_summary()}", flush=True)
                async for _ in signals:
                    break
                await cluster.stop_all()
                nursery.cancel_scope.cancel()

    trio.run(main)


# -- fault ------------------------------------------------------------------------------------


def _add_fault_command(commands: argparse._SubParsersAction) -> None:
    fault = commands.add_parser(
        "fault", help="inject faults into a running broker (its HTTP API)",
        description="Add, list and clear a running broker's injected faults through its HTTP API "
                    "(POST/GET/DELETE /v1/faults).")
    actions = fault.add_subparsers(title="actions", metavar="ACTION")
    add = actions.add_parser("add", help="add a fault: the next COUNT matching requests fail, wait or lose "
                                         "their connection")
    add.add_argument("--api", required=True, help="the Kafka API name (Produce, Fetch, ...) or api key")
    add.add_argument("--error", help="the error to answer with, e.g. NOT_LEADER_OR_FOLLOWER, or its code")
    add.add_argument("--count", type=int, default=1, help="how many matching requests (default: 1)")
    add.add_argument("--topic", help="only requests naming this topic")
    add.add_argument("--partition", type=int, help="only requests naming this partition (with --topic)")
    add.add_argument("--client-id", help="only requests from this client id")
    add.add_argument("--delay-ms", type=int, help="delay each matching request by this many milliseconds")
    add.add_argument("--close", action="store_true", help="close the matching request's connection")
    listing = actions.add_parser("list", help="list the faults and what is left of each")
    clear = actions.add_parser("clear", help="remove faults (all, or --id)")
    clear.add_argument("--id", type=int, help="remove only this fault")
    for action, run in ((add, run_fault_add), (listing, run_fault_list), (clear, run_fault_clear)):
        action.add_argument("--http", required=True, metavar="HOST:PORT", help="the broker's HTTP address")
        action.set_defaults(run_command=run)
    fault.set_defaults(run_command=lambda args: fault.print_help())


def run_fault_add(args: argparse.Namespace) -> None:
    spec: dict[str, object] = {"api": int(args.api) if args.api.isdigit() else args.api, "count": args.count}
    if args.error is not None:
        spec["error"] = int(args.error) if args.error.lstrip("-").isdigit() else args.error
    for key in ("topic", "partition", "client_id", "delay_ms"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    if args.close:
        spec["close"] = True
    result = _http_call(args.http, "POST", "/v1/faults", spec)
    print(f"fault {result['id']} added: {_describe_fault(result)}")


def run_fault_list(args: argparse.Namespace) -> None:
    faults = _http_call(args.http, "GET", "/v1/faults")
    if not faults:
        print("no faults")
    for fault in faults:
        print(f"{fault['id']}: {_describe_fault(fault)}")


def run_fault_clear(args: argparse.Namespace) -> None:
    path = f"/v1/faults/{args.id}" if args.id is not None else "/v1/faults"
    result = _http_call(args.http, "DELETE", path)
    print(f"{result['deleted']} fault(s) removed")


def _describe_fault(fault: dict) -> str:
    effects = [f"error {fault['error']}" if fault.get("error") else None,
               f"delay {fault['delay_ms']} ms" if fault.get("delay_ms") else None,
               "close the connection" if fault.get("close") else None]
    scope = "".join(f" {key} {fault[key]}" for key in ("topic", "partition", "client_id") if fault.get(key) is not None)
    return (f"{fault['api']}{scope}: {', '.join(e for e in effects if e)}; "
            f"{fault['remaining']} of {fault['count']} left")


def _http_call(address: str, method: str, path: str, body: object = None):
    import json
    import urllib.error
    import urllib.request

    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        print(f"kafkacompat: {method} {path} on {address} answered {exc.code}: {message}", file=sys.stderr)
        raise SystemExit(1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"kafkacompat: cannot reach the broker's HTTP API at {address}: {reason}", file=sys.stderr)
        raise SystemExit(1) from None


class Progress:
    """One line of progress on stderr, rewritten in place on a terminal (a line per step otherwise)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.tty = sys.stderr.isatty()

    def update(self, step: str) -> None:
        if self.tty:
            sys.stderr.write(f"\r\033[K{self.title}: {step}")
        else:
            sys.stderr.write(f"{self.title}: {step}\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def configure_logging(level: str) -> None:
    """Log records as 'time LEVEL logger: message' lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
