"""The stats in Prometheus's text exposition format, against a real prestod.

`prestoctl stats --format prometheus` and the /metrics HTTP endpoint
(metrics.listen) are parsed with Python's prometheus_client (Debian
python3-prometheus-client; the format's own rules where it is not installed)
and checked strictly line by line; every number of
the JSON document (`prestoctl stats`) must be in the text with the same value,
under the name the rules give (README "Stats"):

  presto_ + the section path + _ + the field, counters ending in _total;
  the memory tier ("cache") and the disk tier ("disk") are presto_tier_*
  with tier="memory"/"disk"; each dataset is presto_dataset_* with
  dataset="NAME", its "memory" and "disk" presto_dataset_tier_* with tier;
  each limit presto_limit_*{limit="NAME"}, each step presto_step_*{step=...};
  the gauges "connections" and "streams" are ..._open (beside the counters
  ..._total); names take base units: ..._s is ..._seconds, bytes_per_s
  bytes_per_second, and the latency sections (..._us) are ..._seconds, their
  values (but count) divided by 10^6.

promtool check metrics runs too where Debian's prometheus package is installed.
"""

import json
import os
import re
import shutil
import subprocess
import unittest
import urllib.error
import urllib.request

import prestotest as pt

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None

CONFIG = """\
metrics: {{listen: "127.0.0.1:0"}}
cache: {{disk: 64MiB}}
datasets:
  - name: tiny
    root: {root}
    steps: [decode, {{resize: 40}}, {{center_crop: 32}}, {{random_flip: 0.5}}]
    split: center_crop
"""

# JSON sections named otherwise in Prometheus: path -> (name, label).
SECTIONS = {
    ("cache",): ("tier", ("tier", "memory")),
    ("disk",): ("tier", ("tier", "disk")),
    ("limits",): ("", None),
    ("steps",): ("", None),
    ("datasets", "memory"): ("tier", ("tier", "memory")),
    ("datasets", "disk"): ("tier", ("tier", "disk")),
    ("io", "read_latency_us"): ("read_latency_seconds", None),
    ("io", "source", "latency_us"): ("latency_seconds", None),
}
RENAMED = {
    ((), "connections"): "connections_open",
    ((), "streams"): "streams_open",
    ((), "uptime_s"): "uptime_seconds",
    (("shm",), "release_timeout_s"): "release_timeout_seconds",
    (("io", "source"), "bytes_per_s"): "bytes_per_second",
    (("io", "source"), "busy_s"): "busy_seconds",
    (("io", "source"), "bytes_per_busy_s"): "bytes_per_busy_second",
}
# Gauges that move on their own between two requests (checked for presence).
VOLATILE = {"uptime_s", "rss"}

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")


def strict_check(test, text):
    """The exposition format line by line: HELP then TYPE once per family,
    its samples together right after, names and labels well formed, counters
    ending in _total, values numbers. Returns {family: type}."""
    test.assertTrue(text.endswith("\n"), "the text must end with a newline")
    types, current, seen_samples = {}, None, set()
    help_of = {}
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d: %r" % (n, line)
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            test.assertRegex(name, METRIC_NAME, where)
            test.assertNotIn(name, help_of, "second HELP of " + where)
            test.assertNotIn(name, seen_samples, "HELP after samples, " + where)
            help_of[name] = line
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            test.assertEqual(name, current, "TYPE without its HELP, " + where)
            test.assertNotIn(name, types, "second TYPE of " + where)
            test.assertIn(typ, ("counter", "gauge"), where)
            if typ == "counter":
                test.assertTrue(name.endswith("_total"), "a counter not named _total, " + where)
            types[name] = typ
        else:
            m = SAMPLE.match(line)
            test.assertIsNotNone(m, "not a sample, " + where)
            name = m.group(1)
            test.assertEqual(name, current, "a sample out of its family, " + where)
            test.assertIn(name, types, "a sample before its TYPE, " + where)
            if m.group(3):
                labels = m.group(3)
                test.assertEqual(",".join(x.group(0) for x in LABEL.finditer(labels)), labels,
                                 "bad labels, " + where)
            float(m.group(4))
            seen_samples.add(name)
    return types


def unescape(value):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parsed(text):
    """{(sample name, frozenset of labels): value} by prometheus_client, or
    where it is not installed by the format's own rules (strict_check has
    checked every line by then)."""
    out = {}
    if text_string_to_metric_families is not None:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out
    for line in text.split("\n"):
        m = SAMPLE.match(line)
        if line.startswith("#") or not m:
            continue
        labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(m.group(3) or ""))
        key = (m.group(1), labels)
        if key in out:
            raise ValueError("a sample given twice: %r" % line)
        out[key] = float(m.group(4))
    return out


def numbers(doc, path=(), prefix=("presto",), labels=()):
    """Every number of the JSON document: (path, field, metric prefix, labels, value)."""
    for key, value in doc.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            yield path, key, prefix, labels, value
        elif isinstance(value, dict):
            sub = path + (key,)
            name, label = SECTIONS.get(sub, (key, None))
            if len(path) == 1 and path[0] in ("limits", "steps"):
                name, label = path[0][:-1], (path[0][:-1], key)
            p = prefix + ((name,) if name else ())
            yield from numbers(value, sub, p, labels + ((label,) if label else ()))
        elif isinstance(value, list) and key == "datasets":
            for item in value:
                yield from numbers(item, ("datasets",), prefix + ("dataset",),
                                   labels + (("dataset", item["name"]),))


def expected_names(path, key, prefix):
    base = RENAMED.get((path, key), key)
    name = "_".join(prefix + (base,))
    return [name] if name.endswith("_total") else [name, name + "_total"]


@unittest.skipIf(os.environ.get("PRESTO_TRANSPORT") == "socket",
                 "the stats do not depend on the transport: run once")
class TestMetrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pt.tempdir()
        root = pt.make_dataset(os.path.join(cls.dir, "data"), 24, 2, seed=11)
        config = os.path.join(cls.dir, "prestod.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(root=json.dumps(root)))
        cls.daemon = pt.Daemon(cls.dir, ["-c", config])
        for epoch in ("0", "1"):  # cold, then from the tiers
            rc, out, err = pt.prestoctl(cls.daemon.sock, "epoch", "tiny", "-b", "8", "-e", epoch)
            assert rc == 0, err

    @classmethod
    def tearDownClass(cls):
        try:
            status = cls.daemon.stop()
            if status != 0:
                raise AssertionError("prestod exited with %r:\n%s"
                                     % (status, cls.daemon.log_text()))
        finally:
            pt.remove(cls.dir)

    def stats(self, *args):
        rc, out, err = pt.prestoctl(self.daemon.sock, "stats", *args)
        self.assertEqual(rc, 0, err)
        return out

    def test_every_json_number_in_the_text(self):
        before = json.loads(self.stats())
        text = self.stats("--format", "prometheus")
        after = json.loads(self.stats())
        types = strict_check(self, text)
        samples = parsed(text)
        later = {(p, k, l): v for p, k, _, l, v in numbers(after)}
        checked = counters = 0
        for path, key, prefix, labels, v0 in numbers(before):
            v1 = later[(path, key, labels)]
            where = ".".join(path + (key,)) + " " + repr(dict(labels))
            found = [n for n in expected_names(path, key, prefix)
                     if (n, frozenset(labels)) in samples]
            self.assertEqual(len(found), 1, "%s: not in the text as %s" %
                             (where, expected_names(path, key, prefix)))
            value = samples[(found[0], frozenset(labels))]
            if path[-1:] in (("read_latency_us",), ("latency_us",)) and key != "count":
                value *= 1e6  # microseconds in the JSON, seconds in the text
            counters += types[found[0]] == "counter"
            checked += 1
            if key in VOLATILE:
                continue
            # The requests themselves move some (connections_total): the
            # text's value lies between the JSON's before and after, and is
            # equal when they are.
            lo, hi = min(v0, v1), max(v0, v1)
            slack = 1e-5 * max(abs(lo), abs(hi), 1)  # the JSON's 6 digits
            self.assertTrue(lo - slack <= value <= hi + slack,
                            "%s: %r in the text, %r and %r in the JSON" % (where, value, v0, v1))
        self.assertGreater(counters, 50)
        print("\n%d numbers checked (%d counters), %d samples" % (checked, counters, len(samples)))

    def test_metrics_over_http(self):
        listen = json.loads(self.stats())["metrics"]["listen"]
        self.assertRegex(listen, r"^127\.0\.0\.1:[0-9]+$")
        with urllib.request.urlopen("http://%s/metrics" % listen, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.headers["Content-Type"],
                             "text/plain; version=0.0.4; charset=utf-8")
            text = r.read().decode("utf-8")
        strict_check(self, text)
        over_http = parsed(text)
        by_ctl = parsed(self.stats("--format", "prometheus"))
        self.assertEqual(set(over_http), set(by_ctl))
        key = ("presto_metrics_requests_total", frozenset())
        self.assertGreaterEqual(by_ctl[key], 1)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://%s/other" % listen, timeout=10)
        self.assertEqual(e.exception.code, 404)

    def test_promtool(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("no promtool (Debian's prometheus package is not installed)")
        r = subprocess.run([promtool, "check", "metrics"], input=self.stats("--format",
                                                                              "prometheus"),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
