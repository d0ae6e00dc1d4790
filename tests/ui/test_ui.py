"""The web UI at ``/`` in a real browser (Debian's headless chromium through Selenium) against a
real broker, with real clients: rstream publishes, subscribes with filters and stores offsets;
proton holds an AMQP connection. Every wait is WebDriverWait on a condition of the page.

``UI_SCREENSHOT=<path>`` saves the page of the filter test there (docs/ui.md's picture); else
it goes to the test's temp dir."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from typing import Any, Callable

import pytest
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.http.api import call
from tests.ui.browser import chromium

rstream = pytest.importorskip("rstream")
selenium = pytest.importorskip("selenium")
from rstream import (AMQPMessage, Consumer, ConsumerOffsetSpecification,  # noqa: E402
                     FilterConfiguration, OffsetType, Producer, SuperStreamProducer)
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TIMEOUT = 30
POLL_MS = 300  # the page's poll interval in these tests (?interval=)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("ui") / "data", extra_args=["--fsync", "never"])
    b.start()
    yield b
    b.close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = chromium(tmp_path_factory.mktemp("chromium"))
    yield d
    d.quit()


@pytest.fixture(scope="module")
def aio():
    """An event loop in a thread: clients that must stay connected while the page looks."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro) -> Any:
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, TIMEOUT), loop).result()
    yield run
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def name() -> str:
    return f"ui-{uuid.uuid4().hex[:8]}"


def producer(broker: BrokerProcess, **kw) -> Producer:
    return Producer(broker.host, broker.stream_port, username="guest", password="guest", **kw)


def consumer(broker: BrokerProcess) -> Consumer:
    return Consumer(broker.host, broker.stream_port, username="guest", password="guest")


async def publish(broker: BrokerProcess, stream: str, messages: list[AMQPMessage],
                  **kw: Any) -> None:
    """Each message as its own chunk (send_wait), confirmed."""
    async with producer(broker, **kw) as p:
        await p.create_stream(stream, exists_ok=True)
        for m in messages:
            await p.send_wait(stream, m)


def until(driver, condition: Callable[[Any], Any], what: str) -> Any:
    return WebDriverWait(driver, TIMEOUT, poll_frequency=0.05).until(
        condition, f"timed out waiting for {what}")


def text(driver, css: str) -> str | None:
    """The text of the first element ``css`` selects, read in one step (the page redraws its
    rows at each poll: an element found in one call may be gone in the next)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null", css)


def attr(driver, css: str, name: str) -> str | None:
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null",
        css, name)


def login(driver, broker: BrokerProcess, user: str = "guest", password: str = "guest") -> None:
    driver.get(f"{broker.management_url}/?interval={POLL_MS}")
    until(driver, lambda d: d.find_element(By.ID, "login").is_displayed(), "the login form")
    driver.find_element(By.ID, "user").send_keys(user)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.ID, "login-button").click()


def logged_in(driver, broker: BrokerProcess) -> None:
    driver.execute_script("sessionStorage.clear()")
    login(driver, broker)
    until(driver, lambda d: d.find_element(By.ID, "main").is_displayed(), "the main page")
    assert not driver.find_element(By.ID, "login").is_displayed()


def row(stream: str) -> str:
    return f'#streams tr[data-stream="{stream}"]'


def test_a_stream_its_count_and_rate_sparkline_update_without_reload(broker, driver, aio):
    stream = name()
    aio(publish(broker, stream, [AMQPMessage(body=b"m%d" % i) for i in range(10)]))
    logged_in(driver, broker)
    until(driver, lambda d: text(d, f"{row(stream)} td.messages") == "10", "10 messages listed")
    assert text(driver, f"{row(stream)} td.segments") == "1"
    assert text(driver, f"{row(stream)} td.size").endswith("B")
    spark = f"{row(stream)} td.rate svg.spark polyline"
    # the rate is 0 once no more arrive: its sparkline is then flat at the bottom
    until(driver, lambda d: text(d, f"{row(stream)} td.rate .value") == "0.0/s", "a rate of 0")
    flat = attr(driver, spark, "points")
    driver.execute_script("window.notReloaded = true")

    aio(publish(broker, stream, [AMQPMessage(body=b"n%d" % i) for i in range(40)]))
    until(driver, lambda d: text(d, f"{row(stream)} td.messages") == "50", "50 messages listed")

    def risen(d) -> bool:
        points = attr(d, spark, "points").split()
        return any(float(p.split(",")[1]) < 20 for p in points)  # above the flat line (y=22)
    until(driver, risen, "the rate sparkline to rise")
    assert attr(driver, spark, "points") != flat
    assert driver.execute_script("return window.notReloaded") is True


def test_a_filtered_consumer_shows_its_filter_and_what_it_saves(broker, driver, aio, tmp_path):
    stream = name()

    async def colour_of(m: AMQPMessage) -> str:
        return m.application_properties["colour"]
    messages = [AMQPMessage(body=f"{c}{i}".encode(), application_properties={"colour": c, "n": i})
                for i, c in enumerate(["red"] * 12 + ["blue"] * 4 + ["red"] * 12)]
    aio(publish(broker, stream, messages, filter_value_extractor=colour_of))

    got: list[bytes] = []
    c = consumer(broker)

    async def subscribe() -> None:
        await c.start()
        await c.subscribe(stream, lambda m, ctx: got.append(m.body),
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                          filter_input=FilterConfiguration(["blue"], predicate=lambda m: True),
                          properties={"sql-filter": "n >= 14"})
    aio(subscribe())
    try:
        logged_in(driver, broker)
        consumer_row = f'#consumers tr[data-stream="{stream}"]'
        until(driver, lambda d: text(d, f"{consumer_row} td.filter code.values") == "blue",
              "the consumer's stage-1 value")
        assert text(driver, f"{consumer_row} td.filter code.sql") == "n >= 14"
        # what the broker counted, as the API gives it, is what the page shows
        api = next(x for x in call(broker, "GET", "/api/consumers").json
                   if x["queue"]["name"] == stream)
        saved = api["filtering"]
        assert api["filter"] == {"values": ["blue"], "match_unfiltered": False,
                                 "sql": "n >= 14", "properties": {}}
        assert saved["chunks_skipped"] == 24 and saved["chunks_read"] == 4
        assert saved["messages_sent"] == 2 and 0 < saved["bytes_sent"] < saved["bytes_read"]
        savings = f"{consumer_row} span.savings"
        assert attr(driver, savings, "data-chunks-skipped") == "24"
        assert attr(driver, savings, "data-bytes-read") == str(saved["bytes_read"])
        assert attr(driver, savings, "data-bytes-sent") == str(saved["bytes_sent"])
        assert "24 of 28 chunks skipped (86%)" in text(driver, savings)
        until(driver, lambda d: attr(d, f"{consumer_row} td.lag svg.spark polyline", "points"),
              "the lag sparkline")
        # more of both colours while the page looks: the rates and the savings move
        aio(publish(broker, stream, messages, filter_value_extractor=colour_of))
        until(driver, lambda d: attr(d, savings, "data-chunks-skipped") == "48",
              "the skipped chunks counted live")
        shot = os.environ.get("UI_SCREENSHOT") or str(tmp_path / "ui.png")
        driver.save_screenshot(shot)
        print(f"screenshot: {shot}")
    finally:
        aio(c.close())


def test_closing_a_connection_from_the_page_closes_it(broker, driver):
    before = {c["name"] for c in call(broker, "GET", "/api/connections").json}
    conn = BlockingConnection(broker.url, timeout=TIMEOUT, user="guest", password="guest")
    try:
        stream = name()
        call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True})
        receiver = conn.create_receiver(f"/queues/{stream}")
        names = {c["name"] for c in call(broker, "GET", "/api/connections").json} - before
        assert len(names) == 1
        (conn_name,) = names
        logged_in(driver, broker)
        button = f'#connections tr[data-connection="{conn_name}"] button.close'
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, button), "the connection listed")
        # the broker's Open and Attach went out, the client's came in: both counts above 0
        row = f'#connections tr[data-connection="{conn_name}"]'
        for cell in ("received", "sent"):
            counted = driver.find_element(By.CSS_SELECTOR, f"{row} td.{cell}")
            assert int(counted.get_attribute("data-bytes")) > 0, cell
        driver.find_element(By.CSS_SELECTOR, button).click()
        until(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, button),
              "the connection gone from the page")
        with pytest.raises(Exception) as closed:
            receiver.receive(timeout=TIMEOUT)
        assert "connection:forced" in str(closed.value) or "Closed via management" in str(closed.value)
        assert conn_name not in {c["name"] for c in call(broker, "GET", "/api/connections").json}
    finally:
        try:
            conn.close()
        except Exception:
            pass


def test_resetting_a_stored_offset_from_the_page_changes_query_offset(broker, driver, aio):
    stream, reader = name(), "reader-" + uuid.uuid4().hex[:6]
    aio(publish(broker, stream, [AMQPMessage(body=b"m%d" % i) for i in range(30)]))

    async def store_and_query(offset: int | None) -> int:
        c = consumer(broker)
        await c.start()
        try:
            if offset is not None:
                await c.store_offset(stream, reader, offset)
            return await c.query_offset(stream, reader)
        finally:
            await c.close()
    until(driver, lambda d: aio(store_and_query(25)) == 25, "the offset stored")
    logged_in(driver, broker)
    offset_row = f'#offsets tr[data-offset="{stream}/{reader}"]'
    until(driver, lambda d: text(d, f"{offset_row} td.offset") == "25", "the stored offset listed")
    # the lag counts from the committed end (which the tracking record itself moved)
    def committed() -> int:
        return call(broker, "GET", f"/api/queues/%2F/{stream}").json["committed_offset"]
    until(driver, lambda d: text(d, f"{offset_row} td.lag") == str(committed() - 25),
          "the lag listed")
    field = driver.find_element(By.CSS_SELECTOR, f"{offset_row} input.reset-to")
    field.clear()
    field.send_keys("7")
    driver.find_element(By.CSS_SELECTOR, f"{offset_row} button.reset").click()
    until(driver, lambda d: text(d, f"{offset_row} td.offset") == "7", "the offset reset to 7")
    assert aio(store_and_query(None)) == 7
    # "first" (the field's default) stores the offset before the first one kept: 0
    driver.find_element(By.CSS_SELECTOR, f"{offset_row} input.reset-to").clear()
    driver.find_element(By.CSS_SELECTOR, f"{offset_row} input.reset-to").send_keys("first")
    driver.find_element(By.CSS_SELECTOR, f"{offset_row} button.reset").click()
    until(driver, lambda d: text(d, f"{offset_row} td.offset") == "0", "the offset reset to 0")
    assert aio(store_and_query(None)) == 0


def test_typing_in_a_reset_field_goes_on_across_polls(broker, driver, aio):
    """The page redraws its tables on every poll, moving each row's reset field into the new
    row: the field being typed in keeps the focus, so keys typed after a poll still reach it
    (they went to the page before, and a reset sent what was typed so far)."""
    stream, reader = name(), "typist-" + uuid.uuid4().hex[:6]
    aio(publish(broker, stream, [AMQPMessage(body=b"m")]))

    async def store() -> None:
        c = consumer(broker)
        await c.start()
        try:
            await c.store_offset(stream, reader, 0)
        finally:
            await c.close()
    aio(store())
    logged_in(driver, broker)
    field_css = f'#offsets tr[data-offset="{stream}/{reader}"] input.reset-to'
    field = until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, field_css), "the offset row")[0]
    field.clear()
    field.click()
    for key in "12":  # into whatever has the focus, each after a redraw
        polls = int(driver.find_element(By.ID, "main").get_attribute("data-polls") or 0)
        until(driver, lambda d: int(d.find_element(By.ID, "main").get_attribute("data-polls") or 0)
              > polls, "a poll")
        ActionChains(driver).send_keys(key).perform()
    assert driver.find_element(By.CSS_SELECTOR, field_css).get_attribute("value") == "12"


def test_a_wrong_password_shows_the_login_error(broker, driver):
    driver.get(broker.management_url + "/")
    driver.execute_script("sessionStorage.clear()")
    login(driver, broker, "guest", "not-the-password")
    until(driver, lambda d: d.find_element(By.ID, "login-error").text, "the login error")
    assert driver.find_element(By.ID, "login-error").text == "Login failed"
    assert not driver.find_element(By.ID, "main").is_displayed()
    assert driver.execute_script("return sessionStorage.length") == 0


def test_a_super_stream_made_by_a_client_is_listed_with_its_partitions(broker, driver, aio):
    super_stream = name()

    async def create() -> None:
        async with SuperStreamProducer(broker.host, broker.stream_port, username="guest",
                                       password="guest", super_stream=super_stream,
                                       routing_extractor=lambda m: "x") as p:
            await p.create_super_stream(super_stream, n_partitions=3)
    aio(create())
    logged_in(driver, broker)
    cell = f'#super-streams tr[data-super-stream="{super_stream}"] td.partitions'
    until(driver, lambda d: text(d, cell), "the super stream listed")
    assert text(driver, cell) == ", ".join(f"{i} → {super_stream}-{i}" for i in range(3))
    until(driver, lambda d: all(text(d, row(f"{super_stream}-{i}")) for i in range(3)),
          "its partitions listed as streams")


def test_the_node_is_listed_with_its_uptime(broker, driver):
    (node,) = call(broker, "GET", "/api/nodes").json
    logged_in(driver, broker)
    cell = f'#nodes tr[data-node="{node["name"]}"] td.name'
    until(driver, lambda d: text(d, cell) == node["name"], "the node listed")
