"""The console in a real headless browser (Debian's chromium through chromium-driver, driven by
selenium) against a broker process with a topic, a live consumer group with lag, and records
whose keys, values and headers carry markup: every page renders with the right numbers, the
links lead where they say, nothing from a client is interpreted as HTML, and the pages work
with JavaScript turned off.

Screenshots of the main pages go to the test's temporary dir, or to docs/ with
KAFKACOMPAT_SCREENSHOTS=docs (how docs/console-*.png were made)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from kafkacompat.testing.http import http_request
from kafkacompat.testing.process import BrokerProcess, free_port

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 40
COMMITTED = 25
GROUP = "invoicing"
CLIENT_ID = "invoice-worker<b>1</b>"
MARKUP = '<script>document.title="owned"</script><img src=x onerror=alert(1)>'
DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    http_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("console"), extra_args=["--http-port", str(http_port)]).start()
    broker.wait_for_output("HTTP console")
    consumer = _traffic(broker.bootstrap)
    yield broker, f"http://127.0.0.1:{http_port}"
    consumer.close()
    broker.kill()


def _traffic(bootstrap: str) -> confluent_kafka.Consumer:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = MARKUP.encode() if (partition, i) == (0, 0) else (
                bytes([0, 159, 146, 150, i]) if i % 10 == 9 else f'{{"order": {i}, "partition": {partition}}}'.encode())
            producer.produce(TOPIC, value=value, key=f"customer-{i % 7}".encode(), partition=partition,
                             headers=[("trace", f"t-{i}".encode()), ("<h1>", b"<i>header</i>")])
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": CLIENT_ID,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    received = 0
    deadline = time.monotonic() + 60
    while received < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received += 1
    consumer.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, p, COMMITTED) for p in range(PARTITIONS)],
                    asynchronous=False)
    return consumer


def _browser(javascript: bool) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860",
                     "--disable-gpu", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = _browser(javascript=True)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    if os.environ.get("KAFKACOMPAT_SCREENSHOTS") == "docs":
        return DOCS
    return tmp_path_factory.mktemp("screenshots")


def cells(browser, table_id: str) -> list[list[str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def card(browser, ident: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, f"#{ident} .v").text


def nav(browser, text: str) -> None:
    browser.find_element(By.CSS_SELECTOR, "header").find_element(By.LINK_TEXT, text).click()


def test_overview(console, browser, screenshots):
    broker, base = console
    browser.get(base + "/")
    assert browser.title == "Overview · kafkacompat"
    assert (card(browser, "brokers-count"), card(browser, "topics-count"), card(browser, "partitions-count"),
            card(browser, "groups-count"), card(browser, "under-replicated")) == ("1", "1", "3", "1", "0")
    assert cells(browser, "brokers") == [["0", f"127.0.0.1:{broker.port}", "–", "controller", "this broker"]]
    apis = {row[0] for row in cells(browser, "requests")}
    assert {"Produce", "Fetch", "JoinGroup", "OffsetCommit"} <= apis
    browser.save_screenshot(str(screenshots / "console-overview.png"))


def test_topics_topic_and_messages_pages_link_through(console, browser, screenshots):
    _, base = console
    browser.get(base + "/")
    nav(browser, "Topics")
    assert browser.current_url == base + "/topics"
    assert cells(browser, "topics")[0][:4] == [TOPIC, "3", "1", f"{PARTITIONS * PER_PARTITION:,}"]
    browser.find_element(By.LINK_TEXT, "show internal topics").click()
    assert "__consumer_offsets" in [row[0] for row in cells(browser, "topics")]

    browser.find_element(By.LINK_TEXT, TOPIC).click()
    assert browser.current_url == f"{base}/topics/{TOPIC}"
    rows = cells(browser, "partitions")
    assert [row[:8] for row in rows] == [
        [str(p), "0", "0", "0", "0", str(PER_PARTITION), str(PER_PARTITION), str(PER_PARTITION)]
        for p in range(PARTITIONS)]
    assert all(row[9] == "1" and row[8].endswith("KiB") for row in rows)
    browser.save_screenshot(str(screenshots / "console-topic.png"))

    browser.find_element(By.CSS_SELECTOR, "#partitions tbody tr:nth-child(2) a").click()
    assert browser.current_url == f"{base}/topics/{TOPIC}/messages?partition=1"
    newest = cells(browser, "messages")
    assert [row[0] for row in newest] == [str(o) for o in range(PER_PARTITION)]  # the newest 50 at most
    assert newest[0][2] == "customer-0" and newest[0][3] == '{"order": 0, "partition": 1}'
    assert newest[9][3] == "00 9f 92 96 09"  # not UTF-8: shown in hex
    assert "trace: t-0" in newest[0][4]


def test_message_paging_and_offset_form(console, browser, screenshots):
    _, base = console
    browser.get(f"{base}/topics/{TOPIC}/messages?partition=2&offset=5&limit=10")
    assert [row[0] for row in cells(browser, "messages")] == [str(o) for o in range(5, 15)]
    browser.find_element(By.ID, "newer").click()
    assert [row[0] for row in cells(browser, "messages")] == [str(o) for o in range(15, 25)]
    browser.find_element(By.ID, "older").click()
    browser.find_element(By.ID, "older").click()
    assert [row[0] for row in cells(browser, "messages")] == [str(o) for o in range(0, 10)]
    assert browser.find_elements(By.ID, "older") == []  # the log start: nothing older
    field = browser.find_element(By.NAME, "offset")
    field.clear()
    field.send_keys("33")
    browser.find_element(By.CSS_SELECTOR, "form.inline input[type=submit]").click()
    WebDriverWait(browser, 30).until(lambda driver: "offset=33" in driver.current_url)  # the form's page
    assert cells(browser, "messages")[0][0] == "33"
    browser.save_screenshot(str(screenshots / "console-messages.png"))


def test_groups_and_group_pages(console, browser, screenshots):
    _, base = console
    browser.get(base + "/")
    nav(browser, "Groups")
    lag = PARTITIONS * (PER_PARTITION - COMMITTED)
    assert cells(browser, "groups") == [[GROUP, "Stable", "consumer", "range", "1", "3", str(lag)]]
    browser.find_element(By.LINK_TEXT, GROUP).click()
    assert browser.current_url == f"{base}/groups/{GROUP}"
    assert (card(browser, "group-state"), card(browser, "group-protocol"), card(browser, "group-members"),
            card(browser, "group-lag")) == ("Stable", "range", "1", str(lag))
    [member] = cells(browser, "members")
    assert member[0] == CLIENT_ID and member[1].endswith("127.0.0.1") and member[4] == f"{TOPIC}: 0,1,2"
    assert cells(browser, "offsets") == [
        [TOPIC, str(p), str(COMMITTED), str(PER_PARTITION), str(PER_PARTITION - COMMITTED)] for p in range(PARTITIONS)]
    browser.save_screenshot(str(screenshots / "console-group.png"))
    browser.find_element(By.CSS_SELECTOR, "#offsets").find_element(By.LINK_TEXT, TOPIC).click()
    assert browser.current_url == f"{base}/topics/{TOPIC}"


def test_client_data_is_never_markup(console, browser):
    _, base = console
    browser.get(f"{base}/topics/{TOPIC}/messages?partition=0&offset=0&limit=1")
    [row] = cells(browser, "messages")
    assert row[3] == MARKUP and "<h1>: <i>header</i>" in row[4]
    assert browser.title != "owned"
    assert browser.find_elements(By.CSS_SELECTOR, "#messages img, #messages script, #messages h1, #messages i") == []
    browser.get(f"{base}/groups/{GROUP}")
    assert browser.find_elements(By.CSS_SELECTOR, "#members b") == []


def test_pages_work_without_javascript(console):
    _, base = console
    driver = _browser(javascript=False)
    try:
        for path in ("/", "/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/messages?partition=0", "/groups",
                     f"/groups/{GROUP}"):
            driver.get(base + path)
            assert driver.find_elements(By.CSS_SELECTOR, "main table"), path
        driver.get(f"{base}/topics/{TOPIC}/messages?partition=0&offset=3&limit=2")
        driver.find_element(By.ID, "newer").click()
        assert [row[0] for row in cells(driver, "messages")] == ["5", "6"]
        driver.find_element(By.ID, "refresh").click()  # a meta refresh: reloads without JavaScript
        assert driver.current_url == f"{base}/topics/{TOPIC}/messages?partition=0&offset=5&limit=2&refresh=1"
    finally:
        driver.quit()
    # What the refreshing page holds, read over HTTP (a browser would be reloading it meanwhile).
    refreshing = http_request("GET", f"{base}/topics/{TOPIC}/messages?partition=0&offset=5&limit=2&refresh=1").text
    assert "<meta http-equiv=refresh content=5>" in refreshing
    assert f'<a id=refresh href="/topics/{TOPIC}/messages?partition=0&amp;offset=5&amp;limit=2">stop refreshing</a>' \
        in refreshing
    assert "http-equiv=refresh" not in http_request("GET", f"{base}/topics/{TOPIC}").text

