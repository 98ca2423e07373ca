#!/usr/bin/env python3
# Turns an experiment folder (the CSV/JSON of `tarn bench ...`, the metrics.jsonl of training runs)
# into PNG plots and regenerates the markdown report docs/experiment.md.
# Called by tools/experiment.sh after the runs, and by tests/tools/report_test.sh on a fixture.
"""Usage:

  report.py --in DIR --doc docs/experiment.md [--plots-dir DIR] [--plots-only]
  report.py --in DIR --plots-only --only attention|train|decode [--plots-dir DIR]

The second form draws one bench's PNGs (into DIR unless --plots-dir): what `tarn bench attention
| train | decode --out DIR` runs after writing its CSV.

Every input file is optional: a section whose data is missing says "not run". Every number in the
markdown comes from the input files.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display on the machines that run experiments; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DPI = 110
COLORS = plt.get_cmap("tab10").colors
SEED_STYLES = ["-", "--", ":", "-."]
DEVICE_MARKERS = ["o", "s", "^", "D"]
# Known settings first, in the order the report discusses them; unknown ones follow alphabetically.
SETTING_ORDER = ["small-softmax", "small-linear-encoder", "small-linear", "small-linear-favor",
                 "small-delta-everywhere", "small-gated-everywhere", "small-delta-taylor", "small-delta",
                 "small-gated", "small-hybrid", "small-interleaved", "small-align-gate", "small-routed", "small-recall",
                 "long-softmax", "long-linear", "long-delta", "long-hybrid"]
META_FILES = ["attention.json", "train.json", "decode.json"]
META_LABELS = {"device": "Device", "cpu": "CPU", "gpu": "GPU", "threads": "Threads",
               "blas": "BLAS", "sgemm_gflops": "SGEMM GFLOP/s (measured)", "date": "Date",
               "tarn_commit": "tarn commit",
               "load_average_1min": "Load average (1 min) when the bench ended"}
MIB = 1024 * 1024
# Markers of the points that did not run, by bad_label(); other reasons get "*".
BAD_MARKERS = {"did not fit in memory": "x", "predicted too slow": "P"}


# ---------------------------------------------------------------------------------------------
# Reading the inputs
# ---------------------------------------------------------------------------------------------

def read_csv(path):
    """The rows of a bench CSV as dicts, or None when the file is absent."""
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        rows = []
        for fields in reader:
            if not any(field.strip() for field in fields):
                continue
            # The last column (status) is free text that the benches write unquoted, so a reason
            # like "needs 34.0 GiB, limit 12.0 GiB" spans several fields: join them back.
            if len(fields) > len(header):
                fields = fields[:len(header) - 1] + [",".join(fields[len(header) - 1:])]
            # A row cut short (bench killed mid-write) keeps empty fields, hence no "ok" status.
            rows.append(dict(zip(header, fields + [""] * (len(header) - len(fields)))))
        return rows


def read_json(path):
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            value = json.load(f)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_text(path):
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read()


def number(value):
    """A float from a CSV/JSON field, or None when empty or not numeric (skipped rows)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def status_of(row):
    """A row's status; files without a status column (decode.csv) have only measured rows."""
    if "status" not in row:
        return "ok"
    return row["status"].strip() or "no status (row cut short)"


def is_ok(row):
    return status_of(row) == "ok"


@dataclass
class Run:
    """One training run: seed folder, its train and valid records and its `tarn eval` output."""
    seed: str
    train: list
    valid: list
    test: dict
    unparsable_lines: int


def read_metrics(path):
    """train and valid records of a metrics.jsonl; garbled lines (run killed mid-write) skipped."""
    train, valid, unparsable = [], [], 0
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                unparsable += 1
                continue
            if not isinstance(record, dict):
                unparsable += 1
            elif record.get("kind") == "train" and has_numbers(record, "tokens_seen", "elapsed_s"):
                train.append(record)
            elif record.get("kind") == "valid" and has_numbers(record, "ppl", "tokens_seen",
                                                                   "elapsed_s"):
                valid.append(record)
    return train, valid, unparsable


def has_numbers(record, *keys):
    return all(number(record.get(k)) is not None for k in keys)


def read_test(path):
    """`tarn eval` output ("nll 2.87", "ppl 17.64", ...) as a dict, {} when absent."""
    text = read_text(path) or ""
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and number(parts[1]) is not None:
            values[parts[0]] = number(parts[1])
    return values


def ordered_settings(names):
    known = [s for s in SETTING_ORDER if s in names]
    return known + sorted(set(names) - set(known))


def seed_key(name):
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else math.inf, name)


def read_runs(root):
    """{setting: [Run per seed]} from root/<setting>/seed<k>/metrics.jsonl; None without root."""
    if not os.path.isdir(root):
        return None
    runs = {}
    for setting in ordered_settings([d for d in os.listdir(root)
                                     if os.path.isdir(os.path.join(root, d))]):
        seeds = []
        setting_dir = os.path.join(root, setting)
        for seed in sorted(os.listdir(setting_dir), key=seed_key):
            metrics = os.path.join(setting_dir, seed, "metrics.jsonl")
            if os.path.isfile(metrics):
                train, valid, unparsable = read_metrics(metrics)
                test = read_test(os.path.join(setting_dir, seed, "test.txt"))
                seeds.append(Run(seed, train, valid, test, unparsable))
        if seeds:
            runs[setting] = seeds
    return runs


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------

def fmt(x):
    """A number with as many digits as a benchmark figure deserves."""
    if x is None:
        return "—"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"  # '#' keeps trailing zeros: 0.500 next to 1.00 in a column


def fmt_n(n):
    """A count (N, position, tokens)."""
    return f"{int(n):,}" if n is not None else "—"


def fmt_ratio(a, b):
    """"a/b×", or "—" when either is missing or b is zero."""
    return f"{fmt(a / b)}×" if a is not None and b else "—"


def mean_range(values):
    """"mean (min–max)" over seeds, or the single value."""
    if not values:
        return "—"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.mean(values))} ({fmt(min(values))}–{fmt(max(values))})"


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def bullets(lines):
    return "\n".join(f"- {line}" for line in lines)


def not_run(*paths):
    found = " or ".join(f"`{p}`" for p in paths)
    return f"*Not run:* {found} was not found (or has no data)."


def section_not_run(title, where):
    """The facts and body of a section whose inputs (`where`) are missing."""
    return [f"**{title}:** not run (`{where}`)"], not_run(where)


def read_bench_rows(in_dir, name):
    """The rows of in_dir/<name>.csv, then those of in_dir/<name>-*/<name>.csv (further runs of
    the same bench on other recipes). Rows of attention "recipe" (tarn bench train | decode
    --attention recipe: the recipe's own attention) are named after the recipe in the JSON
    beside their CSV, as "recipe (small-hybrid)", so that tables and legends say which."""
    folders = [in_dir] + sorted(os.path.join(in_dir, d) for d in os.listdir(in_dir)
                                if d.startswith(f"{name}-") and os.path.isdir(os.path.join(in_dir, d)))
    rows = None
    for folder in folders:
        found = read_csv(os.path.join(folder, f"{name}.csv"))
        if found is None:
            continue
        command = (read_json(os.path.join(folder, f"{name}.json")) or {}).get("command", "")
        recipe = next((os.path.basename(w)[:-5] for w in command.split()
                       if w.endswith(".yaml")), None)
        for row in found:
            if recipe and row.get("attention") == "recipe":
                row["attention"] = f"recipe ({recipe})"
        rows = (rows or []) + found
    return rows


def bench_csv_section(name, title):
    """Turns build(rows, plots, link) into a section(in_dir, plots, link) that reads its rows
    from one bench CSV, and says "not run" when that file is absent or empty."""
    def wrap(build):
        def section(in_dir, plots, link):
            path = os.path.join(in_dir, f"{name}.csv")
            rows = read_bench_rows(in_dir, name)
            if not rows:
                return section_not_run(title, path)
            return build(rows, plots, link)
        return section
    return wrap


def bad_label(status):
    """The legend text of a point that was not measured, from the bench's refusal reason."""
    if re.search(r"needs .*limit", status):
        return "did not fit in memory"
    if re.search(r"predicted .*limit", status):
        return "predicted too slow"
    return status.split(":")[0].strip() or "not measured"


# ---------------------------------------------------------------------------------------------
# Plotting
# ---------------------------------------------------------------------------------------------

@dataclass
class Series:
    """One line of a sweep plot: rows sharing a configuration, drawn in one style."""
    label: str
    rows: list
    color: tuple
    linestyle: str = "-"
    marker: str = "o"


def new_axes(title, xlabel, ylabel, logx=False, logy=False):
    fig, ax = plt.subplots(figsize=(8, 5.2))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)  # the sweeps double N
    if logy:
        ax.set_yscale("log")
    # Plain numbers ("1,024", "200,000", "0.5") read faster than 2^10 or 2×10^5. After the
    # scales, which install their own formatters.
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    if logy:
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: minor_log_label(ax, v)))
    ax.grid(True, which="major", alpha=0.5)
    ax.grid(True, which="minor", alpha=0.15)
    return fig, ax


def plain_number(v, _position=None):
    return f"{v:,.0f}" if abs(v) >= 1 and v == int(v) else f"{v:g}"


def minor_log_label(ax, v):
    """Labels for minor ticks of a log y axis, so that a short span still has numbers: all of
    them under one decade, 2 and 5 under two, none above."""
    low, high = ax.get_ylim()
    decades = math.log10(high / low)
    mantissa = round(v / 10 ** math.floor(math.log10(v)), 6)
    return plain_number(v) if decades < 1 or (decades < 2 and mantissa in (2, 5)) else ""


def plot_ok(ax, s, x_field, y_field, label, linestyle):
    """The points of s that ran, as a line."""
    ok = [(number(r[x_field]), number(r[y_field])) for r in s.rows if is_ok(r)]
    ok = sorted((x, y) for x, y in ok if x is not None and y is not None and y > 0)
    if ok:
        ax.plot([x for x, _ in ok], [y for _, y in ok], color=s.color, linestyle=linestyle,
                marker=s.marker, markersize=4, label=label)


def mark_not_run(ax, s, x_field, slot):
    """The points of s that did not run, as markers near the top edge, named by s's label.

    They sit at x = N in data coordinates and at a fixed height in axes coordinates, a row per
    series (slot), so that a size that could not run stays visible instead of vanishing.
    Returns the legend labels of the markers drawn.
    """
    bad = [r for r in s.rows if not is_ok(r) and number(r[x_field]) is not None]
    height = 0.96 - 0.045 * slot
    labels = {bad_label(status_of(r)) for r in bad}
    for label in labels:
        xs = [number(r[x_field]) for r in bad if bad_label(status_of(r)) == label]
        ax.plot(xs, [height] * len(xs), transform=ax.get_xaxis_transform(), color=s.color,
                marker=bad_marker(label), markersize=9, markeredgewidth=2, linestyle="none",
                clip_on=False)
    if bad:
        ax.annotate(s.label, xy=(min(number(r[x_field]) for r in bad), height),
                    xycoords=ax.get_xaxis_transform(), xytext=(-9, 0),
                    textcoords="offset points", ha="right", va="center", fontsize=7,
                    color=s.color)
    return labels


def bad_marker(label):
    return BAD_MARKERS.get(label, "*")


def reserve_top_band(ax, logy, fraction):
    """Raises the top of the y axis so that the top fraction, where the markers of points that
    did not run sit, holds no data line."""
    bottom, top = ax.get_ylim()
    if logy:
        bottom, top = math.log10(bottom), math.log10(top)
    top = bottom + (top - bottom) / (1 - fraction)
    ax.set_ylim(top=10 ** top if logy else top)


def finish(fig, ax, path, bad_labels, extra_handles=()):
    """Legend (lines, then an entry per kind of point that did not run) and the PNG."""
    handles, _ = ax.get_legend_handles_labels()
    handles += list(extra_handles)
    handles += [Line2D([], [], color="black", marker=bad_marker(label), markeredgewidth=2,
                       linestyle="none", label=f"{label} (top edge, named)")
                for label in sorted(bad_labels)]
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return os.path.basename(path)


def draw_sweep(path, title, xlabel, ylabel, series, x_field, lines, logx=True, logy=True):
    """One figure of series against x_field; lines = [(y_field, linestyle, label suffix)]."""
    fig, ax = new_axes(title, xlabel, ylabel, logx, logy)
    for s in series:
        for y_field, linestyle, suffix in lines:
            plot_ok(ax, s, x_field, y_field, f"{s.label} {suffix}".strip(),
                    linestyle or s.linestyle)
    if not logy:
        ax.set_ylim(bottom=0)  # a linear axis cut above zero exaggerates differences
    bad_series = [s for s in series if any(not is_ok(r) for r in s.rows)]
    bad_labels = set()
    for slot, s in enumerate(bad_series):
        bad_labels |= mark_not_run(ax, s, x_field, slot)
    if bad_series:
        reserve_top_band(ax, logy, 0.06 + 0.045 * len(bad_series))
    return finish(fig, ax, path, bad_labels)


def group(rows, key):
    """Rows grouped by key(row), groups in order of first appearance."""
    groups = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


# ---------------------------------------------------------------------------------------------
# Attention benchmark
# ---------------------------------------------------------------------------------------------

def attention_key(row):
    return (row["device"], row["algo"], row["feature_map"])


def attention_series(rows):
    """A colour per feature map (softmax: its own), a line style per algo, a marker per device."""
    devices = list(group(rows, lambda r: r["device"]))

    def colour_key(r):  # the feature map; without one (softmax, delta, gated), the algo's family
        return r["feature_map"] if r["feature_map"] != "-" else r["algo"].split("_")[0]

    maps = list(group(rows, colour_key))
    series = []
    for (device, algo, fmap), group_rows in group(rows, attention_key).items():
        style = ("--" if "causal" in algo else ":" if "cross" in algo
                 else "-." if "dense" in algo else "-")
        label = algo if fmap == "-" else f"{algo} {fmap}"
        if len(devices) > 1:
            label = f"{device}: {label}"
        series.append(Series(label, group_rows, COLORS[maps.index(colour_key(group_rows[0])) % len(COLORS)],
                             style,
                             DEVICE_MARKERS[devices.index(device) % len(DEVICE_MARKERS)]))
    return series


def draw_attention(rows, plots_dir):
    series = attention_series(rows)
    xlabel = "sequence length N"
    return [
        draw_sweep(os.path.join(plots_dir, "attention_fwd.png"), "Attention forward time",
                   xlabel, "time per call (ms)", series, "N", [("fwd_ms", None, "")]),
        draw_sweep(os.path.join(plots_dir, "attention_fwdbwd.png"),
                   "Attention forward + backward time", xlabel, "time per call (ms)", series, "N",
                   [("fwdbwd_ms", None, "")]),
        draw_sweep(os.path.join(plots_dir, "attention_memory.png"),
                   "Attention forward + backward peak memory", xlabel, "peak memory (MiB)",
                   series, "N", [("fwdbwd_peak_MiB", None, "")]),
    ]


def by_n(rows, device, algo, fmap):
    return {int(number(r["N"])): r for r in rows
            if attention_key(r) == (device, algo, fmap) and number(r["N"]) is not None}


def measured(row, name):
    """The value of a row that ran, when positive (so that it can divide or take a log)."""
    value = number(row[name]) if row is not None and is_ok(row) else None
    return value if value is not None and value > 0 else None


def crossover(ns, linear, softmax):
    """Where linear becomes faster for good, over the N measured for both (ascending).

    Returns a sentence: the smallest N from which linear is faster at every larger N, and the
    N where log(linear/softmax) crosses zero, interpolated linearly in log N between the
    two bracketing N.
    """
    start = len(ns)
    while start > 0 and linear[start - 1] < softmax[start - 1]:
        start -= 1
    if start == len(ns):
        return f"no crossover up to N={fmt_n(ns[-1])}"
    if start == 0:
        measured = fmt_n(ns[0]) if len(ns) == 1 else f"{fmt_n(ns[0])}–{fmt_n(ns[-1])}"
        return f"linear faster at every N measured (N={measured})"
    n0, n1 = ns[start - 1], ns[start]
    r0 = math.log(linear[start - 1] / softmax[start - 1])
    r1 = math.log(linear[start] / softmax[start])
    approx = math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * r0 / (r0 - r1))
    return f"linear faster from N={fmt_n(n1)} (~N={fmt_n(round(approx))} interpolated)"


def first_failure(rows_by_n):
    """(N, status) of the smallest N that did not run, or None."""
    for n in sorted(rows_by_n):
        if not is_ok(rows_by_n[n]):
            return n, status_of(rows_by_n[n])
    return None


# (title, linear algo, softmax algo) of the two crossovers the report states
ATTENTION_PAIRS = [("bidirectional", "linear", "softmax"),
                   ("causal", "linear_causal", "softmax_causal"),
                   ("bidirectional, dense N x N softmax", "linear", "softmax_dense")]
CROSSOVER_MAP = "elu1"


def attention_facts(rows, device, prefix):
    """Headline sentences of one device: crossovers and the memory ratio."""
    facts = []
    for title, lin_algo, soft_algo in ATTENTION_PAIRS:
        lin = by_n(rows, device, lin_algo, CROSSOVER_MAP)
        soft = by_n(rows, device, soft_algo, "-")
        name = f"{prefix}Attention crossover ({title}, forward+backward, {lin_algo} " \
               f"{CROSSOVER_MAP} vs {soft_algo})"
        if not lin or not soft:
            facts.append(f"**{name}:** not run (no {lin_algo} {CROSSOVER_MAP} or {soft_algo} "
                         "rows in attention.csv)")
            continue
        ns = sorted(n for n in lin if measured(lin[n], "fwdbwd_ms") and
                    measured(soft.get(n), "fwdbwd_ms"))
        text = crossover(ns, [number(lin[n]["fwdbwd_ms"]) for n in ns],
                         [number(soft[n]["fwdbwd_ms"]) for n in ns]) if ns else \
            "no N where both ran"
        failure = first_failure(soft)
        if failure:
            text += f"; {soft_algo} did not run from N={fmt_n(failure[0])} ({failure[1]})"
        facts.append(f"**{name}:** {text}")
        facts.append(memory_ratio_fact(prefix, lin, soft, lin_algo, soft_algo))
    return facts


def memory_ratio_fact(prefix, lin, soft, lin_algo, soft_algo):
    ns = [n for n in sorted(soft) if measured(soft[n], "fwdbwd_peak_MiB") and
          measured(lin.get(n), "fwdbwd_peak_MiB")]
    label = f"**{prefix}Peak memory {soft_algo} / {lin_algo} {CROSSOVER_MAP} (forward+backward)"
    if not ns:
        return f"{label}:** no N where both ran"
    n = ns[-1]
    s, l_ = number(soft[n]["fwdbwd_peak_MiB"]), number(lin[n]["fwdbwd_peak_MiB"])
    return f"{label} at N={fmt_n(n)}** (largest N where {soft_algo} ran): " \
           f"{fmt(s)} MiB / {fmt(l_)} MiB = {fmt_ratio(s, l_)}"


def attention_table(rows, device, value_field, unit):
    """N rows × (algo, feature map) columns; a cell that did not run shows its status."""
    series = [k for k in group(rows, attention_key) if k[0] == device]
    ns = sorted({int(number(r["N"])) for r in rows
                 if r["device"] == device and number(r["N"]) is not None})
    cells = {(attention_key(r), int(number(r["N"]))): r for r in rows if number(r["N"]) is not None}
    header = ["N"] + [(a if m == "-" else f"{a} {m}") + f" ({unit})" for _, a, m in series]
    body = []
    for n in ns:
        line = [fmt_n(n)]
        for key in series:
            row = cells.get((key, n))
            line.append("" if row is None else fmt(number(row[value_field])) if is_ok(row)
                        else status_of(row))
        body.append(line)
    return md_table(header, body)


@bench_csv_section("attention", "Attention")
def attention_section(rows, plots, link):
    devices = list(group(rows, lambda r: r["device"]))
    headlines, body = [], []
    shapes = sorted({(r["batch"], r["heads"], r["head_dim"]) for r in rows})
    body.append("Shapes (batch, heads, head dim): " +
                ", ".join(f"({b}, {h}, {d})" for b, h, d in shapes) +
                ". Time is per call; memory is the allocator's peak over forward+backward, "
                "inputs and gradients included.")
    body.append("`softmax` and `softmax_causal` are tarn's blocked kernel: it never stores the "
                "N x N scores, so its memory grows linearly in N like linear attention's, and "
                "its time quadratically. `softmax_dense` materialises the scores as PyTorch "
                "eager does: the quadratic memory the seed experiment argued about. "
                "`linear_cross` attends a source of N keys through the padding-mask path of "
                "the model's cross-attention.")
    body += [link(p) for p in plots]
    for device in devices:
        prefix = f"{device}: " if len(devices) > 1 else ""
        facts = attention_facts(rows, device, prefix)
        headlines += facts
        body.append(f"### {device}" if prefix else "### Crossover and memory")
        body.append(bullets(facts))
        body.append(f"Forward+backward time ({device}):\n\n" +
                    attention_table(rows, device, "fwdbwd_ms", "ms"))
        body.append(f"Forward+backward peak memory ({device}):\n\n" +
                    attention_table(rows, device, "fwdbwd_peak_MiB", "MiB"))
    return headlines, "\n\n".join(body)


# ---------------------------------------------------------------------------------------------
# Training-step benchmark
# ---------------------------------------------------------------------------------------------

def train_series(rows):
    return [Series(f"{attention} {precision}", group_rows, COLORS[i % len(COLORS)])
            for i, ((attention, precision), group_rows)
            in enumerate(group(rows, lambda r: (r["attention"], r["precision"])).items())]


def draw_train(rows, plots_dir):
    series = train_series(rows)
    xlabel = "sequence length N"
    return [
        draw_sweep(os.path.join(plots_dir, "train_throughput.png"), "Training throughput",
                   xlabel, "tokens/s (source + target)", series, "N",
                   [("tokens_per_s", None, "")], logy=False),
        draw_sweep(os.path.join(plots_dir, "train_memory.png"),
                   "Training memory (solid: allocator peak, dashed: RSS peak)", xlabel,
                   "peak memory (MiB)", series, "N",
                   [("alloc_peak_MiB", "-", "alloc"), ("rss_peak_MiB", "--", "RSS")]),
    ]


def train_facts(rows):
    """Per precision and per non-softmax attention: the largest N where it and softmax both ran."""
    facts = []
    for precision, prec_rows in group(rows, lambda r: r["precision"]).items():
        by_att = {a: {int(number(r["N"])): r for r in ar if number(r["N"]) is not None}
                  for a, ar in group(prec_rows, lambda r: r["attention"]).items()}
        soft = by_att.get("softmax")
        if not soft:
            continue
        for attention, rows_by_n in by_att.items():
            if attention == "softmax":
                continue
            ns = both_ran(soft, rows_by_n)
            text = train_comparison(precision, attention, "softmax", soft, rows_by_n, ns[-1]) if ns else \
                f"**Training step ({precision}), {attention} vs softmax:** no N where both ran"
            failure = first_failure(soft)
            if failure:
                text += f"; softmax did not run from N={fmt_n(failure[0])} ({failure[1]})"
            facts.append(text)
        facts += linear_facts(precision, by_att)
    return facts


def linear_facts(precision, by_att):
    """Each recipe's own attention against linear (elu1) at the shortest N where both ran: the
    price of its recurrence at short lengths, where every linear kind is cheap."""
    lin = by_att.get("linear")
    facts = []
    for attention, rows_by_n in by_att.items():
        if not lin or not attention.startswith("recipe"):
            continue
        ns = both_ran(lin, rows_by_n)
        if ns:
            facts.append(train_comparison(precision, attention, "linear", lin, rows_by_n, ns[0]))
    return facts


def both_ran(ref, other):
    """The lengths, ascending, where both {N: row} maps have a measured tokens/s."""
    return [n for n in sorted(ref) if measured(ref[n], "tokens_per_s")
            and measured(other.get(n), "tokens_per_s")]


def train_cell(row, column):
    if column in ("attention", "precision"):
        return row[column]
    if column in ("N", "batch", "tokens_per_batch"):
        return fmt_n(number(row[column]))
    return fmt(number(row[column]))


def train_comparison(precision, attention, ref_name, ref, other, n):
    s, a = ref[n], other[n]
    return (f"**Training step ({precision}) at N={fmt_n(n)}:** {attention} "
            f"{fmt(number(a['tokens_per_s']))} tokens/s vs {ref_name} "
            f"{fmt(number(s['tokens_per_s']))} tokens/s "
            f"({fmt_ratio(number(a['tokens_per_s']), number(s['tokens_per_s']))}); "
            f"allocator peak {fmt(number(a['alloc_peak_MiB']))} vs "
            f"{fmt(number(s['alloc_peak_MiB']))} MiB")


@bench_csv_section("train", "Training step")
def train_section(rows, plots, link):
    facts = train_facts(rows)
    columns = ["attention", "precision", "N", "batch", "tokens_per_batch", "step_ms",
               "tokens_per_s", "alloc_peak_MiB", "rss_peak_MiB"]
    table = md_table(columns + ["status"], [[train_cell(r, c) for c in columns] + [status_of(r)]
                                            for r in rows])
    body = ["Tokens/s counts source and target tokens."] + [link(p) for p in plots]
    body += [bullets(facts), table]
    return facts, "\n\n".join(b for b in body if b)


# ---------------------------------------------------------------------------------------------
# Decoding benchmark
# ---------------------------------------------------------------------------------------------

def draw_decode(rows, plots_dir):
    series = [Series(attention, group_rows, COLORS[i % len(COLORS)])
              for i, (attention, group_rows) in enumerate(group(rows, lambda r: r["attention"])
                                                          .items())]
    xlabel = "decoded position"
    return [
        draw_sweep(os.path.join(plots_dir, "decode_latency.png"),
                   "Incremental decoding: latency per token", xlabel, "ms per token", series,
                   "position", [("ms_per_token", None, "")], logx=False, logy=False),
        draw_sweep(os.path.join(plots_dir, "decode_memory.png"),
                   "Incremental decoding: state (softmax: KV cache, linear: recurrent state)",
                   xlabel, "state (MiB)", series, "position", [("state_MiB", None, "")],
                   logx=False, logy=False),
    ]


def last_position(rows):
    ok = [r for r in rows if is_ok(r) and number(r["position"]) is not None]
    return max(ok, key=lambda r: number(r["position"])) if ok else None


def decode_facts(rows):
    last = {a: last_position(ar) for a, ar in group(rows, lambda r: r["attention"]).items()}
    last = {a: r for a, r in last.items() if r is not None}
    facts = [f"**Decoding, {a} at position {fmt_n(number(r['position']))}:** "
             f"{fmt(number(r['ms_per_token']))} ms/token, state {fmt(number(r['state_MiB']))} MiB"
             for a, r in last.items()]
    soft = last.get("softmax")
    for attention, r in last.items():
        if soft is None or attention == "softmax":
            continue
        ratio_ms = fmt_ratio(number(soft["ms_per_token"]), number(r["ms_per_token"]))
        ratio_mib = fmt_ratio(number(soft["state_MiB"]), number(r["state_MiB"]))
        facts.append(f"**Decoding softmax / {attention}** (each at its largest position): "
                     f"latency {ratio_ms}, state {ratio_mib}")
    return facts


def decode_table(rows):
    attentions = list(group(rows, lambda r: r["attention"]))
    cells = {(r["attention"], number(r["position"])): r for r in rows}
    positions = sorted({p for _, p in cells if p is not None})
    # The plots show every point; the table keeps about ten, the last among them.
    stride = max(1, len(positions) // 10)
    positions = positions[stride - 1::stride] + ([] if len(positions) % stride == 0 else positions[-1:])
    header = ["position"] + [f"{a} ms/token" for a in attentions] + \
             [f"{a} state MiB" for a in attentions]
    body = []
    for p in positions:
        found = [cells.get((a, p)) for a in attentions]
        body.append([fmt_n(p)] +
                    [decode_cell(r, "ms_per_token") for r in found] +
                    [decode_cell(r, "state_MiB") for r in found])
    return md_table(header, body)


def decode_cell(row, name):
    if row is None:
        return ""
    return fmt(number(row[name])) if is_ok(row) else status_of(row)


@bench_csv_section("decode", "Decoding")
def decode_section(rows, plots, link):
    facts = decode_facts(rows)
    body = [link(p) for p in plots] + [bullets(facts), decode_table(rows)]
    return facts, "\n\n".join(body)


# ---------------------------------------------------------------------------------------------
# Training runs (quality and long sequences)
# ---------------------------------------------------------------------------------------------

def final_valid_ppl(run):
    return number(run.valid[-1]["ppl"]) if run.valid else None


def wall_s(run):
    return number(run.valid[-1]["elapsed_s"]) if run.valid else None


def tokens_per_s(run):
    if not run.train:
        return None
    last = run.train[-1]
    elapsed = number(last["elapsed_s"])
    return number(last["tokens_seen"]) / elapsed if elapsed else None


def peak_rss_mib(runs):
    peaks = [number(v.get("rss_peak_bytes")) for r in runs for v in r.valid]
    peaks = [p for p in peaks if p is not None]
    return max(peaks) / MIB if peaks else None


def present(values):
    return [v for v in values if v is not None]


def mean_or_none(values):
    values = present(values)
    return statistics.mean(values) if values else None


def per_seed(runs, value):
    return ", ".join(f"{r.seed}: {fmt(value(r))}" for r in runs)


def test_ppls(runs):
    return present(r.test.get("ppl") for r in runs)


def reference_setting(runs):
    """The softmax baseline the other settings are compared with."""
    return next((s for s in runs if s.endswith("softmax")), None)


def runs_table(runs, with_test):
    header = ["setting", "seeds", "final valid ppl mean (min–max)", "valid ppl per seed"]
    if with_test:
        header += ["test ppl mean (min–max)", "test ppl per seed"]
    header += ["wall time (min, mean)", "tokens/s (mean)", "peak RSS (MiB)"]
    body = []
    for setting, seeds in runs.items():
        line = [setting, str(len(seeds)), mean_range(present(map(final_valid_ppl, seeds))),
                per_seed(seeds, final_valid_ppl)]
        if with_test:
            line += [mean_range(test_ppls(seeds)), per_seed(seeds, lambda r: r.test.get("ppl"))]
        wall = mean_or_none(map(wall_s, seeds))
        line += [fmt(wall / 60 if wall is not None else None),
                 fmt(mean_or_none(map(tokens_per_s, seeds))), fmt(peak_rss_mib(seeds))]
        body.append(line)
    return md_table(header, body)


def unparsable_note(runs):
    skipped = [f"{s}/{r.seed}: {r.unparsable_lines}" for s, seeds in runs.items() for r in seeds
               if r.unparsable_lines]
    return ("Unparsable metrics.jsonl lines skipped (a run stopped mid-write): " +
            ", ".join(skipped) + ".") if skipped else ""


def quality_gap(setting, seeds, ref, ref_seeds):
    """Mean test ppl gap to the softmax baseline, judged against the spread over seeds."""
    test, ref_test = test_ppls(seeds), test_ppls(ref_seeds)
    if not test or not ref_test:
        return f"**Quality, {setting} vs {ref}:** no test ppl for both settings"
    mean, ref_mean = statistics.mean(test), statistics.mean(ref_test)
    gap = mean - ref_mean
    valid = mean_or_none(map(final_valid_ppl, seeds))
    ref_valid = mean_or_none(map(final_valid_ppl, ref_seeds))
    valid_text = (f"final valid ppl {fmt(valid)} vs {fmt(ref_valid)} "
                  f"({fmt_ratio(valid, ref_valid)}); ") if valid and ref_valid else ""
    text = (f"**Quality, {setting} vs {ref}:** {valid_text}test ppl {fmt(mean)} vs "
            f"{fmt(ref_mean)} ({gap / ref_mean * 100:+.1f} %")
    if len(test) < 2 or len(ref_test) < 2:
        return text + "); seed noise not measured (fewer than 2 seeds)"
    noise = max(max(test) - min(test), max(ref_test) - min(ref_test))
    verdict = "larger than seed noise" if abs(gap) > noise else "within seed noise"
    return text + f", Δ {fmt(gap)} ppl; seed spread {fmt(noise)} ppl): {verdict}"


def draw_runs(runs, path, title, x_of, xlabel, threshold=None):
    """Validation ppl curves: a colour per setting, a line style per seed."""
    fig, ax = new_axes(title, xlabel, "validation perplexity", logy=True)
    seed_names = sorted({r.seed for seeds in runs.values() for r in seeds}, key=seed_key)
    for i, seeds in enumerate(runs.values()):
        for run in seeds:
            ax.plot([x_of(v) for v in run.valid], [number(v["ppl"]) for v in run.valid],
                    color=COLORS[i % len(COLORS)],
                    linestyle=SEED_STYLES[seed_names.index(run.seed) % len(SEED_STYLES)],
                    marker="o", markersize=3)
    handles = [Line2D([], [], color=COLORS[i % len(COLORS)], label=s) for i, s in enumerate(runs)]
    handles += [Line2D([], [], color="grey", linestyle=SEED_STYLES[i % len(SEED_STYLES)], label=s)
                for i, s in enumerate(seed_names)]
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle=":", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle=":",
                              label=f"target ppl {fmt(threshold)}"))
    return finish(fig, ax, path, set(), handles)




def training_runs_section(folder, title):
    """Turns build(runs, plots, link) into a section(in_dir, plots, link) that reads its runs
    from in_dir/folder, and says "not run" when there are none (as bench_csv_section)."""
    def wrap(build):
        def section(in_dir, plots, link):
            root = os.path.join(in_dir, folder)
            runs = read_runs(root)
            if not runs:
                return section_not_run(title, f"{root}/<setting>/seed<k>/metrics.jsonl")
            return build(runs, plots, link, shared_note(root))
        return section
    return wrap


def shared_note(root):
    """What root/jobs.txt (experiment.sh --jobs J, a line per invocation) and root/device.txt
    (--device D, a line per finished run) say of the times and of where the runs trained."""
    jobs = [number(line) for line in (read_text(os.path.join(root, "jobs.txt")) or "").split()]
    jobs = max((j for j in jobs if j is not None), default=1)
    devices = sorted(set((read_text(os.path.join(root, "device.txt")) or "cpu").split()))
    notes = []
    if devices != ["cpu"]:
        notes.append(f"These runs trained on {', '.join(devices)} (experiment.sh --device): the same "
                     "recipes, data and token budget as on the CPU, so the same perplexities up to "
                     "the order of f32 rounding; their wall times are not the CPU's.")
    if jobs > 1:
        notes.append(f"These runs shared the machine, up to {int(jobs)} at a time (experiment.sh --jobs): "
                     "their wall times and tokens/s are not speeds. The perplexity at a step does not "
                     "depend on it.")
    return " ".join(notes)


def runs_body(intro, plots, link, runs, with_test, facts):
    """A section of runs: its intro, plots, the runs' table, what did not parse, the facts."""
    body = [intro] + [link(p) for p in plots]
    body += [runs_table(runs, with_test=with_test), unparsable_note(runs), bullets(facts)]
    return "\n\n".join(b for b in body if b)


@training_runs_section("quality", "Quality")
def quality_section(runs, plots, link, note):
    ref = reference_setting(runs)
    facts = ["**Quality, test ppl (mean over seeds):** " +
             "; ".join(f"{s} {mean_range(test_ppls(seeds))}" for s, seeds in runs.items())]
    gaps = [quality_gap(s, seeds, ref, runs[ref]) for s, seeds in runs.items() if s != ref] \
        if ref is not None else ["no softmax setting: no quality gaps to state"]
    intro = ("Final validation ppl is the last validation record of each run; test ppl comes from "
             "`tarn eval` (test.txt). Seed spread is max − min over seeds; a gap counts as real "
             "only when it exceeds the larger spread of the two settings. " + note).strip()
    return facts + gaps, runs_body(intro, plots, link, runs, True, gaps)


def target_ppl(runs):
    """The largest of the runs' best validation ppl: the target every run reaches."""
    bests = [min(number(v["ppl"]) for v in r.valid) for seeds in runs.values() for r in seeds
             if r.valid]
    return max(bests) if bests else None


def first_reaching(run, target, field):
    """`field` (elapsed_s, tokens_seen) of the run's first validation record at or below target."""
    return next((number(v[field]) for v in run.valid if number(v["ppl"]) <= target), None)


def long_facts(runs, target):
    times = {s: mean_or_none(first_reaching(r, target, "elapsed_s") for r in seeds)
             for s, seeds in runs.items()}
    tokens = {s: mean_or_none(first_reaching(r, target, "tokens_seen") for r in seeds)
              for s, seeds in runs.items()}
    facts = [f"**Long sequences, time to validation ppl {fmt(target)}:** " +
             "; ".join(f"{s} {fmt(t / 60 if t is not None else None)} min"
                       for s, t in times.items()),
             f"**Long sequences, tokens to validation ppl {fmt(target)} (equal tokens):** " +
             "; ".join(f"{s} {fmt(t / 1e6 if t is not None else None)} M"
                       for s, t in tokens.items())]
    ref = reference_setting(runs)
    for setting, t in times.items():
        if ref is not None and setting != ref:
            facts.append(f"**Long sequences, speed-up {ref} time / {setting} time:** "
                         f"{fmt_ratio(times[ref], t)}")
    return facts


@training_runs_section("long", "Long sequences")
def long_section(runs, plots, link, note):
    target = target_ppl(runs)
    facts = long_facts(runs, target) if target is not None else []
    intro = ("The target perplexity is the largest of the runs' best validation ppl, so every run "
             "reaches it; its time and its tokens are the elapsed time and the tokens seen (source "
             "and target) at the first validation record at or below it (mean over seeds). " +
             note).strip()
    return facts, runs_body(intro, plots, link, runs, False, facts)


TASK_ORDER = ["reverse", "offset", "skip", "long-reverse", "long-offset", "long-skip"]
TASK_TEXT = {"reverse": "the source's words in reverse order",
             "offset": "the second half of the words, then the first half",
             "skip": "every other word (the first, third, ...)"}


def read_tasks(root):
    """{task: {setting: [Run]}} from root/<task>/<setting>/seed<k>; None without any."""
    if not os.path.isdir(root):
        return None
    names = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))]
    names = [t for t in TASK_ORDER if t in names] + sorted(set(names) - set(TASK_ORDER))
    tasks = {t: read_runs(os.path.join(root, t)) for t in names}
    tasks = {t: runs for t, runs in tasks.items() if runs}
    return tasks or None


def task_text(task):
    if task.startswith("long-"):
        return TASK_TEXT.get(task[5:], task[5:]) + ", on sources of 512 words or more"
    return TASK_TEXT.get(task, task)


def tasks_section(in_dir, plots, link):
    """Alignments other than the diagonal (issue 53): per task and setting, the final validation
    ppl (mean over seeds) and its ratio to softmax's at the same step."""
    root = os.path.join(in_dir, "tasks")
    tasks = read_tasks(root)
    if not tasks:
        return section_not_run("Alignments other than the diagonal", f"{root}/<task>/<setting>/seed<k>")
    settings = ordered_settings(sorted({s for runs in tasks.values() for s in runs}))
    header = ["task", "step"] + [f"{s} valid ppl (× softmax); test ppl (×)" for s in settings] + ["seeds"]
    body, facts = [], []
    for task, runs in tasks.items():
        ref = reference_setting(runs)
        steps = final_steps(runs)
        cells = []
        for s in settings:
            mine = runs.get(s, [])
            ppls, tests = present(map(final_valid_ppl, mine)), test_ppls(mine)
            # Against softmax's runs of the same seeds: one seed's ratio to three seeds' mean would
            # compare the seeds as much as the attention.
            my_seeds = {r.seed for r in mine}
            ref_runs = [r for r in runs[ref] if r.seed in my_seeds] if ref else []
            ref_ppl = mean_or_none(map(final_valid_ppl, ref_runs))
            ref_test = mean_or_none(test_ppls(ref_runs))
            cells.append("—" if not ppls else
                         f"{mean_range(ppls)} ({fmt_ratio(mean_or_none(ppls), ref_ppl)}); "
                         f"{mean_range(tests)} ({fmt_ratio(mean_or_none(tests), ref_test)})")
        seeds = sorted({len(v) for v in runs.values()})
        body.append([f"{task}: {task_text(task)}", steps] + cells +
                    ["/".join(map(str, seeds))])
        facts.append(f"**{task}, final valid ppl:** " +
                     "; ".join(f"{s} {fmt(mean_or_none(map(final_valid_ppl, seeds)))}" for s, seeds in runs.items()))
    intro = ("Sequence-to-sequence pairs from the same glosses (`tools/experiment/tasks.py`), source and "
             "target one SentencePiece sequence each (`data.kind: pairs`); 512-token batches, and on the "
             "long sources 2,048-token batches and 1,024 positions. A long task's run is the last stage "
             "of its length curriculum (the table below it; its steps are that stage's). The final "
             "validation ppl is each run's last validation record (a few batches of valid.tsv), all "
             "settings of a task at the same step; "
             "test ppl is `tarn eval` on the whole test.tsv; × softmax is the ratio of the means over the "
             "seeds both settings ran. " + shared_note(root)).strip()
    out = [intro] + [link(p) for p in plots] + [md_table(header, body)]
    stages = curriculum_table(os.path.join(in_dir, "curriculum"))
    if stages:
        out.append(stages)
    return facts, "\n\n".join(out)


def final_steps(runs):
    """The steps of the last validation records of {setting: [Run]}, as "1200" or "600/1200"."""
    return "/".join(str(x) for x in sorted({r.valid[-1]["step"] for seeds in runs.values()
                                            for r in seeds if r.valid}))


def stage_key(name):
    """A curriculum stage's order: its task, the short task first, then by source length."""
    task, _, words = name.rpartition("-w")
    if not task.startswith("long-") or not words.isdigit():
        return (name, 0)
    return (task[5:], int(words))


def curriculum_table(root):
    """The long tasks' length curriculum (tools/experiment.sh): each stage's final validation ppl
    per setting, mean over seeds; None where no stage ran."""
    stages = read_tasks(root)
    if not stages:
        return None
    settings = ordered_settings(sorted({s for runs in stages.values() for s in runs}))
    body = []
    for name in sorted(stages, key=stage_key):
        runs = stages[name]
        task, words = stage_key(name)
        what = f"{task}, sources of {words}+ words" if words else f"{task} (1,024 positions)"
        steps = final_steps(runs)
        body.append([what, steps] +
                    [mean_range(present(map(final_valid_ppl, runs.get(s, [])))) for s in settings] +
                    ["/".join(str(len(v)) for v in runs.values())])
    return ("The long tasks' length curriculum, stage by stage, each from the last one's weights "
            "(final validation ppl, mean over seeds):\n\n" +
            md_table(["stage", "steps"] + settings + ["seeds"], body))


def draw_tasks(tasks, plots_dir):
    return [draw_runs(runs, os.path.join(plots_dir, f"tasks_{task}_valid.png"),
                      f"{task}: validation perplexity vs step", lambda v: number(v["step"]), "step")
            for task, runs in tasks.items()]


LINEARIZE_VARIANTS = ["linear-encoder", "all-linear", "all-delta"]
LINEARIZE_MODES = [("linearized", "linearized (transfer + fine-tune)"),
                   ("init-only", "teacher's weights, no transfer"), ("scratch", "from scratch"),
                   ("scratch-long", "from scratch, the teacher's steps too")]


def read_linearize(root):
    """root/results.tsv of tools/experiment/linearize.sh as {(variant, mode): [test ppl]}, plus
    the mode names with their step counts ({"linearized": "linearized-50+50", ...}); None
    without any."""
    path = os.path.join(root, "results.tsv")
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    results, names = {}, {}
    for r in rows:
        ppl, mode = number(r.get("test_ppl")), r.get("mode") or ""
        if ppl is None:
            continue
        kind = "teacher" if mode.startswith("softmax-") else mode.rsplit("-", 1)[0]
        names[kind] = mode
        results.setdefault((r["variant"], kind), []).append(ppl)
    return (results, names) if results else None


def draw_linearize(lin, plots_dir):
    results, names = lin
    teacher = mean_or_none(results.get(("teacher", "teacher"), []))
    variants = [v for v in LINEARIZE_VARIANTS if any((v, m) in results for m, _ in LINEARIZE_MODES)]
    fig, ax = new_axes("Linearizing a softmax teacher: test perplexity", "variant",
                       "test perplexity (mean of seeds; dots: seeds)", logy=True)
    width = 0.8 / len(LINEARIZE_MODES)
    for j, (mode, label) in enumerate(LINEARIZE_MODES):
        xs = [i + (j - (len(LINEARIZE_MODES) - 1) / 2) * width for i in range(len(variants))]
        means = [mean_or_none(results.get((v, mode), [])) for v in variants]
        ax.bar([x for x, m in zip(xs, means) if m], [m for m in means if m], width, color=COLORS[j],
               label=f"{label}: {names.get(mode, mode)}")
        for x, v in zip(xs, variants):
            seeds = results.get((v, mode), [])
            ax.plot([x] * len(seeds), seeds, "k.", markersize=4)
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants)
    ax.grid(False, axis="x", which="both")
    if teacher:
        ax.axhline(teacher, color="black", linestyle="--", linewidth=1,
                   label=f"teacher ({names.get('teacher', 'softmax')}) {fmt(teacher)}")
        ax.axhline(1.05 * teacher, color="black", linestyle=":", linewidth=1,
                   label=f"1.05× the teacher {fmt(1.05 * teacher)}")
    continued = mean_or_none(results.get(("teacher", "continued"), []))
    if continued:
        ax.axhline(continued, color="grey", linestyle="-.", linewidth=1,
                   label=f"teacher + {names['continued'].rsplit('-', 1)[1]} steps {fmt(continued)}")
    return [finish(fig, ax, os.path.join(plots_dir, "linearize_test_ppl.png"), set())]


def linearize_section(in_dir, plots, link):
    """Issue 55, item 7: a softmax teacher linearized into three variants, against the same
    variants from the teacher's weights without transfer and from scratch, same steps, and from
    scratch for the teacher's steps too."""
    root = os.path.join(in_dir, "linearize")
    lin = read_linearize(root)
    if not lin:
        return section_not_run("Linearizing a softmax model", f"{root}/results.tsv")
    results, names = lin
    teacher = mean_or_none(results.get(("teacher", "teacher"), []))
    header = ["variant"] + [f"{label}: {names.get(m, m)}, test ppl (× teacher)" for m, label in LINEARIZE_MODES] \
        + ["seeds"]
    body, facts = [], []
    for v in [v for v in LINEARIZE_VARIANTS if any((v, m) in results for m, _ in LINEARIZE_MODES)]:
        cells = []
        for m, _ in LINEARIZE_MODES:
            seeds = results.get((v, m), [])
            cells.append(f"{mean_range(seeds)} ({fmt_ratio(mean_or_none(seeds), teacher)})" if seeds else "—")
        body.append([v] + cells + ["/".join(str(len(results.get((v, m), []))) for m, _ in LINEARIZE_MODES)])
        lin_mean = mean_or_none(results.get((v, "linearized"), []))
        if lin_mean is not None:
            verdicts = []
            for m, label in (("scratch", "from scratch"),
                             ("scratch-long", "from scratch for the teacher's steps too")):
                other = mean_or_none(results.get((v, m), []))
                if other is not None:
                    verdicts.append(f"{'better' if lin_mean < other else 'NOT better'} than {label} ({fmt(other)})")
            facts.append(f"**Linearized {v}:** test ppl {fmt(lin_mean)}, {fmt_ratio(lin_mean, teacher)} the "
                         f"teacher's {fmt(teacher)}" + "".join(", " + x for x in verdicts))
    continued = results.get(("teacher", "continued"), [])
    rows = [md_table(header, body)]
    if continued:
        rows.append(f"The teacher itself, trained the same {names['continued'].rsplit('-', 1)[1]} steps more with "
                    f"the fine-tune's optimizer (softmax, no change of attention): test ppl {mean_range(continued)} "
                    f"({fmt_ratio(mean_or_none(continued), teacher)} the teacher), {len(continued)} seed{'s' if len(continued) > 1 else ''}.")
    teacher_steps = names.get("teacher", "softmax-?").rsplit("-", 1)[1]
    intro = ("A softmax model (`recipes/small-softmax.yaml`) trained as the \"pretrained\" teacher "
             f"({teacher_steps} steps: test ppl {fmt(teacher)}), then each variant three ways over "
             "the same steps: linearized (`model.init_from` the teacher, `linearize.steps` of attention transfer, "
             "then ordinary training), from the teacher's weights without the transfer, and from scratch; "
             "and from scratch for the teacher's steps plus those, all the steps behind a linearized model "
             "spent on the variant alone (`tools/experiment/linearize.sh`; its `results.tsv`). "
             "linear-encoder: Hedgehog linear attention in the encoder, softmax elsewhere; all-linear: "
             "Hedgehog in every stack; all-delta: the delta rule in every stack. Test ppl is the run's "
             "`[test]` line (the whole test.txt); the mean (range) over seeds.")
    return facts, "\n\n".join([intro] + [link(p) for p in plots] + rows)


def draw_quality(runs, plots_dir):
    return [
        draw_runs(runs, os.path.join(plots_dir, "quality_valid_vs_tokens.png"),
                  "Validation perplexity vs tokens seen", lambda v: number(v["tokens_seen"]),
                  "tokens seen (source + target)"),
        draw_runs(runs, os.path.join(plots_dir, "quality_valid_vs_time.png"),
                  "Validation perplexity vs wall time", lambda v: number(v["elapsed_s"]) / 60,
                  "wall time (min)"),
    ]


def draw_long(runs, plots_dir):
    return [draw_runs(runs, os.path.join(plots_dir, "long_valid_vs_tokens.png"),
                      "Long sequences: validation perplexity vs tokens seen",
                      lambda v: number(v["tokens_seen"]), "tokens seen (source + target)",
                      threshold=target_ppl(runs)),
            draw_runs(runs, os.path.join(plots_dir, "long_valid_vs_time.png"),
                      "Long sequences: validation perplexity vs wall time",
                      lambda v: number(v["elapsed_s"]) / 60, "wall time (min)",
                      threshold=target_ppl(runs))]


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------

BENCH_DRAWERS = (("attention", draw_attention), ("train", draw_train), ("decode", draw_decode))


def draw_all(in_dir, plots_dir, only=None):
    """Every plot whose data exists (only the bench `only`'s when given); {section: [png
    file names]}."""
    os.makedirs(plots_dir, exist_ok=True)
    drawn = {}
    for name, draw in BENCH_DRAWERS:
        if only is not None and name != only:
            continue
        rows = read_bench_rows(in_dir, name)
        drawn[name] = draw(rows, plots_dir) if rows else []
    if only is not None:
        return drawn
    for name, draw in (("quality", draw_quality), ("long", draw_long)):
        runs = read_runs(os.path.join(in_dir, name))
        drawn[name] = draw(runs, plots_dir) if runs else []
    tasks = read_tasks(os.path.join(in_dir, "tasks"))
    drawn["tasks"] = draw_tasks(tasks, plots_dir) if tasks else []
    lin = read_linearize(os.path.join(in_dir, "linearize"))
    drawn["linearize"] = draw_linearize(lin, plots_dir) if lin else []
    return drawn


def machine_section(in_dir):
    metas = [(name, read_json(os.path.join(in_dir, name))) for name in META_FILES]
    metas = [(name, meta) for name, meta in metas if meta]
    if not metas:
        return not_run(*(os.path.join(in_dir, n) for n in META_FILES))
    first_name, first = metas[0]
    rows = [[META_LABELS.get(k, k), fmt(v) if isinstance(v, float) else str(v)]
            for k, v in first.items() if k != "command"]
    text = f"From `{first_name}`.\n\n" + md_table(["", "value"], rows)
    # A bench run on another machine or commit would make the sections incomparable: say so.
    for name, meta in metas[1:]:
        differs = [f"{k} {meta[k]}" for k in META_LABELS if k in meta and meta[k] != first.get(k)
                   and k not in ("date", "sgemm_gflops")]
        if differs:
            text += f"\n\n`{name}` differs: " + ", ".join(differs) + "."
    return text


def commands_section(in_dir):
    metas = [(name, read_json(os.path.join(in_dir, name))) for name in META_FILES]
    parts = [bullets(f"`{name}`: `{meta['command']}`" for name, meta in metas
                     if meta and meta.get("command"))]
    commands = read_text(os.path.join(in_dir, "commands.txt"))
    if commands and commands.strip():
        parts.append("Commands run by the experiment script (`commands.txt`):\n\n```sh\n" +
                     commands.strip("\n") + "\n```")
    else:
        parts.append(not_run(os.path.join(in_dir, "commands.txt")))
    return "\n\n".join(p for p in parts if p)


SECTIONS = [("attention", "Attention kernels (`tarn bench attention`)", attention_section),
            ("train", "Training step (`tarn bench train`)", train_section),
            ("decode", "Incremental decoding (`tarn bench decode`)", decode_section),
            ("quality", "Quality: small models, several seeds", quality_section),
            ("long", "Long sequences", long_section),
            ("tasks", "Alignments other than the diagonal (issue 53)", tasks_section),
            ("linearize", "Linearizing a softmax model (issue 55)", linearize_section)]


def mode_line(in_dir):
    mode = (read_text(os.path.join(in_dir, "mode.txt")) or "").strip()
    if not mode:
        return "Mode: not recorded (`mode.txt` absent)."
    if mode == "quick":
        return f"Mode: **{mode}** (reduced sizes and steps: the numbers show trends, not final " \
               "figures)."
    return f"Mode: **{mode}**."


def build_markdown(in_dir, drawn, plots_rel):
    def link(png):
        return f"![{png[:-4]}]({plots_rel}/{png})"

    headlines, bodies = [], []
    for key, title, section in SECTIONS:
        facts, body = section(in_dir, drawn.get(key, []), link)
        headlines += facts
        bodies.append(f"## {title}\n\n{body}")
    top = ["# Experiment: linear against softmax attention",
           "> Generated by tools/experiment.sh (tools/experiment/report.py); do not edit by hand.",
           mode_line(in_dir),
           "## Headline numbers",
           bullets(headlines),
           f"## Machine\n\n{machine_section(in_dir)}",
           f"## Commands\n\n{commands_section(in_dir)}"]
    return "\n\n".join(top + bodies) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in", dest="in_dir", required=True, help="experiment folder")
    parser.add_argument("--doc", help="markdown report to write (required without --plots-only)")
    parser.add_argument("--plots-dir", help="PNG folder (default: <dir of --doc>/experiment, or "
                        "--in with --only)")
    parser.add_argument("--plots-only", action="store_true", help="draw the plots, no markdown")
    parser.add_argument("--only", choices=[name for name, _ in BENCH_DRAWERS],
                        help="draw this bench's plots only (implies --plots-only)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.in_dir):
        parser.error(f"--in {args.in_dir}: not a folder")
    if args.only:
        args.plots_only = True
        if not os.path.isfile(os.path.join(args.in_dir, f"{args.only}.csv")):
            parser.error(f"--only {args.only}: no {args.only}.csv in {args.in_dir}")
    if args.doc is None and not args.plots_only:
        parser.error("--doc is required unless --plots-only or --only")
    if args.plots_dir:
        plots_dir = args.plots_dir
    elif args.doc:
        plots_dir = os.path.join(os.path.dirname(os.path.abspath(args.doc)), "experiment")
    else:
        plots_dir = args.in_dir
    drawn = draw_all(args.in_dir, plots_dir, args.only)
    pngs = [os.path.join(plots_dir, p) for names in drawn.values() for p in names]
    print(f"[report] {len(pngs)} plots in {plots_dir}" + (": " + ", ".join(pngs) if args.only else ""))
    if args.plots_only:
        return 0
    doc_dir = os.path.dirname(os.path.abspath(args.doc))
    os.makedirs(doc_dir, exist_ok=True)
    plots_rel = os.path.relpath(os.path.abspath(plots_dir), doc_dir).replace(os.sep, "/")
    with open(args.doc, "w") as f:
        f.write(build_markdown(args.in_dir, drawn, plots_rel))
    print(f"[report] wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
