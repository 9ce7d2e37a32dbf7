"""The JSON API under /v1: brokers, topics, groups (with members, offsets and lag), messages,
the metrics clients pushed (KIP-714), fault injection, and in ``dev-cluster`` broker stop/start and leader elections. Bad input is a
4xx with {"error": message}; nothing here can reach the Kafka listener."""

from __future__ import annotations

from typing import Any

from kafkacompat.faults import FaultSpecError
from kafkacompat.http import views
from kafkacompat.http.routing import HttpContext, json_body, json_response, route
from kafkacompat.http.server import HttpError, Request, Response
from kafkacompat.wire.errors import ErrorCode, KafkaError

PREFERRED_ELECTION = 0


def get_brokers(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    listed = views.brokers(app.services)
    if app.control is not None:
        known = {b["id"] for b in listed}
        for broker in listed:
            broker["running"] = app.control.running(broker["id"])
        listed += [{"id": broker_id, "running": False} for broker_id in app.control.broker_ids()
                   if broker_id not in known]
    return json_response(sorted(listed, key=lambda broker: broker["id"]))


def get_topics(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    return json_response(views.topics(app.services))


def get_topic(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    detail = views.topic_detail(app.services, params["name"])
    if detail is None:
        raise HttpError(404, f"no topic {params['name']!r}")
    return json_response(detail)


def get_messages(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    name = params["name"]
    topic = app.services.metadata.topic(name)
    if topic is None:
        raise HttpError(404, f"no topic {name!r}")
    partition = int_arg(request, "partition", 0, low=0)
    if partition >= topic.partitions:
        raise HttpError(404, f"topic {name!r} has partitions 0..{topic.partitions - 1}")
    offset = int_arg(request, "offset", None, low=0)
    limit = int_arg(request, "limit", 50, low=1)
    page = views.messages(app.services, name, partition, offset, limit)
    if page is None:
        raise HttpError(404, f"partition {name}-{partition} is not hosted on this broker; ask its leader's console")
    return json_response(page)


def get_groups(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    return json_response(views.groups(app.services))


def get_client_telemetry(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    return json_response(views.client_telemetry(app.services))


def get_group(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    detail = views.group_detail(app.services, params["group_id"])
    if detail is None:
        raise HttpError(404, f"no group {params['group_id']!r}")
    if detail.get("coordinator_elsewhere"):
        raise HttpError(421, f"broker {detail['coordinator']} coordinates group {params['group_id']!r}; "
                             f"ask its API")
    return json_response(detail)


# ---- faults ---------------------------------------------------------------------------------


def get_faults(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    return json_response([fault.to_json() for fault in app.services.faults.faults.values()])


def post_fault(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    from kafkacompat.handlers import REGISTRY

    spec = json_body(request)
    try:
        fault = app.services.faults.add(spec if spec is not None else {}, REGISTRY)
    except FaultSpecError as exc:
        raise HttpError(400, str(exc)) from None
    return json_response({"id": fault.id, **fault.to_json()}, 201)


def delete_faults(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    count = len(app.services.faults.faults)
    app.services.faults.clear()
    return json_response({"deleted": count})


def delete_fault(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    fault_id = parse_int(params["fault_id"], "fault id")
    if not app.services.faults.remove(fault_id):
        raise HttpError(404, f"no fault {fault_id}")
    return json_response({"deleted": 1})


# ---- dev-cluster control --------------------------------------------------------------------


def _control(app: "HttpContext", broker_id: str) -> tuple[Any, int]:
    if app.control is None:
        raise HttpError(404, "brokers can be stopped and started only in dev-cluster (and the kafka_cluster fixture)")
    number = parse_int(broker_id, "broker id")
    if number not in app.control.broker_ids():
        raise HttpError(404, f"no broker {number}; brokers: {app.control.broker_ids()}")
    return app.control, number


async def stop_broker(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    control, broker_id = _control(app, params["broker_id"])
    if not control.running(broker_id):
        raise HttpError(409, f"broker {broker_id} is stopped already")
    itself = broker_id == app.services.metadata.node_id  # this server stops with it: answer first
    await control.crash_broker(broker_id, wait=not itself)
    return json_response({"id": broker_id, "running": False}, 202 if itself else 200)


async def start_broker(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    control, broker_id = _control(app, params["broker_id"])
    if control.running(broker_id):
        raise HttpError(409, f"broker {broker_id} is running already")
    await control.restart_broker(broker_id)
    return json_response({"id": broker_id, "running": True})


async def elect_leaders(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    """Preferred leader election for the topic's partitions (or those in {"partitions": [..]})
    through the controller (ElectLeaders' path)."""
    name = params["name"]
    topic = app.services.metadata.topic(name)
    if topic is None:
        raise HttpError(404, f"no topic {name!r}")
    body = json_body(request) or {}
    if not isinstance(body, dict):
        raise HttpError(400, 'the body is {"partitions": [0, 1]} or empty for all partitions')
    indexes = body.get("partitions", list(range(topic.partitions)))
    if not isinstance(indexes, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                and 0 <= i < topic.partitions for i in indexes):
        raise HttpError(400, f"partitions must be a list of partition numbers 0..{topic.partitions - 1}")
    try:
        results = await app.services.admin.elect_leaders(PREFERRED_ELECTION, [(name, i) for i in indexes])
    except KafkaError as exc:
        raise HttpError(409, f"{ErrorCode(exc.code).name}: {exc.message}") from None
    return json_response([
        {"topic": topic_name, "partition": index, "error": ErrorCode(code).name, "message": message}
        for (topic_name, index), (code, message) in sorted(results.items())
    ])


# ---- arguments ------------------------------------------------------------------------------


def parse_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HttpError(400, f"{what} must be a number, got {text!r}") from None


def int_arg(request: Request, name: str, default: int | None, *, low: int) -> Any:
    text = request.arg(name)
    if text is None or text == "":
        return default
    value = parse_int(text, name)
    if value < low:
        raise HttpError(400, f"{name} must be at least {low}, got {value}")
    return value


ROUTES = [
    route("GET", "/v1/brokers", get_brokers),
    route("POST", "/v1/brokers/<broker_id>/stop", stop_broker),
    route("POST", "/v1/brokers/<broker_id>/start", start_broker),
    route("GET", "/v1/topics", get_topics),
    route("GET", "/v1/topics/<name>", get_topic),
    route("GET", "/v1/topics/<name>/messages", get_messages),
    route("POST", "/v1/topics/<name>/elect-leaders", elect_leaders),
    route("GET", "/v1/groups", get_groups),
    route("GET", "/v1/groups/<group_id>", get_group),
    route("GET", "/v1/client-telemetry", get_client_telemetry),
    route("GET", "/v1/faults", get_faults),
    route("POST", "/v1/faults", post_fault),
    route("DELETE", "/v1/faults", delete_faults),
    route("DELETE", "/v1/faults/<fault_id>", delete_fault),
]
