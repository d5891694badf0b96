"""What ``autotune bench regress`` writes and prints of its results: one line per case (``line``),
the run as a JSON document (``document``: machine, database, options, rule, summary, results)
and as a JUnit XML report (``junit``, ``write_junit``)."""
from __future__ import annotations

import platform
import socket
import sys
import xml.etree.ElementTree as ET
from collections import Counter

import numpy as np

from autotune._version import __version__
from autotune.benchmarks._common import write_atomic
from autotune.db import load_sp, location

SUITE = "autotune.bench.regress"


def line(r: dict) -> str:
    """One case: median ratio [quartiles], A/A spread, times, choice, and its verdict."""
    text = (f"{r['case']:30s} ratio {r['speedup_median']:6.3f} [{r['speedup_q1']:.3f}, {r['speedup_q3']:.3f}] "
            f"A/A {r['aa_median']:.3f} ({r['pairs']} rounds; {r['baseline_ms']:.3f} vs {r['tuned_ms']:.3f} ms) "
            f"{r['choice']}")
    if "change" in r:
        text += (f" | baseline {r['baseline_speedup']:.3f}: {r['change']:+.1%} "
                 f"(threshold -{r['threshold']:.1%}) {'REGRESSION' if r['regression'] else 'ok'}")
    if "below" in r:
        text += f" | {'BELOW' if r['below'] else 'ok'} --fail-below {r['fail_below']:g}"
    return text + (" | interrupted" if r.get("interrupted") else "")


def database(db: str | None) -> dict:
    """Which database the tuned calls used and whether it held measurements or they fell back to defaults."""
    sp = load_sp(db)
    return {"path": str(location.resolve(db)), "status": "measured" if sp.table is not None else "fallback",
            "reason": sp.reason}


def options_of(args) -> dict:
    return {k: v for k, v in vars(args).items() if not callable(v)}


def document(args, fingerprint: dict, results: list[dict], run: dict) -> dict:
    """The run as written to --out / --save-baseline: machine, database, options, rule, verdicts, results."""
    counts = _counts(results, run["cases"])
    return {"command": "autotune bench regress", "timestamp": run["timestamp"],
            "status": _status(counts, run["interrupted"]),
            "interrupted": run["interrupted"], "seconds": run["seconds"], "hostname": socket.gethostname(),
            "cpu": fingerprint.get("cpu_model"), "fingerprint": fingerprint,
            "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
            "numpy": np.__version__, "autotune": __version__, "database": database(args.db),
            "baseline": args.baseline, "options": options_of(args),
            "rule": {"threshold": args.threshold, "max_threshold": args.max_threshold,
                     "fail_below": args.fail_below,
                     "formula": "max(threshold, min(max_threshold, run noise + baseline spread))"},
            "summary": counts, "results": results}


def _counts(results: list[dict], planned: int) -> dict:
    """The run's summary: cases planned, run, complete and compared, failures of each kind, cases failed."""
    kinds = Counter(f["kind"] for r in results for f in r["failures"])
    return {"planned": planned, "run": len(results), "complete": sum(not r["interrupted"] for r in results),
            "compared": sum("change" in r for r in results), "regressions": kinds["regression"],
            "below": kinds["below"], "failed": sum(r["status"] == "failed" for r in results)}


def _status(counts: dict, interrupted: bool) -> str:
    """The run's status from its summary: interrupted, failed (any case failed) or passed."""
    return "interrupted" if interrupted else "failed" if counts["failed"] else "passed"


def junit(doc: dict) -> ET.Element:
    """The run as a JUnit XML ``<testsuites>``: one testcase per case (its time the tuned median),
    a ``<failure>`` per failing case, ``<skipped>`` for the case Ctrl-C cut short and an
    ``<error>`` testcase for the interrupted run."""
    results, counts = doc["results"], doc["summary"]
    attrs = {"tests": len(results) + doc["interrupted"], "failures": counts["failed"],
             "errors": int(doc["interrupted"]), "skipped": sum(r["status"] == "interrupted" for r in results),
             "time": f"{doc['seconds']:.3f}"}
    root = ET.Element("testsuites", {"name": SUITE, **{k: str(v) for k, v in attrs.items()}})
    suite = ET.SubElement(root, "testsuite", {"name": SUITE, **{k: str(v) for k, v in attrs.items()},
                                              "timestamp": doc["timestamp"], "hostname": doc["hostname"]})
    props = ET.SubElement(suite, "properties")
    for name, value in (("database", doc["database"]["path"]), ("database_status", doc["database"]["status"]),
                        ("baseline", doc["baseline"]), *doc["rule"].items(), ("cpu", doc["cpu"])):
        ET.SubElement(props, "property", {"name": name, "value": "" if value is None else str(value)})
    for r in results:
        _testcase(suite, r)
    if doc["interrupted"]:
        case = ET.SubElement(suite, "testcase", {"classname": SUITE, "name": "run", "time": "0"})
        message = f"interrupted after {counts['complete']} of {counts['planned']} case(s)"
        ET.SubElement(case, "error", {"type": "interrupted", "message": message})
    return root


def _testcase(suite: ET.Element, r: dict) -> None:
    case = ET.SubElement(suite, "testcase", {"classname": f"{SUITE}.{r['routine']}", "name": r["case"],
                                             "time": f"{r['tuned_ms'] / 1e3:.9f}"})
    if r["status"] == "interrupted":
        ET.SubElement(case, "skipped", {"message": f"interrupted after {r['pairs']} round(s)"})
    for f in r["failures"]:
        ET.SubElement(case, "failure", {"type": f["kind"], "message": f"{r['case']}: {f['message']}"}).text = line(r)
    ET.SubElement(case, "system-out").text = line(r)


def write_junit(path: str, doc: dict) -> None:
    """Write ``doc``'s JUnit XML report atomically."""
    root = junit(doc)
    ET.indent(root)
    write_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
