"""The simulator's figures, regenerated: see scripts/figures."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slurmpolicy.sim.metrics import wait_text as dur

ROOT = Path(__file__).resolve().parents[1]
TRACE = "contrib/traces/philly-2017-09-10.csv"
OUT = ROOT / "docs" / "figures"
LOADS = "1,2,3"


def commit() -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                            "slurmpolicy", "topology", "daemon"], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout.strip()
    return rev + ("+changes" if dirty else "")


def simulate(extra: list[str], plots: Path) -> tuple[dict[str, Any], float]:
    cmd = [sys.executable, "-c", "from slurmpolicy.cli import main; main()", "simulate",
           "--trace", TRACE, "--compare", "--load-scale", LOADS, "--json",
           "--plot", str(plots), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"scripts/figures: simulate failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout), wall


ROWS: list[tuple[str, Any]] = [
    ("production wait mean / p50 / p95 / p99",
     lambda s: " / ".join(dur(s["by_class"]["production"]["wait"][q])
                          for q in ("mean", "p50", "p95", "p99"))),
    ("research wait mean / p50 / p95 / p99",
     lambda s: " / ".join(dur(s["by_class"]["research"]["wait"][q])
                          for q in ("mean", "p50", "p95", "p99"))),
    ("experimental wait mean / p50 / p95 / p99",
     lambda s: " / ".join(dur(s["by_class"]["experimental"]["wait"][q])
                          for q in ("mean", "p50", "p95", "p99"))),
    ("mean JCT", lambda s: dur(s["jct_mean"])),
    ("share of life queueing: production / all",
     lambda s: f"{s['by_class']['production']['queue_share']:.1%} / {s['queue_share']:.1%}"),
    ("GPU allocation (first to last submission)", lambda s: f"{s['allocation']:.1%}"),
    ("fragmentation index (mean)", lambda s: f"{s['fragmentation']:.3f}"),
    ("multi-node jobs within one leaf", lambda s: f"{s['multi_node_in_one_leaf']:.1%}"),
    ("preemptions (per preempted job: mean, max)",
     lambda s: f"{s['preemptions']:,} ({s['preemptions_per_preempted_job']:.2f}, "
               f"{s['max_preemptions_per_job']})"),
    ("GPU-hours lost (work redone after requeue)", lambda s: f"{s['lost_gpu_hours']:,.1f}"),
    ("GPU-hours idle while a victim is in grace",
     lambda s: f"{s['idle_in_grace_gpu_hours']:,.1f}"),
    ("GPU-hours save/restore overhead", lambda s: f"{s['overhead_gpu_hours']:,.1f}"),
    ("beneficiary start delay mean / p95",
     lambda s: f"{dur(s['benefit_delay']['mean'])} / {dur(s['benefit_delay']['p95'])}"),
    ("plan cycles over the Slurm call budget (actions left for later, summed per cycle)",
     lambda s: (f"{s.get('over_budget_cycles', 0):,} ({s.get('deferred_actions', 0):,})"
                if s["plan_calls"] else "-")),
    ("replay CPU s (plan() calls)",
     lambda s: f"{s['cpu_seconds']:.0f}" + (f" ({s['plan_calls']:,})" if s["plan_calls"]
                                             else "")),
]


def tables(data: dict[str, Any], head: str) -> tuple[str, str]:
    """(full tables for docs/simulate.md, the targets table for README)."""
    loads = data["loads"]
    modes = [m["mode"] for m in loads[0]["modes"]]
    cols = [f"{m} x{g['load']:g}" for g in loads for m in modes]
    out = [head, "", "| measure | " + " | ".join(cols) + " |",
           "|---|" + "---:|" * len(cols)]
    for name, get in ROWS:
        cells = []
        for g in loads:
            for s in g["modes"]:
                try:
                    cells.append(get(s))
                except (KeyError, TypeError, ZeroDivisionError):
                    cells.append("-")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    targets = ["| target (slurmpolicy / slurm-grace) | "
               + " | ".join(f"x{g['load']:g}" for g in loads) + " |",
               "|---|" + "---|" * len(loads)]
    for i, t0 in enumerate(loads[0]["targets"]):
        cells = []
        for g in loads:
            t = g["targets"][i]
            ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}x"
            cells.append(f"{t['slurmpolicy']} vs {t['baseline']} ({ratio}): "
                         + ("met" if t["met"] else f"**missed**, {t['gap']}"))
        targets.append(f"| {t0['target']} | " + " | ".join(cells) + " |")
    full = "\n".join([*out, "", *targets])
    return full, "\n".join([head, "", *targets])


def splice(path: Path, name: str, text: str) -> None:
    begin, end = f"<!-- figures:{name} begin -->", f"<!-- figures:{name} end -->"
    doc = path.read_text(encoding="utf-8")
    if begin not in doc or end not in doc:
        sys.exit(f"scripts/figures: {path.relative_to(ROOT)} lacks the markers {begin} ... {end}")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", doc), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate the simulator's figures.")
    ap.add_argument("--limit", type=int, default=None,
                    help="replay only the first N jobs (the header says so)")
    ap.add_argument("--dry", action="store_true",
                    help="write the plots and tables under docs/figures/trial, not into the docs")
    ap.add_argument("--month", default="", help="replay one month only (YYYY-MM)")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        # Without it simulate skips the plots and the docs would show old ones.
        sys.exit("scripts/figures: the plots need matplotlib: .venv/bin/pip install "
                 "'.[plot]' (or matplotlib)")
    extra = (["--limit", str(args.limit)] if args.limit else []) + (
        ["--month", args.month] if args.month else [])
    trial = args.dry
    plots = OUT / ("trial" if trial else "")
    rev = commit()
    data, wall = simulate(extra, plots)
    cpu = sum(s["cpu_seconds"] for g in data["loads"] for s in g["modes"])
    jobs = data["loads"][0]["modes"][0]["jobs"]
    head = (f"Generated by `scripts/figures` at commit `{rev}`: `slurmpolicy simulate --trace "
            f"{TRACE} --compare --load-scale {LOADS}{' ' + ' '.join(extra) if extra else ''}`"
            f" ({jobs:,} jobs, 1,024 GPUs, seed 0); {len(data['loads']) * 2} replays, "
            f"{cpu:.0f} CPU s in all, {wall:.0f} s wall. Plots of the same run: "
            f"`docs/figures/{'trial/' if trial else ''}*.png`.")
    full, short = tables(data, head)
    plots.mkdir(parents=True, exist_ok=True)
    (plots / "simulate.json").write_text(json.dumps({"commit": rev, **data}, indent=1,
                                                    sort_keys=True) + "\n")
    (plots / "simulate.md").write_text(full + "\n")
    if not trial:
        splice(ROOT / "docs" / "simulate.md", "simulate", full)
        splice(ROOT / "README.md", "simulate", short)
    print(full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
