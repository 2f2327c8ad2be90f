"""The console in a real browser: headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium) against a live gateway on LevelDB, filled by real Kafka clients: a
producer, a consumer group with a live member, an open Kafka transaction and an open TMS
transaction. One browser session walks /ui, /ui/groups and a topic's message browser
(by offset, time and message id, partition selector, hex view) and checks the values the
clients wrote. With TMSGATE_SCREENSHOTS=1 it saves the pages to docs/img/console-*.png
(the pictures of docs/console.md). tests/test_console.py covers the pages over plain HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_harness import GatewayThread
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from tmsgate.gateway.http.console import ConsoleHandlers

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
    "chromium-driver; scripts/test.sh installs them as root)",
)
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "img"
TOPIC, GROUP, TXN_ID = "orders", "billing", "checkout-tx"


class Clock:
    """The store's clock: the wall clock, moved forward by the test (lag samples a minute
    apart without waiting a minute)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


def order(i: int) -> bytes:
    doc = {"order": i, "city": "Zürich", "amount": f"{5 + i}€"}
    return json.dumps(doc, ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    clock = Clock()
    store = tmp_path_factory.mktemp("console-browser") / "store"
    gw = GatewayThread(f"leveldb://{store}", http=True, clock=clock).start()
    clients: list[Any] = []
    try:
        yield _fill(gw, clock, clients)
    finally:
        for client in reversed(clients):
            client.close()
        gw.stop()


def _fill(gw: GatewayThread, clock: Clock, clients: list[Any]) -> dict[str, Any]:
    http = httpx.Client(base_url=gw.http_url, timeout=30)
    clients.append(http)
    put = http.put(f"/v1/namespaces/default/topics/{TOPIC}", json={"kafka.partitions": 2})
    assert put.status_code == 200, put.text
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    for i in range(10):
        producer.send(TOPIC, key=b"customer-%d" % (i % 3), value=order(i), partition=0,
                      headers=[("source", b"web"), ("trace-id", b"%04x" % (7 * i))])  # fmt: skip
    producer.send(TOPIC, key=b"blob", value=b"\x00\x01\xfe\xff", partition=1)
    producer.send(TOPIC, key=b"blob", value=b"\x89PNG\r\n", partition=1)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(TOPIC, bootstrap_servers=gw.bootstrap, group_id=GROUP,
                             client_id="billing-worker", enable_auto_commit=False)  # fmt: skip
    clients.append(consumer)
    while len(consumer.assignment()) < 2:  # a live member: the group is Stable
        consumer.poll(500)
    console = gw.services.http_server.app.state.areas[ConsoleHandlers]  # type: ignore[union-attr]
    for committed in (0, 1, 2, 2, 4):  # lag samples a minute apart: 10, 9, 8, 8, 6
        consumer.commit(
            {
                TopicPartition(TOPIC, 0): OffsetAndMetadata(committed, "", -1),
                TopicPartition(TOPIC, 1): OffsetAndMetadata(0, "", -1),
            }
        )
        gw.run(console.sampler.sample())
        clock.offset_ms += 60_000

    txn = KafkaProducer(bootstrap_servers=gw.bootstrap, transactional_id=TXN_ID)
    clients.append(txn)
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(TOPIC, value=b"not committed yet", partition=0).get(30)
    tms = http.post("/v1/transactions", json={"timeoutSeconds": 600}).json()["writePointer"]
    kafka_wp = gw.call(lambda: gw.broker.txns.describe(TXN_ID).write_pointer)
    return {"url": gw.http_url, "tms_wp": tms, "kafka_wp": kafka_wp}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_console_in_a_browser(gateway: dict[str, Any], browser: Any) -> None:
    url = gateway["url"]
    kafka_wp = gateway["kafka_wp"]

    # --- /ui: topics, partitions, offsets; the open transactions --------------------------
    browser.get(f"{url}/ui")
    row = _cells(browser, f'tr[data-topic="{TOPIC}"][data-partition="0"]')
    assert row[-7:-2] == ["0", "0", "10", "10", "10"]  # partition, earliest, next, LSO, count
    assert _cells(browser, f'tr[data-topic="{TOPIC}"][data-partition="1"]')[:3] == ["1", "0", "2"]
    kafka = browser.find_element(By.ID, "kafka-transactions").text
    assert TXN_ID in kafka and str(kafka_wp) in kafka and "Ongoing" in kafka
    assert f"{TOPIC}-0" in kafka
    tms = browser.find_element(By.ID, "tms-transactions").text
    assert str(gateway["tms_wp"]) in tms and "(HTTP / SDK)" in tms
    assert str(kafka_wp) in tms and TXN_ID in tms  # the Kafka one is a TMS transaction too
    _screenshot(browser, "topics")

    # --- /ui/groups: state, member, lag per partition, the chart ----------------------------
    browser.get(f"{url}/ui/groups")
    group = browser.find_element(By.CSS_SELECTOR, f'section[data-group="{GROUP}"]')
    assert "Stable" in group.text and "billing-worker" in group.text
    assert group.find_element(By.CLASS_NAME, "total-lag").text == "8"
    lags = {
        tr.get_attribute("data-partition"): tr.find_element(By.CLASS_NAME, "lag").text
        for tr in group.find_elements(By.CSS_SELECTOR, "table.offsets tr[data-topic]")
    }
    assert lags == {"0": "6", "1": "2"}
    lines = group.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
    assert len(lines) == 2
    # the five samples (and the sampler's own, every 5 s, if one came meanwhile)
    assert len(lines[0].get_attribute("points").split()) >= 5
    legend = [t.text for t in group.find_elements(By.CSS_SELECTOR, "svg.chart text.legend")]
    assert legend == [f"{TOPIC}-0 6", f"{TOPIC}-1 2"]
    _screenshot(browser, "groups")

    # --- /ui/topics/orders: the last messages, keys, values, headers ----------------------------
    browser.get(f"{url}/ui/topics/{TOPIC}")
    assert _offsets(browser) == list(range(10))  # not the open transaction's record
    first = browser.find_element(By.CSS_SELECTOR, 'tr.message[data-offset="0"]')
    assert first.find_element(By.CLASS_NAME, "key").text == "customer-0"
    assert first.find_element(By.CLASS_NAME, "value").text == order(0).decode()
    assert "trace-id: 0000" in first.find_element(By.CLASS_NAME, "headers").text
    assert TXN_ID in browser.find_element(By.ID, "kafka-transactions").text
    _screenshot(browser, "topic")

    # by offset
    _browse(browser, offset="7")
    assert _offsets(browser) == [7, 8, 9]
    # by message id
    message_id = _message(browser, 8).find_element(By.CLASS_NAME, "id").text
    _browse(browser, id=message_id)
    assert _offsets(browser) == [8, 9]
    # by time: from a message's publish time, that message and those after it
    published = _message(browser, 9).find_elements(By.TAG_NAME, "td")[4].text
    _browse(browser, time=published)
    assert 9 in _offsets(browser) and _offsets(browser)[-1] == 9
    # partition 1, whose values are binary: hex, and "not UTF-8" when text is asked for
    _browse(browser, partition="1")
    assert _offsets(browser) == [0, 1]
    value = _message(browser, 0).find_element(By.CLASS_NAME, "value")
    assert value.text == "00 01 fe ff"
    _follow(browser, "text")
    assert "(not UTF-8)" in _message(browser, 0).find_element(By.CLASS_NAME, "value").text
    _follow(browser, "hex")
    assert _message(browser, 1).find_element(By.CLASS_NAME, "key").text == "62 6c 6f 62"
    _screenshot(browser, "topic-hex")

    # a bad offset: the browser gets a page that says what was wrong
    browser.get(f"{url}/ui/topics/{TOPIC}?offset=99")
    assert "offset 99" in browser.find_element(By.ID, "error-message").text.lower()


def _cells(browser: Any, selector: str) -> list[str]:
    row = browser.find_element(By.CSS_SELECTOR, selector)
    return [td.text for td in row.find_elements(By.TAG_NAME, "td")]


def _offsets(browser: Any) -> list[int]:
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.message")
    return [int(r.get_attribute("data-offset")) for r in rows]


def _message(browser: Any, offset: int) -> Any:
    return browser.find_element(By.CSS_SELECTOR, f'tr.message[data-offset="{offset}"]')


def _browse(browser: Any, partition: str | None = None, **start: str) -> None:
    """Fill in the browse form as a person would, and submit it."""
    form = browser.find_element(By.CSS_SELECTOR, "form.browse")
    for name in ("offset", "time", "id"):
        field = form.find_element(By.NAME, name)
        field.clear()
        if name in start:
            field.send_keys(start[name])
    if partition is not None:
        Select(form.find_element(By.NAME, "partition")).select_by_value(partition)
    old = browser.find_element(By.TAG_NAME, "main")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait_gone(old)


def _follow(browser: Any, link_text: str) -> None:
    old = browser.find_element(By.TAG_NAME, "main")
    browser.find_element(By.LINK_TEXT, link_text).click()
    _wait_gone(old)


def _wait_gone(element: Any) -> None:
    """Until the page that held ``element`` is replaced and the new one has loaded."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def gone(_: Any) -> bool:
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # Asked while the old document is being replaced, chromedriver may answer
            # this instead of "stale element" (seen with Chromium 156).
            if "does not belong to the document" in str(exc):
                return True
            raise

    browser = element.parent
    WebDriverWait(browser, 30).until(gone)
    WebDriverWait(browser, 30).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )


def _screenshot(browser: Any, name: str) -> None:
    """docs/img/console-<name>.png, the whole page, only when TMSGATE_SCREENSHOTS=1."""
    if os.environ.get("TMSGATE_SCREENSHOTS") != "1":
        return
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(max(height + 120, 600), 2400))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"console-{name}.png"))
    browser.set_window_size(1400, 1000)
