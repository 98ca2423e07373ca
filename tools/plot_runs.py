#!/usr/bin/env python3
# Training curves of one or more tarn runs from their metrics.jsonl, as one PNG, without
# TensorBoard. Standalone (imports nothing from the repository); needs matplotlib (Debian's
# python3-matplotlib, which tools/setup.sh installs). Tested by tests/tools/plot_runs_test.sh.
"""Draw the training curves of tarn runs from their metrics.jsonl into one PNG.

Four panels: validation perplexity against steps and against training time, training loss
against steps and against training time. One line per run, in one colour on every panel,
named by the run's folder (a file not called metrics.jsonl: by its name); when two names are
equal, every run is named with its parent folder too (small-delta/seed1, small-gated/seed1).

Perplexity has a log y axis (it falls by orders of magnitude early on; the log of perplexity
is the validation loss, so its shape matches the loss panels); the training loss a linear one
unless --log-y. Time is the run's elapsed_s (training time, carried across resumes), in
minutes, or in hours when a run is longer than 5 hours. A null metric (not finite) leaves a
gap in its line.

How a metrics.jsonl is read (tarn appends to it, also across resumes and --restart):
  - train and valid lines are used; lines of other kinds are ignored;
  - a resume trains again the steps after its checkpoint: when the steps go back (a step
    logged again), the earlier lines from that step on are dropped, so the last line written
    for each step is kept (and a tail the resumed run has not reached again is not drawn, as
    in TensorBoard: tarn rewinds its event files the same way);
  - when the steps go back to the run's first logged step or below, a new run has started
    (after --restart, or a resume with no checkpoint): only the lines from the last such
    start on are drawn; a note says so;
  - a last line cut short (no newline: being written, or the run was killed) is skipped, and
    a line cut short with the resumed run's first line after it is read from that line on.
Notes go to stderr. At the end the PNG's path and, per run, its last step, best validation
perplexity (and its step) and training time are printed on stdout.

Exit status: 0 when the PNG is written; 2, with one line on stderr naming the file, when a
RUN does not exist or is given twice, a folder holds no metrics.jsonl, a file has no train or
valid line, a line is not a JSON object (its number named) or a train or valid line has no
integer step, --out's folder does not exist or the PNG cannot be written, or matplotlib is
missing.
"""
import argparse
import json
import math
import os
import re
import sys

PROG = "plot_runs.py"
KINDS = ("train", "valid")
HOURS_ABOVE_MIN = 300  # the time axes switch from minutes to hours above 5 hours


class UserError(Exception):
    """A mistake in what was given: one line on stderr, exit status 2."""


def note(message):
    print(f"{PROG}: note: {message}", file=sys.stderr)


def metrics_path(run):
    """The metrics.jsonl of RUN (a run folder or the file itself)."""
    if os.path.isdir(run):
        path = os.path.join(run, "metrics.jsonl")
        if not os.path.isfile(path):
            raise UserError(f"{run}: no metrics.jsonl in this folder (is it a tarn run folder?)")
        return path
    if os.path.isfile(run):
        return run
    if os.path.lexists(run):
        raise UserError(f"{run}: neither a folder nor a file")
    raise UserError(f"{run}: no such file or folder")


def run_names(paths):
    """A label per metrics file: the run folder's name (the file's stem when it is not called
    metrics.jsonl); when two are equal, every label gets as many parent folders as it takes to
    tell them apart (small-delta/seed1, small-gated/seed1)."""
    parts = []
    for p in paths:
        folder, base = os.path.split(os.path.abspath(p))
        pieces = [x for x in folder.split(os.sep) if x]
        if base != "metrics.jsonl":
            pieces.append(os.path.splitext(base)[0])
        parts.append(pieces or ["/"])
    depth = 1
    while True:
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names) or depth >= max(len(p) for p in parts):
            return names
        depth += 1


def finite(value):
    """value as a float when it is a finite number, else None (null, missing, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond a double
        return None
    return value if math.isfinite(value) else None


KIND_START = re.compile(r'\{\s*"kind"\s*:')


def parse_line(path, number, text, is_last):
    """The JSON object of one line; None for a line to skip (said in a note)."""
    try:
        record = json.loads(text)
    except RecursionError:
        raise UserError(f"{path}: line {number}: not a metrics line (nested too deep)")
    except ValueError as e:
        if is_last and not text.endswith("\n"):
            note(f"{path}: line {number} is cut short (being written, or the run was killed "
                 "while writing it): skipped")
            return None
        # A line cut short by a killed run, then the resumed run's first line appended to it.
        starts = [m.start() for m in KIND_START.finditer(text)]
        if starts and starts[-1] > 0:
            try:
                record = json.loads(text[starts[-1]:])
            except (ValueError, RecursionError):
                record = None
            if isinstance(record, dict):
                note(f"{path}: line {number} begins with a line cut short (a killed run): its "
                     "complete part is read")
                return record
        raise UserError(f"{path}: line {number}: not valid JSON ({getattr(e, 'msg', e)}, "
                        f"column {getattr(e, 'colno', '?')})")
    if not isinstance(record, dict):
        raise UserError(f"{path}: line {number}: not a JSON object")
    return record


def read_run(path):
    """{"train": [record...], "valid": [record...]} sorted by step, as described in the help."""
    try:
        with open(path, "rb") as f:
            raw = f.read().split(b"\n")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})")
    lines = [r + b"\n" for r in raw[:-1]] + ([raw[-1]] if raw[-1] else [])
    kept = {k: {} for k in KINDS}  # kind -> {step: record} of the current run
    first_step = None  # of the current run's first line
    top = None  # the largest step kept per kind, None when it must be counted again
    new_run_line, dropped, resumes, skipped_kinds = None, 0, 0, set()
    for number, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: line {number}: not UTF-8 text")
        if not text.strip():
            continue
        record = parse_line(path, number, text, number == len(lines))
        if record is None:
            continue
        kind = record.get("kind")
        if kind not in KINDS:
            skipped_kinds.add(str(kind))
            continue
        step = record.get("step")
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UserError(f"{path}: line {number}: a {kind} line without an integer step")
        record["step"] = step
        # -1: none kept. Counted again only after lines are dropped: a long file reads in
        # linear time.
        top = {k: max(kept[k], default=-1) for k in KINDS} if top is None else top
        goes_back = top[kind] >= step or max(top.values()) > step
        if goes_back and first_step is not None and step <= first_step:
            # Started again from step 0: a new run (--restart, or a resume with no checkpoint).
            new_run_line = number
            kept = {k: {} for k in KINDS}
            first_step, resumes, dropped = None, 0, 0  # what is said below is of the last run
        elif goes_back:
            # A resume: the steps after its checkpoint are trained again. A line of the other
            # kind at this very step stays (tarn writes a step's train and valid lines in either
            # order: the last train line comes after the loop's validation).
            resumes += 1
            for k in KINDS:
                stale = [s for s in kept[k] if s > step or (k == kind and s == step)]
                for s in stale:
                    del kept[k][s]
                dropped += len(stale)
        if first_step is None:
            first_step = step
        kept[kind][step] = record
        top = None if goes_back else {**top, kind: step}
    if new_run_line is not None:
        note(f"{path}: the steps start again from {first_step} at line {new_run_line} (a new run: "
             "--restart, or a resume without a checkpoint): only the lines from there on are drawn")
    if resumes:
        note(f"{path}: the steps go back {resumes} time(s) (a resume trains again the steps after "
             f"its checkpoint): the last line written for each step is kept, {dropped} earlier "
             "line(s) dropped")
    runs = {k: [kept[k][s] for s in sorted(kept[k])] for k in KINDS}
    if not runs["train"] and not runs["valid"]:
        others = f" (only: {', '.join(sorted(skipped_kinds))})" if skipped_kinds else ""
        raise UserError(f"{path}: no train or valid lines{others}")
    return runs


def series(records, field, log_y):
    """(steps, elapsed seconds, values) of records; NaN where the value is null (a gap)."""
    steps, times, values = [], [], []
    for r in records:
        v = finite(r.get(field))
        if v is not None and log_y and v <= 0:
            v = None
        steps.append(r["step"])
        t = finite(r.get("elapsed_s"))
        times.append(math.nan if t is None else t)
        values.append(math.nan if v is None else v)
    return steps, times, values


def plain_number(v, _position=None):
    return f"{v:,.0f}" if abs(v) >= 1 and v == int(v) else f"{v:g}"


def minor_log_label(ax, v):
    """Labels for the minor ticks of a log y axis, so that a short span still has numbers: all
    of them under one decade, 2 and 5 under three, none above."""
    low, high = ax.get_ylim()
    if low <= 0 or high <= low or v <= 0:
        return ""
    decades = math.log10(high / low)
    mantissa = round(v / 10 ** math.floor(math.log10(v)), 6)
    return plain_number(v) if decades < 1 or (decades < 3 and mantissa in (2, 5)) else ""


def duration(seconds):
    if seconds is None:
        return "time unknown"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def draw(runs, out, title, log_y):
    """runs: [(name, {"train": [...], "valid": [...]})]. Returns the dump rows."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    longest = max((finite(r.get("elapsed_s")) or 0 for _, d in runs for k in KINDS for r in d[k]),
                  default=0)
    hours = longest / 60 > HOURS_ABOVE_MIN
    unit, per = ("hours", 3600.0) if hours else ("minutes", 60.0)

    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), sharex="col", sharey="row")
    (ppl_steps, ppl_time), (loss_steps, loss_time) = axes
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    handles, dump = [], []
    for i, (name, data) in enumerate(runs):
        colour = colours[i % len(colours)]
        style = styles[(i // len(colours)) % len(styles)]
        steps, times, ppl = series(data["valid"], "ppl", True)
        if steps:
            for ax, xs in ((ppl_steps, steps), (ppl_time, [t / per for t in times])):
                ax.plot(xs, ppl, color=colour, linestyle=style, linewidth=1.5,
                        marker="o" if len(steps) <= 60 else None, markersize=3)
            dump += [(name, "valid_ppl", s, t, v) for s, t, v in zip(steps, times, ppl)
                     if not math.isnan(v)]
        steps, times, loss = series(data["train"], "loss", log_y)
        if steps:
            few = len(steps) <= 20
            for ax, xs in ((loss_steps, steps), (loss_time, [t / per for t in times])):
                ax.plot(xs, loss, color=colour, linestyle=style, linewidth=1.2,
                        marker="o" if few else None, markersize=2.5)
            dump += [(name, "train_loss", s, t, v) for s, t, v in zip(steps, times, loss)
                     if not math.isnan(v)]
        label = name if data["valid"] else f"{name} (no validation lines)"
        handles.append(Line2D([], [], color=colour, linestyle=style, linewidth=2, label=label))

    ppl_steps.set_title("Validation perplexity")
    ppl_time.set_title("Validation perplexity")
    loss_steps.set_title("Training loss")
    loss_time.set_title("Training loss")
    loss_steps.set_xlabel("step")
    loss_time.set_xlabel(f"training time ({unit})")
    row_log = {0: True, 1: log_y}
    for r, row in enumerate(axes):
        for ax in row:
            if row_log[r] and ax.has_data():
                ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.5)
            ax.grid(True, which="minor", alpha=0.15)
            ax.tick_params(which="both", labelleft=True, labelbottom=True)
    for ax, what in ((ppl_steps, "validation perplexity"), (loss_steps, "training loss")):
        ax.set_ylabel(what + (" (log scale)" if ax.get_yscale() == "log" else ""))
    # Whole steps, at round numbers (the x axis of the steps column is shared).
    loss_steps.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
    loss_steps.xaxis.set_major_formatter(FuncFormatter(plain_number))
    for r, row in enumerate(axes):
        for ax in row:
            if not ax.has_data():
                ax.text(0.5, 0.5, "no points to draw" if r == 1 else "no validation points",
                        transform=ax.transAxes, ha="center", va="center", color="grey")
                ax.tick_params(axis="y", which="both", labelleft=False, left=False)
        # The two panels of a row share their y axis, and with it its formatters: set once.
        row[0].yaxis.set_major_formatter(FuncFormatter(plain_number))
        if row_log[r] and row[0].get_yscale() == "log":
            row[0].yaxis.set_minor_formatter(
                FuncFormatter(lambda v, _p, a=row[0]: minor_log_label(a, v)))
    columns = min(len(handles), 4)
    legend_rows = math.ceil(len(handles) / columns)
    fig.suptitle(title, fontsize=13)
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=9, frameon=False)
    bottom = min(0.4, 0.02 + 0.035 * legend_rows)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    try:
        fig.savefig(out, dpi=110)
    except (OSError, ValueError) as e:
        raise UserError(f"{out}: cannot write the PNG ({getattr(e, 'strerror', None) or e})")
    finally:
        plt.close(fig)
    return dump


def summary(name, data):
    records = data["train"] + data["valid"]
    last_step = max(r["step"] for r in records)
    times = [t for t in (finite(r.get("elapsed_s")) for r in records) if t is not None]
    ppls = [(finite(r.get("ppl")), r["step"]) for r in data["valid"]]
    ppls = [(p, s) for p, s in ppls if p is not None]
    if ppls:
        best, at = min(ppls)
        valid = f"best valid ppl {best:.2f} (step {at:,})"
    elif data["valid"]:
        valid = "no finite valid ppl"
    else:
        valid = "no validation lines"
    return f"  {name}: last step {last_step:,}, {valid}, {duration(max(times) if times else None)}"


def write_dump(dump, where):
    text = "run\tseries\tstep\telapsed_s\tvalue\n" + "".join(
        f"{n}\t{k}\t{s}\t{'' if math.isnan(t) else repr(t)}\t{v!r}\n" for n, k, s, t, v in dump)
    if where == "-":
        sys.stdout.write(text)
        return
    try:
        with open(where, "w") as f:
            f.write(text)
    except OSError as e:
        raise UserError(f"{where}: cannot write the dump ({e.strerror})")


def main(argv):
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: tools/plot_runs.py runs/small-delta-10min runs/small-softmax "
               "--out curves.png\n"
               "TensorBoard reads the same runs' event files: "
               "build/pyref/bin/tensorboard --logdir runs")
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="a run folder holding metrics.jsonl, or a metrics.jsonl file")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="the PNG to write (its folder must exist; another extension that "
                             "matplotlib knows, such as .svg or .pdf, gives that format)")
    parser.add_argument("--title", metavar="TEXT",
                        help="the figure's title (default: 'Training curves: ' and the run names)")
    parser.add_argument("--log-y", action="store_true",
                        help="a log y axis on the training-loss panels too "
                             "(perplexity always has one)")
    parser.add_argument("--dump", metavar="FILE",
                        help="also write the points drawn as tab-separated text, '-' for "
                             "stdout: a header, then columns run, series (valid_ppl or "
                             "train_loss), step, elapsed_s, value; each step once per series, "
                             "after the rules above; null values left out")
    args = parser.parse_args(argv)

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError("matplotlib is missing: install python3-matplotlib (tools/setup.sh does)")
    paths = [metrics_path(r) for r in args.runs]
    seen = {}
    for run, p in zip(args.runs, paths):
        key = os.path.realpath(p)
        if key in seen:
            raise UserError(f"{run}: the same metrics.jsonl as {seen[key]} (given twice)")
        seen[key] = run
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise UserError(f"{args.out}: its folder does not exist")
    names = run_names(paths)
    runs = []
    for name, path in zip(names, paths):
        data = read_run(path)
        if not data["valid"]:
            note(f"{path}: no validation lines: only the training loss of {name} is drawn")
        elif not data["train"]:
            note(f"{path}: no train lines: only the validation perplexity of {name} is drawn")
        runs.append((name, data))
    title = args.title
    if title is None:
        title = ("Training curves: " + ", ".join(names) if len(names) <= 3
                 else f"Training curves of {len(names)} runs")
    dump = draw(runs, args.out, title, args.log_y)
    if args.dump:
        write_dump(dump, args.dump)
    print(f"wrote {args.out}")
    for name, data in runs:
        print(summary(name, data))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
