"""The console: server-rendered HTML pages (no JavaScript needed, nothing from a CDN) over the same
views as the JSON API. Everything that comes from clients (topic, group, client ids, keys,
values, headers) goes through ``esc``. A new page is a function returning ``page(...)``, a route
in ROUTES and, for the navigation bar, an entry in NAV."""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any, Iterable
from urllib.parse import quote, urlencode

from kafkacompat.http import views
from kafkacompat.http.api import int_arg
from kafkacompat.http.routing import HttpContext, route
from kafkacompat.http.server import HttpError, Request, Response

NAV = [("Overview", "/"), ("Topics", "/topics"), ("Groups", "/groups"), ("Metrics", "/metrics")]

STYLE = """
:root{--fg:#1d2430;--muted:#687387;--line:#e3e7ee;--bg:#f6f8fb;--accent:#2457c5;--warn:#b5470b;--ok:#1d7a46}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}header{background:#141b26;color:#fff;padding:0 20px;display:flex;
align-items:center;gap:22px;height:46px}header b{font-size:15px;letter-spacing:.3px}header a{color:#c9d4e6;
text-decoration:none}header a.on,header a:hover{color:#fff}header .id{margin-left:auto;color:#8b97ab;font-size:12px}header .id a{color:#8b97ab}
main{padding:18px 20px;max-width:1400px}h1{font-size:19px;margin:4px 0 14px}h2{font-size:15px;margin:22px 0 8px}
a{color:var(--accent)}table{border-collapse:collapse;width:100%;background:#fff;border:1px solid var(--line)}
th,td{padding:5px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top;white-space:nowrap}
th{background:#eef1f6;font-weight:600;font-size:12px;color:#3b4658;text-transform:uppercase;letter-spacing:.3px}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tbody tr:hover{background:#f9fbfe}
.wrap,.hex{display:block;max-width:640px;white-space:pre-wrap;word-break:break-all;
font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}.hdr .wrap,.hdr .hex{display:inline}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:6px}.card{background:#fff;border:1px solid var(--line);
padding:10px 16px;min-width:140px}.card .v{font-size:22px;font-weight:600}.card .k{color:var(--muted);font-size:12px}
.muted{color:var(--muted)}.warn{color:var(--warn);font-weight:600}.ok{color:var(--ok)}.hex{color:#6b4fa3}
.pager{margin:10px 0;display:flex;gap:14px;align-items:center}form.inline{display:inline-flex;gap:6px;align-items:center}
input{font:inherit;padding:2px 6px}input[name=offset]{width:110px}code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def link(path: str, text: Any) -> str:
    return f'<a href="{esc(path)}">{esc(text)}</a>'


def topic_path(name: str) -> str:
    return "/topics/" + quote(name, safe="")


def group_path(group_id: str) -> str:
    return "/groups/" + quote(group_id, safe="")


REFRESH_SECONDS = 5


def page(app: "HttpContext", request: Request, title: str, body: str, *, active: str = "") -> Response:
    """The page in the console's frame; with ``?refresh=1`` the browser reloads it every
    REFRESH_SECONDS (a meta refresh: no JavaScript needed)."""
    metadata = app.services.metadata
    nav = "".join(f'<a href="{path}"{" class=on" if path == active else ""}>{name}</a>' for name, path in NAV)
    refreshing = request.arg("refresh") == "1"
    query = {key: values[-1] for key, values in request.query.items() if key != "refresh"}
    toggle_query = urlencode(query if refreshing else {**query, "refresh": "1"})
    toggle = (f'<a id=refresh href="{esc(request.path)}{"?" + esc(toggle_query) if toggle_query else ""}">'
              f'{"stop refreshing" if refreshing else f"refresh every {REFRESH_SECONDS} s"}</a>')
    meta = f"<meta http-equiv=refresh content={REFRESH_SECONDS}>" if refreshing else ""
    document = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{esc(title)} · kafkacompat</title>{meta}"
        f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{STYLE}</style></head><body>"
        f"<header><b>kafkacompat</b>{nav}<span class=id>{toggle} · broker {metadata.node_id} · cluster "
        f"{esc(metadata.cluster_id)}</span></header><main>{body}</main></body></html>"
    )
    return Response(200, document.encode(), "text/html; charset=utf-8")


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], numeric: Iterable[int] = (), *,
          table_id: str = "") -> str:
    numeric = set(numeric)
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{h}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{cell}</td>' for i, cell in enumerate(row)) + "</tr>"
        for row in rows
    )
    ident = f" id={table_id}" if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def number(value: Any) -> str:
    return "–" if value is None else f"{value:,}"


def size(value: int | None) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(value)


def duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def card(key: str, value: str, ident: str) -> str:
    return f'<div class=card id={ident}><div class=v>{value}</div><div class=k>{key}</div></div>'


# ---- pages ----------------------------------------------------------------------------------


def overview_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    info = views.overview(app.services)
    metrics = app.services.metrics
    rates, span = app.rates.rates(metrics)
    under = info["under_replicated_partitions"]
    cards = "<div class=cards>" + "".join([
        card("brokers", str(len(info["brokers"])), "brokers-count"),
        card("topics", str(info["topic_count"]), "topics-count"),
        card("partitions", str(info["partition_count"]), "partitions-count"),
        card("groups", str(info["group_count"]), "groups-count"),
        card("under-replicated", f'<span class={"warn" if under else "ok"}>{under}</span>', "under-replicated"),
        card(f"requests / s (last {duration(span)})", f"{sum(rates.values()):,.1f}", "request-rate"),
        card("uptime", duration(info["uptime_seconds"]), "uptime"),
    ]) + "</div>"
    broker_rows = [
        [str(b["id"]), esc(f'{b["host"]}:{b["port"]}'), esc(b["rack"] or "–"),
         "controller" if b["controller"] else "", "this broker" if b["this_broker"] else ""]
        for b in info["brokers"]
    ]
    request_rows = [
        [esc(name), number(stats.count), f"{rates.get(key, 0.0):,.1f}",
         f"{stats.seconds / stats.count * 1000:,.2f}" if stats.count else "–"]
        for key, name, stats in sorted(_named_requests(metrics), key=lambda item: -item[2].count)
    ]
    body = (
        f"<h1>Cluster <code>{esc(info['cluster_id'])}</code></h1>{cards}"
        f"<p class=muted>kafkacompat {esc(info['version'])} · controller: broker {info['controller_id']}</p>"
        f"<h2>Brokers</h2>{table(['Id', 'Address', 'Rack', '', ''], broker_rows, table_id='brokers')}"
        f"<h2>Requests</h2>"
        f"{table(['API', 'Requests', 'Per second', 'Mean ms'], request_rows, (1, 2, 3), table_id='requests')}"
    )
    return page(app, request, "Overview", body, active="/")


def _named_requests(metrics) -> list:
    from kafkacompat.wire.frame import api_name

    return [(key, api_name(key), stats) for key, stats in metrics.requests.items()]


def topics_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    show_internal = request.arg("internal") == "1"
    listed = [t for t in views.topics(app.services) if show_internal or not t["internal"]]
    rows = [
        [link(topic_path(t["name"]), t["name"]), number(t["partitions"]), number(t["replication_factor"]),
         number(t["messages"]), size(t["size_bytes"]),
         f'<span class=warn>{t["under_replicated"]}</span>' if t["under_replicated"] else "0"]
        for t in listed
    ]
    toggle = (link("/topics", "hide internal topics") if show_internal
              else link("/topics?internal=1", "show internal topics"))
    body = (f"<h1>Topics <span class=muted>({len(listed)})</span></h1><p>{toggle}</p>"
            + table(["Topic", "Partitions", "Replicas", "Messages", "Size", "Under-replicated"], rows,
                    (1, 2, 3, 4, 5), table_id="topics"))
    return page(app, request, "Topics", body, active="/topics")


def topic_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    name = params["name"]
    detail = views.topic_detail(app.services, name)
    if detail is None:
        raise HttpError(404, f"no topic {name!r}")
    rows = [
        [link(f"{topic_path(name)}/messages?partition={p['partition']}", p["partition"]), number(p["leader"]),
         esc(",".join(map(str, p["replicas"]))),
         (f'<span class=warn>{esc(",".join(map(str, p["isr"])))}</span>' if p["under_replicated"]
          else esc(",".join(map(str, p["isr"])))),
         number(p["log_start_offset"]), number(p["high_watermark"]), number(p["last_stable_offset"]),
         number(p["log_end_offset"]), size(p["size_bytes"]), number(p["segments"])]
        for p in detail["partition_details"]
    ]
    configs = table(["Key", "Value"], [[esc(k), esc(v)] for k, v in detail["configs"].items()], table_id="configs") \
        if detail["configs"] else "<p class=muted>All defaults.</p>"
    body = (
        f"<h1>Topic <code>{esc(name)}</code></h1>"
        f"<p class=muted>id {esc(detail['topic_id'])} · {detail['partitions']} partitions · replication factor "
        f"{detail['replication_factor']} · {number(detail['messages'])} messages · {size(detail['size_bytes'])}</p>"
        + table(["Partition", "Leader", "Replicas", "ISR", "Log start", "High watermark", "Last stable",
                 "Log end", "Size", "Segments"], rows, (0, 1, 4, 5, 6, 7, 8, 9), table_id="partitions")
        + f"<h2>Configs overridden</h2>{configs}"
    )
    return page(app, request, f"Topic {name}", body, active="/topics")


def messages_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    name = params["name"]
    topic = app.services.metadata.topic(name)
    if topic is None:
        raise HttpError(404, f"no topic {name!r}")
    partition = int_arg(request, "partition", 0, low=0)
    if partition >= topic.partitions:
        raise HttpError(404, f"topic {name!r} has partitions 0..{topic.partitions - 1}")
    offset = int_arg(request, "offset", None, low=0)
    limit = int_arg(request, "limit", 50, low=1)
    view = views.messages(app.services, name, partition, offset, limit)
    if view is None:
        raise HttpError(404, f"partition {name}-{partition} is not hosted on this broker; open its leader's console")
    base = f"{topic_path(name)}/messages"

    def page_link(target: int | None, text: str, ident: str) -> str:
        if target is None:
            return f"<span class=muted>{text}</span>"
        query = urlencode({"partition": partition, "offset": target, "limit": view["limit"]})
        return f'<a id={ident} href="{esc(base)}?{query}">{text}</a>'

    rows = [
        [str(r["offset"]), esc(_timestamp(r["timestamp"])), _preview(r["key"]), _preview(r["value"]),
         "".join(f"<div class=hdr>{esc(h['key'])}: {_preview(h['value'])}</div>" for h in r["headers"])]
        for r in view["records"]
    ]
    partitions = " ".join(
        f"<b>{i}</b>" if i == partition else link(f"{base}?partition={i}", i) for i in range(topic.partitions))
    form = (f'<form class=inline method=get action="{esc(base)}"><input type=hidden name=partition '
            f'value={partition}>offset <input name=offset value={view["offset"]}> '
            f'<input type=submit value=Go></form>')
    pager = (f"<div class=pager>{page_link(view['previous_offset'], '← older', 'older')}"
             f"{page_link(view['next_offset'], 'newer →', 'newer')}{form}"
             f"<span class=muted>log start {number(view['log_start_offset'])} · high watermark "
             f"{number(view['high_watermark'])}</span></div>")
    body = (
        f"<h1>{link(topic_path(name), name)} <span class=muted>/ partition {partition}</span></h1>"
        f"<p>Partitions: {partitions}</p>{pager}"
        + (table(["Offset", "Timestamp", "Key", "Value", "Headers"], rows, (0,), table_id="messages") if rows
           else "<p class=muted>No messages here.</p>")
    )
    return page(app, request, f"{name} messages", body, active="/topics")


def _timestamp(ms: int) -> str:
    if ms < 0:
        return "–"
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _preview(value: dict | None) -> str:
    if value is None:
        return "<span class=muted>null</span>"
    more = f' <span class=muted>… {value["size"]:,} bytes</span>' if value["truncated"] else ""
    if "text" in value:
        return f'<span class=wrap>{esc(value["text"])}</span>{more}'
    return f'<span class=hex>{esc(value["hex"])}</span>{more}'


def groups_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    listed = views.groups(app.services)
    rows = [
        [link(group_path(g["group_id"]), g["group_id"]), esc(g["state"]), esc(g["protocol_type"]),
         esc(g["protocol"]), number(g["members"]), number(g["partitions"]),
         f'<span class=warn>{number(g["lag"])}</span>' if g["lag"] else "0"]
        for g in listed
    ]
    body = (f"<h1>Consumer groups <span class=muted>({len(listed)})</span></h1>"
            + table(["Group", "State", "Type", "Protocol", "Members", "Partitions", "Lag"], rows, (4, 5, 6),
                    table_id="groups"))
    return page(app, request, "Groups", body, active="/groups")


def group_page(app: "HttpContext", request: Request, params: dict[str, str]) -> Response:
    group_id = params["group_id"]
    detail = views.group_detail(app.services, group_id)
    if detail is None:
        raise HttpError(404, f"no group {group_id!r}")
    if detail.get("coordinator_elsewhere"):
        body = (f"<h1>Group <code>{esc(group_id)}</code></h1><p>Broker {detail['coordinator']} coordinates this "
                f"group (it leads the group's __consumer_offsets partition); open that broker's console.</p>")
        return page(app, request, f"Group {group_id}", body, active="/groups")
    member_rows = [
        [esc(m["client_id"]), esc(m["client_host"]), f"<code>{esc(m['member_id'])}</code>",
         esc(m["group_instance_id"] or "–"), _assignment(m["assignment"])]
        for m in detail["members"]
    ]
    offset_rows = [
        [link(topic_path(o["topic"]), o["topic"]), str(o["partition"]), number(o["committed_offset"]),
         number(o["log_end_offset"]), f'<span class=warn>{number(o["lag"])}</span>' if o["lag"] else number(o["lag"])]
        for o in detail["offsets"]
    ]
    total_lag = sum(o["lag"] or 0 for o in detail["offsets"])
    body = (
        f"<h1>Group <code>{esc(group_id)}</code></h1>"
        f"<div class=cards>{card('state', esc(detail['state']), 'group-state')}"
        f"{card('protocol', esc(detail['protocol'] or '–'), 'group-protocol')}"
        f"{card('members', str(len(detail['members'])), 'group-members')}"
        f"{card('generation', str(detail['generation']), 'group-generation')}"
        f"{card('total lag', number(total_lag), 'group-lag')}</div>"
        f"<h2>Members</h2>"
        + (table(["Client id", "Host", "Member id", "Instance id", "Assignment"], member_rows, table_id="members")
           if member_rows else "<p class=muted>No members.</p>")
        + "<h2>Committed offsets</h2>"
        + (table(["Topic", "Partition", "Committed", "High watermark", "Lag"], offset_rows, (1, 2, 3, 4),
                 table_id="offsets") if offset_rows else "<p class=muted>No committed offsets.</p>")
    )
    return page(app, request, f"Group {group_id}", body, active="/groups")


def _assignment(assignment: dict[str, list[int]] | None) -> str:
    if not assignment:
        return "<span class=muted>–</span>"
    return "<br>".join(f"{esc(topic)}: {esc(','.join(map(str, sorted(parts))))}"
                       for topic, parts in sorted(assignment.items()))


ROUTES = [
    route("GET", "/", overview_page),
    route("GET", "/topics", topics_page),
    route("GET", "/topics/<name>", topic_page),
    route("GET", "/topics/<name>/messages", messages_page),
    route("GET", "/groups", groups_page),
    route("GET", "/groups/<group_id>", group_page),
]
