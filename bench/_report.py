"""The results as a table on stdout and as a PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def print_table(results: dict[str, Any]) -> None:
    """Medians with min and max; ratios with their goals."""
    print("\n== cycles per second (median [min, max]) ==")
    for setup, variants in results["rates"].items():
        cells = ", ".join(
            f"{variant} {values['median']:.0f} [{values['low']:.0f}, {values['high']:.0f}]"
            for variant, values in variants.items()
        )
        print(f"{setup:28} {cells}")
    print("\n== figures (median [min, max]) ==")
    for name, figure in results["figures"].items():
        goal = figure.get("goal")
        verdict = ""
        if goal is not None:
            verdict = f"  goal <= {goal:g}: {'met' if figure['median'] <= goal else 'NOT met'}"
        spread = f"[{figure['min']:.3f}, {figure['max']:.3f}]"
        print(f"{name:46} {figure['median']:8.3f} {spread} {figure['unit']}{verdict}")
    if results.get("contention"):
        print_contention(results["contention"])
    if results.get("semaphore"):
        from ._semaphore import print_semaphore

        print_semaphore(results["semaphore"])
    if results.get("shared"):
        from ._shared import print_shared

        print_shared(results["shared"])
    if results.get("failover"):
        from ._failover import print_failover

        print_failover(results["failover"])
    if results.get("peers"):
        from ._durable import print_peers

        print_peers(results["peers"])
    for name, values in results["scale"].items():
        print(f"\n== {name} ==")
        for field, value in values.items():
            if isinstance(value, list):
                continue  # time series: in results.json
            print(f"{field:30} {value:.3f}" if isinstance(value, float) else f"{field:30} {value}")


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Ratios against their goals, and cycle rates per setup, as one PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no chart")
        return
    ratios = {name: fig for name, fig in results["figures"].items() if fig["unit"] == "x"}
    rates = results["rates"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, max(6, 0.35 * max(len(ratios), 8))))
    names = list(ratios)
    medians = [ratios[n]["median"] for n in names]
    errors = [
        [ratios[n]["median"] - ratios[n]["min"] for n in names],
        [ratios[n]["max"] - ratios[n]["median"] for n in names],
    ]
    left.barh(names, medians, xerr=errors, color="#4c72b0")
    for index, name in enumerate(names):
        goal = ratios[name].get("goal")
        if goal is not None:
            left.plot([goal, goal], [index - 0.4, index + 0.4], color="#c44e52", linewidth=2)
    left.axvline(1.0, color="grey", linewidth=0.8)
    left.set_xlabel("ratio (median, min-max); red: goal")
    left.invert_yaxis()
    left.tick_params(axis="y", labelsize=7)
    setups = list(rates)
    variants = sorted({variant for values in rates.values() for variant in values})
    width = 0.8 / max(1, len(variants))
    for offset, variant in enumerate(variants):
        xs = [i + offset * width for i in range(len(setups))]
        ys = [rates[s].get(variant, {}).get("median", 0.0) for s in setups]
        right.bar(xs, ys, width=width, label=variant)
    right.set_xticks([i + 0.4 for i in range(len(setups))])
    right.set_xticklabels(setups, rotation=30, ha="right", fontsize=7)
    right.set_ylabel("cycles per second (median)")
    if variants:
        right.legend(fontsize=7)
    fig.suptitle("Volcano benchmarks (one run; ratios taken within rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_contention(rows: list[dict[str, Any]]) -> None:
    """The contention runs as the issue's table, grouped by hold and workers."""
    print("\n== contention: N processes looping acquire / hold / release on one key ==")
    header = "system                          grants/s  handoff p50/p99 ms  longest/mean wait ms"
    for hold in sorted({row["hold_ms"] for row in rows}):
        for workers in sorted({row["workers"] for row in rows}):
            print(f"\n-- hold {hold:g} ms, {workers} worker(s)\n{header}   grants per worker")
            chosen = [r for r in rows if r["hold_ms"] == hold and r["workers"] == workers]
            for row in sorted(chosen, key=lambda r: r["system"]):
                per_worker = " / ".join(str(n) for n in row["grants_per_worker"])
                print(
                    f"{row['system']:30} {row['grants_per_s']:9.0f}"
                    f"  {row['handoff_p50_ms']:7.2f} / {row['handoff_p99_ms']:6.2f}"
                    f"  {row['longest_wait_ms']:9.0f} / {row['mean_wait_ms']:7.1f}   {per_worker}"
                )
