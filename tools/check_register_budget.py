#!/usr/bin/env python3
"""Fails when a CUDA kernel could ask for more registers than a block may hold, or when an
attention kernel spills registers or keeps a stack frame.

A block of T threads of a kernel using R registers a thread needs ceil(R / 8) * 8 * T registers
(allocation is per warp, in units of 256 = 8 per thread), and sm_80 to sm_100 give one block at
most 65,536. Past that the launch fails on hardware with "too many resources requested", which
the emulator cannot see. So, from nvcc's own report (<build>/cuda_resource_usage.txt,
cmake/TarnEmulator.cmake) and the kernels' sources:
  - a kernel without __launch_bounds__ may be launched with up to 1,024 threads, so it must use
    at most 64 registers;
  - a kernel with __launch_bounds__(N, ...) must fit N threads (ptxas holds it to that; this
    catches a bound the source and the build disagree on).
The bound must be a literal or constexpr integers of the kernel's file (or common.cuh).
The attention kernels (files linear_attention*, softmax_attention*, delta_rule*) are the hot
loops: any spill store or load, or any stack frame (an array indexed at run time lives there),
is local-memory traffic inside them, so each must report 0 of all three (issue 50), but for the
exceptions in KNOWN_STACK, each with its reason.

  tools/check_register_budget.py <cuda_resource_usage.txt> <kernels/cuda folder>
  tools/check_register_budget.py --self-test      checks that the check fails where it must
Exit 0 when every kernel fits, 1 with one line per offender, 2 on unreadable input.
"""
import ast
import operator
import os
import re
import sys
import tempfile

from selftest_files import write_files

REGISTERS_PER_BLOCK = 65536
MAX_THREADS = 1024

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?P<bounds>(?:[^()]|\([^()]*\))*)\)\s*)?(?P<name>\w+)\s*\(")
CONSTANT = re.compile(r"constexpr\s+(?:int|int64_t|unsigned|size_t)\s+(\w+)\s*=\s*([^;]+);")
ROW = re.compile(r"^(sm_\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+(.*)$")
ATTENTION_FILE = re.compile(r"^(linear_attention|softmax_attention|delta_rule)")
# Attention kernels allowed a stack frame (never spills), until they are rewritten.
# (Empty since the bf16 delta rule's kernels lost their 168-byte frames, 2026-12-02.)
KNOWN_STACK: dict = {}


def evaluate(expr, constants, depth=0):
    """An integer expression of literals, constants, + - * / and parentheses."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.floordiv}
    expr = re.sub(r"\b\w+::", "", expr).strip()
    expr = re.sub(r"\b(\d+)(?:[uU]?[lL]{0,2})\b", r"\1", expr)

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in constants and depth < 20:
            return evaluate(constants[node.id], constants, depth + 1)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(expr)

    return walk(ast.parse(expr, mode="eval"))


def first_argument(bounds):
    level = 0
    for i, c in enumerate(bounds):
        if c == "(":
            level += 1
        elif c == ")":
            level -= 1
        elif c == "," and level == 0:
            return bounds[:i]
    return bounds


def kernel_bounds(source_dir):
    """{kernel name: (max threads or None (no bound), source file)}; raises ValueError on an
    unreadable bound."""
    common = {}
    common_path = os.path.join(source_dir, "common.cuh")
    if os.path.exists(common_path):
        common = dict(CONSTANT.findall(open(common_path).read()))
    bounds = {}
    for name in sorted(os.listdir(source_dir)):
        if not name.endswith((".cu", ".cuh")):
            continue
        text = open(os.path.join(source_dir, name)).read()
        constants = dict(common)
        constants.update(CONSTANT.findall(text))
        for m in KERNEL.finditer(text):
            if m.group("bounds") is None:
                bounds[m.group("name")] = (None, name)
                continue
            arg = first_argument(m.group("bounds"))
            try:
                bounds[m.group("name")] = (evaluate(arg, constants), name)
            except (ValueError, SyntaxError):
                raise ValueError(f"{name}: cannot evaluate __launch_bounds__({arg}) of {m.group('name')}: use a "
                                 "literal or constexpr integers of the file")
    return bounds


def base_name(signature):
    signature = signature.replace("(anonymous namespace)::", "")
    m = re.match(r"(?:void\s+)?(?:[\w:]+::)?(\w+)\s*[<(]", signature)
    return m.group(1) if m else signature.split("(")[0].strip()


def check(usage_path, source_dir):
    bounds = kernel_bounds(source_dir)
    offenders, checked = [], 0
    for line in open(usage_path):
        m = ROW.match(line.rstrip("\n"))
        if not m:
            continue
        arch, regs, signature = m.group(1), int(m.group(2)), m.group(6)
        stack, spill_st, spill_ld = int(m.group(3)), int(m.group(4)), int(m.group(5))
        name = base_name(signature)
        checked += 1
        if name not in bounds:
            offenders.append(f"{arch} {name}: in nvcc's report but no __global__ definition of it was found "
                             f"under {source_dir}")
            continue
        bound, source = bounds[name]
        if ATTENTION_FILE.match(source) and (spill_st or spill_ld or (stack and name not in KNOWN_STACK)):
            offenders.append(f"{arch} {name} ({source}): {stack} bytes stack frame, {spill_st} bytes spill stores, "
                             f"{spill_ld} bytes spill loads: an attention kernel must keep everything in registers "
                             "and shared memory (index register arrays only with compile-time constants)")
        threads = bound if bound is not None else MAX_THREADS
        need = (regs + 7) // 8 * 8 * threads
        if need > REGISTERS_PER_BLOCK:
            why = (f"__launch_bounds__({threads})" if bound is not None
                   else "no __launch_bounds__, so up to 1024 threads")
            offenders.append(f"{arch} {name}: {regs} registers x {threads} threads ({why}) = {need} > "
                             f"{REGISTERS_PER_BLOCK} a block may hold: add or lower its __launch_bounds__")
    return checked, offenders


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(tmp, {
            "cuda/common.cuh": "constexpr int kWarp = 32;\n",
            "cuda/k.cu": ("constexpr int kThreads = 8 * device::kWarp;\n"
                          "__global__ void plain_kernel(float* x) {}\n"
                          "__global__ void greedy_kernel(float* x) {}\n"
                          "template <int C>\n__global__ void __launch_bounds__(kThreads, min_blocks(C))\n"
                          "    bounded_kernel(float* x) {}\n"
                          "__global__ void __launch_bounds__(1024) tight_kernel(float* x) {}\n"),
            "cuda/linear_attention_x.cu": ("__global__ void __launch_bounds__(128) clean_kernel(float* x) {}\n"
                                           "__global__ void __launch_bounds__(128) spilling_kernel(float* x) {}\n"
                                           "__global__ void __launch_bounds__(128) stacked_kernel(float* x) {}\n"),
            "usage.txt": ("# arch regs stack spill st spill ld   smem  kernel\n"
                          "sm_90   64     0     0     0      0  plain_kernel(float*)\n"              # fits 1024
                          "sm_90   65     0     0     0      0  greedy_kernel(float*)\n"             # 72 x 1024: no
                          "sm_90  255     0     0     0      0  void bounded_kernel<8>(float*)\n"    # 256 x 256: fits
                          "sm_90   72     0     0     0      0  tight_kernel(float*)\n"              # 72 x 1024: no
                          "sm_90   10     0     0     0      0  missing_kernel(float*)\n"            # not in sources
                          "sm_90  255     0     0     0      0  ns::(anonymous namespace)::clean_kernel(float*)\n"
                          "sm_90  200     0     8     8      0  spilling_kernel(float*)\n"          # attention: spills
                          "sm_90  200    16     0     0      0  stacked_kernel(float*)\n"),         # attention: stack
        })
        usage, src = files["usage.txt"], os.path.dirname(files["cuda/k.cu"])
        checked, offenders = check(usage, src)
        names = sorted(o.split()[1].rstrip(":") for o in offenders)
        want = ["greedy_kernel", "missing_kernel", "spilling_kernel", "stacked_kernel", "tight_kernel"]
        if checked != 8 or names != want:
            print(f"check_register_budget self-test: expected {want} to fail out of 8, got "
                  f"{checked} checked and {offenders}", file=sys.stderr)
            return 1
    print("check_register_budget self-test: the 5 planted offenders failed, the 3 that fit passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    usage, source_dir = argv[1], argv[2]
    try:
        checked, offenders = check(usage, source_dir)
    except (OSError, ValueError) as e:
        print(f"check_register_budget: {e}", file=sys.stderr)
        return 2
    if checked == 0:
        print(f"check_register_budget: no kernel rows in {usage}", file=sys.stderr)
        return 2
    for o in offenders:
        print(f"check_register_budget: {o}", file=sys.stderr)
    if offenders:
        return 1
    print(f"check_register_budget: {checked} kernel builds fit a block's {REGISTERS_PER_BLOCK} registers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
