"""Shared fixtures of the client tests of `strata serve`.

`crates/strata-cli/tests/serve_clients.rs` starts the servers and runs these
files with pytest; by hand, start `strata serve --port 8080` and run
`STRATA_SERVE_URL=http://127.0.0.1:8080 python3 -m pytest -q crates/strata-cli/tests/python`.

Environment:
  STRATA_SERVE_URL       base URL of a server without an API key (required)
  STRATA_SERVE_AUTH_URL  base URL of a server started with --api-key (auth tests)
  STRATA_SERVE_API_KEY   that server's key
  STRATA_BIN             the `strata` binary (the greedy comparison with `strata run`)
  STRATA_MODEL           the model both serve (default: the SmolLM2 Q4_1 in ~/.cache/strata)
"""

import json
import os
import time
import urllib.error
import urllib.request

import pytest


def env_or_skip(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set (serve_clients.rs sets it)")
    return value


def ready(url, timeout=180):
    """`url` once its /health says 200 (the server answers 503 while the model loads)."""
    url = url.rstrip("/")
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body = http("GET", url + "/health", timeout=10)
        except OSError as e:
            status, body = None, e
        if status == 200:
            return url
        if time.monotonic() > deadline:
            pytest.fail(f"{url}/health: {status} {body} after {timeout} s")
        time.sleep(0.25)


@pytest.fixture(scope="session")
def base_url():
    return ready(env_or_skip("STRATA_SERVE_URL"))


def http(method, url, body=None, headers=None, raw=None, timeout=120):
    """One request: (status, parsed JSON or text). `raw` sends bytes as they are."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read().decode(), e.headers.get("Content-Type", "")
    if "json" in ctype:
        return status, json.loads(text)
    return status, text


@pytest.fixture(scope="session")
def model_id(base_url):
    status, body = http("GET", base_url + "/v1/models")
    assert status == 200, body
    return body["data"][0]["id"]
