"""Benchmark: how long `sandstack validate` takes, on the committed stacks and on large generated specs.

    .venv/bin/python benchmarks/validate.py [--repeat 5]

Prints one line per case: the spec's size, then the median and the worst of `--repeat` runs of
`check_file` (parse, schema, rules, resolution: everything but process start-up), and the same for a
hostile file that must be refused early. Numbers, not assertions: compare runs by hand or in CI logs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from sandstack.spec import check_file

ROOT = Path(__file__).resolve().parent.parent


def generated_spec(templates: int, pools_per_template: int) -> str:
    """A valid spec with many templates, each allow-listed and placed in several pools on two hosts."""
    spec = {
        "version": 1,
        "hosts": {h: {"endpoint": f"ssh://deploy@{h}.example.com", "capacity": {"cpus": 4096, "memory": "64TiB",
                                                                               "disk": "1024TiB"},
                      "subnet_pool": f"10.{4 * i}.0.0/14"} for i, h in enumerate(("a", "b"))},
        "profiles": {"small": {"cpus": 0.5, "memory": "512MiB", "disk": "1GiB", "pids": 256}},
        "defaults": {"limits": "small"},
        "templates": {
            f"t{i}": {
                "base_image": "python:3.12-slim",
                "network": {"egress": "allow-list", "allow": [f"api{j}.example.com" for j in range(20)] + ["*.example.org"],
                            "deny": ["bad.example.org"]},
                "ports": [{"port": 8000, "exposure": "host"}],
            } for i in range(templates)
        },
        "pools": {f"p{i}-{k}": {"template": f"t{i}", "hosts": ["a", "b"], "replicas": 2}
                  for i in range(templates) for k in range(pools_per_template)},
    }
    return yaml.safe_dump(spec, sort_keys=False)


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def measure(path: Path, repeat: int) -> tuple[float, float, int]:
    times = []
    errors = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = check_file(path)
        times.append(time.perf_counter() - start)
        errors = len(result.diagnostics)
    return statistics.median(times), max(times), errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(p.relative_to(ROOT).as_posix(), p) for p in sorted((ROOT / "stacks").glob("*.yaml"))]
        for templates, pools in ((10, 2), (50, 4)):
            path = Path(tmp) / f"gen-{templates}x{pools}.yaml"
            path.write_text(generated_spec(templates, pools))
            cases.append((f"generated {templates} templates, {templates * pools} pools", path))
        bomb = Path(tmp) / "bomb.yaml"
        bomb.write_text(billion_laughs())
        cases.append(("billion laughs (refused)", bomb))
        print(f"{'case':44} {'bytes':>8} {'median ms':>10} {'worst ms':>9} {'errors':>6}")
        for name, path in cases:
            median, worst, errors = measure(path, args.repeat)
            print(f"{name:44} {path.stat().st_size:>8} {median * 1000:>10.1f} {worst * 1000:>9.1f} {errors:>6}")


if __name__ == "__main__":
    main()
