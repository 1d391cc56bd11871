#!/usr/bin/env python3
"""Sums one profiled training step's kernel durations by kernel name.

    profile_summary.py NCU_RAW.csv [STEP_MS] [TOP (40)]

NCU_RAW.csv is `ncu --csv --page raw --metrics gpu__time_duration.sum`'s
output: a header row, a row of units (its ID cell empty), then a row per
kernel launch.  Prints, longest first: the kernel's name (its argument list
dropped, long template arguments cut), launches, total ms, and its share of
the step's kernel time; then the sum, beside STEP_MS (the wall time of a step
without the profiler) when given.  A file without the duration column, or
without a launch, is one line on stderr and exit 2.
"""
import csv
import sys

METRIC = "gpu__time_duration.sum"
TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
         "second": 1e3, "s": 1e3}


def short_name(name):
    """The kernel's name without its argument list, template arguments past 60 characters cut."""
    depth, out = 0, []
    for c in name:
        if c == "(" and depth == 0:
            break
        depth += c == "<"
        depth -= c == ">"
        out.append(c)
    s = "".join(out).strip()
    return s if len(s) <= 80 else s[:77] + "..."


def main(argv):
    if len(argv) < 2:
        print("usage: profile_summary.py NCU_RAW.csv [STEP_MS] [TOP]", file=sys.stderr)
        return 2
    try:
        with open(argv[1], newline="") as f:
            # ncu prints its own lines ("==PROF== ...") before the table
            rows = list(csv.reader(line for line in f if not line.startswith("==")))
    except OSError as e:
        print(f"profile_summary: {e}", file=sys.stderr)
        return 2
    step_ms = float(argv[2]) if len(argv) > 2 and argv[2] else None
    top = int(argv[3]) if len(argv) > 3 else 40
    header = next((r for r in rows if METRIC in r and "Kernel Name" in r), None)
    if header is None:
        print(f"profile_summary: {argv[1]}: no '{METRIC}' column", file=sys.stderr)
        return 2
    at = rows.index(header)
    col, name_col, id_col = header.index(METRIC), header.index("Kernel Name"), header.index("ID")
    scale, totals, launches = 1e-6, {}, {}
    for r in rows[at + 1:]:
        if len(r) <= max(col, name_col, id_col):
            continue
        if not r[id_col].strip():  # the units row
            unit = r[col].strip()
            if unit not in TO_MS:
                print(f"profile_summary: unknown unit '{unit}'", file=sys.stderr)
                return 2
            scale = TO_MS[unit]
            continue
        ms = float(r[col].replace(",", "")) * scale
        k = short_name(r[name_col])
        totals[k] = totals.get(k, 0.0) + ms
        launches[k] = launches.get(k, 0) + 1
    if not totals:
        print(f"profile_summary: {argv[1]}: no kernel launch", file=sys.stderr)
        return 2
    total = sum(totals.values())
    print(f"{'kernel':80} {'launches':>8} {'ms':>9} {'share':>6}")
    ranked = sorted(totals, key=lambda k: -totals[k])
    for k in ranked[:top]:
        print(f"{k:80} {launches[k]:8d} {totals[k]:9.3f} {100 * totals[k] / total:5.1f}%")
    rest = ranked[top:]
    if rest:
        print(f"{'(' + str(len(rest)) + ' other kernels)':80} {sum(launches[k] for k in rest):8d} "
              f"{sum(totals[k] for k in rest):9.3f} {100 * sum(totals[k] for k in rest) / total:5.1f}%")
    line = f"kernels: {sum(launches.values())} launches, {total:.3f} ms of GPU time, one at a time"
    if step_ms:
        line += f"; the step without ncu: {step_ms:.3f} ms (the rest: launch gaps, host work, overlap)"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
