#!/usr/bin/env python3
"""Opens the broker's dashboard in headless Chromium through chromedriver
(WebDriver spoken with urllib only), waits for live data, checks that topics,
throughput and lag are shown and change while a producer runs, that the
browser console has no errors, and saves screenshots (laptop and phone).

usage: dashboard.py CHROMEDRIVER_URL DASHBOARD_URL OUT_DIR TOPIC GROUP SHARE_GROUP
"""
import base64
import json
import sys
import time
import urllib.request

DRIVER, PAGE, OUT, TOPIC, GROUP, SHARE_GROUP, CONSUMER_GROUP = sys.argv[1:8]


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(DRIVER + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}").get("value")


def wait_for(what, cond, limit=30.0):
    deadline = time.monotonic() + limit
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            sys.exit(f"dashboard: timed out waiting for {what}")
        time.sleep(0.25)


caps = {"capabilities": {"alwaysMatch": {
    "browserName": "chrome",
    "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                    "--disable-dev-shm-usage", "--window-size=1280,1600"]},
    "goog:loggingPrefs": {"browser": "ALL"},
}}}
sid = call("POST", "/session", caps)["sessionId"]


def js(script):
    return call("POST", f"/session/{sid}/execute/sync", {"script": script, "args": []})


# What the page shows, read from the DOM.
READ = """
const t = document.querySelector('canvas[data-topic="%s"]');
if (!t) return null;
const topic = t.closest('.topic');
const cells = [...topic.querySelectorAll('tr')].slice(1).map(r => r.children[1].textContent);
const cards = Object.fromEntries([...document.querySelectorAll('#cards .card')].map(
  c => [c.querySelector('.k').textContent, c.querySelector('.v').textContent]));
const lags = [...document.querySelectorAll('#groups td.lag')].map(c => c.textContent);
const groups = document.querySelector('#groups').textContent;
const errors = document.querySelector('#errors').textContent;
const share = document.querySelector('#shares [data-share-group="%s"]');
const shareLags = share ? [...share.querySelectorAll('td.share-lag')].map(c => c.textContent) : [];
const cg = document.querySelector('#groups [data-consumer-group="%s"]');
const cgMembers = cg ? [...cg.querySelectorAll('table')[0].querySelectorAll('tr')].slice(1).map(
  r => [...r.children].map(c => c.textContent)) : [];
return {ends: cells, cards, lags, groups, errors, summary: topic.querySelector('h3').textContent,
        width: t.width, share: share ? share.querySelector('h3').textContent : null, shareLags,
        cg: cg ? cg.querySelector('h3').textContent : null, cgMembers};
""" % (TOPIC, SHARE_GROUP, CONSUMER_GROUP)


def parse(n):
    n = n.strip()
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}.get(n[-1:], 1)
    try:
        return float(n.rstrip("kMG")) * mult
    except ValueError:
        return 0.0


try:
    call("POST", f"/session/{sid}/url", {"url": PAGE})
    first = wait_for("topics on the page", lambda: js(READ))
    assert GROUP in first["groups"], first["groups"]
    assert first["lags"], "no lag shown"
    assert "TOPIC_ALREADY_EXISTS" in first["errors"], first["errors"]
    assert first["width"] > 0, "chart not drawn"
    # The share group's card: its partitions with lag, and the 50 released records redelivered
    # or waiting (the producer below keeps adding to its lag).
    assert first["share"] and SHARE_GROUP in first["share"], first["share"]
    assert first["shareLags"], "no share-partition rows"
    print(f"dashboard: share group card: {first['share']}; lag {first['shareLags']}")
    # The consumer-protocol group (KIP-848): its type and epoch, one member owning the 3 partitions.
    assert first["cg"] and "consumer protocol" in first["cg"] and "epoch" in first["cg"], first["cg"]
    assert len(first["cgMembers"]) == 1 and first["cgMembers"][0][3] == "obs:0,1,2", first["cgMembers"]
    print(f"dashboard: consumer-protocol group card: {first['cg']}; member {first['cgMembers'][0]}")
    # Live: throughput above zero, and end offsets and lag moving while the producer runs.
    wait_for("records/s in above zero", lambda: parse((js(READ) or first)["cards"].get("records/s in", "0")) > 0)
    later = wait_for("end offsets and lag to change",
                     lambda: (lambda s: s if s["ends"] != first["ends"] and s["lags"] != first["lags"] else None)(js(READ)))
    print(f"dashboard: {TOPIC}: end offsets {first['ends']} -> {later['ends']}; lag {first['lags']} -> {later['lags']}; "
          f"in {later['cards'].get('records/s in')}/s")
    # Let the history chart gather a few points, then take the pictures.
    time.sleep(4)
    with open(f"{OUT}/dashboard.png", "wb") as f:
        f.write(base64.b64decode(call("GET", f"/session/{sid}/screenshot")))
    call("POST", f"/session/{sid}/window/rect", {"width": 390, "height": 1400})
    time.sleep(2.5)  # one refresh at the new width
    with open(f"{OUT}/dashboard-phone.png", "wb") as f:
        f.write(base64.b64decode(call("GET", f"/session/{sid}/screenshot")))
    overflow = js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 1, f"the page scrolls sideways on a phone ({overflow}px)"
    logs = call("POST", f"/session/{sid}/se/log", {"type": "browser"}) or []
    bad = [entry for entry in logs if entry.get("level") in ("SEVERE", "ERROR")]
    assert not bad, f"browser console errors: {bad}"
    print(f"dashboard: ok, {len(logs)} console lines, no errors; screenshots in {OUT}")
finally:
    call("DELETE", f"/session/{sid}")
