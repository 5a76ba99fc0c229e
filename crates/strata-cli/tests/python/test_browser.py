"""The chat page (`GET /`) in headless Chromium, driven by selenium.

Needs Debian's `chromium` and `chromium-driver` (/usr/bin/chromium,
/usr/bin/chromedriver) and the `selenium` package; see conftest.py for the
environment. The page's reply text is recorded inside the page by a
MutationObserver, so every streamed length is seen however fast the tokens
come.
"""

import shutil
import tempfile
import time

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from conftest import env_or_skip, http, ready

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# Records every text the assistant messages' reply shows, with the time it
# showed it, in window.__seen; and whether its `streaming` mark was on.
RECORD = """
window.__seen = [];
const log = document.getElementById('messages');
new MutationObserver((records) => {
  for (const r of records) {
    const msg = r.target.closest && r.target.closest('.msg.assistant');
    if (!msg || !r.target.classList.contains('text')) continue;
    for (const n of r.addedNodes) {
      if (n.nodeType === Node.TEXT_NODE) {
        window.__seen.push({t: performance.now(), text: n.data,
                            streaming: msg.classList.contains('streaming')});
      }
    }
  }
}).observe(log, {childList: true, subtree: true});
"""


@pytest.fixture(scope="module")
def driver():
    profile = tempfile.mkdtemp(prefix="strata-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1000,800",
        f"--user-data-dir={profile}",
    ]:
        opts.add_argument(arg)
    # the driver's path given: selenium does not look for (or download) one
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_script_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(driver, base_url, model_id):
    """The page, loaded afresh, once it shows the model's name."""
    driver.get(base_url + "/")
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.ID, "model").text == model_id
    )
    assert driver.title
    return driver


def settings(d, **values):
    """Sets fields of the settings panel (opened first) by element id."""
    d.execute_script("document.getElementById('settings').open = true")
    for key, value in values.items():
        el = d.find_element(By.ID, key)
        el.clear()
        el.send_keys(str(value))


def busy(d):
    return d.execute_script("return document.body.dataset.busy") == "true"


def assistant_texts(d):
    return [e.text for e in d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .text")]


def send(d, text):
    box = d.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def test_page_streams_a_reply_token_by_token(page):
    d = page
    for label in ["input", "system", "temperature", "top_p", "max_tokens", "seed", "api_key"]:
        assert d.find_elements(By.CSS_SELECTOR, f"label[for={label}]"), f"no label for #{label}"
    settings(d, temperature=0, max_tokens=48)
    d.execute_script(RECORD)
    send(d, "Write a short story about a robot who learns to paint.")
    WebDriverWait(d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.user"))
    assert d.find_element(By.CSS_SELECTOR, ".msg.user .text").text.startswith("Write a short story")
    assert d.find_element(By.ID, "stop").is_enabled()
    assert not d.find_element(By.ID, "send").is_enabled()
    WebDriverWait(d, 120).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant").get_attribute("data-done")
        == "true"
    )
    seen = d.execute_script("return window.__seen")
    final = d.find_element(By.CSS_SELECTOR, ".msg.assistant .text").text
    assert final.strip(), "an empty reply"
    assert d.find_element(By.ID, "error").text == ""
    # (the last text may come in the same read as the end of the stream, and
    # so be recorded after the streaming mark went off)
    streamed = [s for s in seen if s["text"]]
    lengths = {len(s["text"]) for s in streamed if s["streaming"]}
    assert len(lengths) >= 2, f"the reply did not grow while streaming: {seen}"
    # each text shown is a prefix of the next, the last is the final reply
    texts = [s["text"] for s in streamed]
    for a, b in zip(texts, texts[1:]):
        assert b.startswith(a), (a, b)
    assert texts[-1].strip() == final.strip()
    assert streamed[-1]["t"] > streamed[0]["t"], "all tokens came at once"
    # done: the buttons are back, the meta line names the tokens
    assert not busy(d)
    assert d.find_element(By.ID, "send").is_enabled()
    assert not d.find_element(By.ID, "stop").is_enabled()
    assert d.find_element(By.ID, "regenerate").is_enabled()
    assert "tokens" in d.find_element(By.CSS_SELECTOR, ".msg.assistant .meta").text

    # a second turn keeps the history: two user and two assistant messages
    send(d, "Give it a name.")
    WebDriverWait(d, 120).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done=true]")) == 2
    )
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2
    assert assistant_texts(d)[0] == final

    # Regenerate: the last reply is replaced (greedy: by the same text), the first stays
    second = assistant_texts(d)[1]
    old = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1]
    d.find_element(By.ID, "regenerate").click()
    WebDriverWait(d, 10).until(EC.staleness_of(old))
    WebDriverWait(d, 120).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done=true]")) == 2
        and not busy(d)
    )
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2
    assert assistant_texts(d) == [final, second]


def metric(base_url, name):
    status, text = http("GET", base_url + "/metrics")
    assert status == 200, text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_stop_ends_the_stream(page, base_url):
    d = page
    settings(d, temperature=0, max_tokens=1000)
    generated = metric(base_url, "strata_generated_tokens_total")
    d.execute_script(RECORD)
    send(d, "Count from 1 to 500, one number per line.")
    # stop as soon as some of the reply has come
    WebDriverWait(d, 60, poll_frequency=0.02).until(
        lambda d: d.execute_script("return window.__seen.some(s => s.text.length > 0)")
    )
    d.find_element(By.ID, "stop").click()
    WebDriverWait(d, 10).until(lambda d: not busy(d))
    msg = d.find_element(By.CSS_SELECTOR, ".msg.assistant")
    assert "stopped" in msg.get_attribute("class").split()
    assert msg.get_attribute("data-done") == "true"
    assert msg.find_element(By.CSS_SELECTOR, ".meta").text.startswith("stopped")
    assert d.find_element(By.ID, "error").text == "", "an abort is not an error"
    stopped_at = msg.find_element(By.CSS_SELECTOR, ".text").text
    n_seen = d.execute_script("return window.__seen.length")
    time.sleep(1.5)
    assert msg.find_element(By.CSS_SELECTOR, ".text").text == stopped_at, "text grew after Stop"
    assert d.execute_script("return window.__seen.length") == n_seen
    # the reply was cut short: far fewer than the 1000 tokens asked for
    assert len(stopped_at) < 1500, len(stopped_at)
    assert d.find_element(By.ID, "send").is_enabled()
    assert not d.find_element(By.ID, "stop").is_enabled()
    # the server sees the connection close (at its next token) and stops generating too
    WebDriverWait(d, 20).until(lambda _: metric(base_url, "strata_busy_slots") == 0)
    n = metric(base_url, "strata_generated_tokens_total") - generated
    assert 0 < n < 1000, n
    time.sleep(0.5)
    assert metric(base_url, "strata_generated_tokens_total") - generated == n


def test_server_error_is_shown(page, base_url):
    d = page
    # a prompt longer than any context: the server answers 400 with an error object
    long_text = " ".join(["hello"] * 20000)  # as the page sends it, trimmed
    status, body = http(
        "POST", base_url + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": long_text}], "max_tokens": 4},
    )
    assert status == 400, body
    d.execute_script("document.getElementById('input').value = arguments[0]", long_text)
    d.find_element(By.ID, "send").click()
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.ID, "error").text != "")
    shown = d.find_element(By.ID, "error").text
    assert body["error"]["message"] in shown, (shown, body)
    assert "400" in shown
    WebDriverWait(d, 10).until(lambda d: not busy(d))
    assert not d.find_elements(By.CSS_SELECTOR, ".msg.assistant"), "an empty reply bubble stayed"
    # Clear starts afresh: no messages, no error, and a new turn works
    d.find_element(By.ID, "clear").click()
    assert not d.find_elements(By.CSS_SELECTOR, "#messages .msg")
    assert d.find_element(By.ID, "error").text == ""
    assert not d.find_element(By.ID, "regenerate").is_enabled()
    settings(d, max_tokens=4)
    send(d, "Hi")
    WebDriverWait(d, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done=true]")
    )
    assert assistant_texts(d)[0].strip()
    assert d.find_element(By.ID, "error").text == ""


def test_api_key_field(driver):
    """Against a server with --api-key: 401 without the key, shown; with the
    key typed in the settings it is sent as a Bearer token."""
    d = driver
    url = ready(env_or_skip("STRATA_SERVE_AUTH_URL"))
    key = env_or_skip("STRATA_SERVE_API_KEY")
    d.get(url + "/")
    WebDriverWait(d, 20).until(lambda d: "401" in d.find_element(By.ID, "error").text)
    assert "authentication_error" in d.find_element(By.ID, "error").text
    settings(d, api_key=key, max_tokens=4)
    d.find_element(By.ID, "api_key").send_keys(Keys.TAB)  # `change` reloads the model
    status, models = http("GET", url + "/v1/models", headers={"Authorization": "Bearer " + key})
    assert status == 200, models
    WebDriverWait(d, 20).until(
        lambda d: d.find_element(By.ID, "model").text == models["data"][0]["id"]
    )
    send(d, "Hi")
    WebDriverWait(d, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done=true]")
    )
    assert assistant_texts(d)[0].strip()
    assert d.find_element(By.ID, "error").text == ""
