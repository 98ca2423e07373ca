#!/usr/bin/env python3
"""Independent checker for what framework/io writes, using only Python's standard library.

  check_safetensors.py FILE.safetensors   validates the file against the safetensors format
                                          (huggingface/safetensors README, "Format") and the
                                          writer conventions tarn promises (8-byte aligned,
                                          space-padded header, aligned tensor data); prints
                                          "ok metadata {...}" then "name DTYPE [shape] begin end"
                                          per tensor in header order
  check_safetensors.py --checkpoint DIR   validates a tarn checkpoint folder: COMPLETE,
                                          MANIFEST.json, every file's size and zlib CRC-32

Exit status 0 when valid, 1 with a message on stderr otherwise. A second implementation of the
rules, so that tests catch mistakes shared by tarn's writer and reader.
"""
import json
import os
import struct
import sys
import zlib

BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
MAX_HEADER = 100_000_000


class Invalid(Exception):
    pass


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Invalid(f"duplicate key in {keys}")
    return dict(pairs)


def reject_constant(name):
    raise Invalid(f"non-standard JSON constant {name}")


def is_uint(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise Invalid("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        raise Invalid(f"header size {n} too large")
    if 8 + n > len(blob):
        raise Invalid(f"header size {n} beyond the file ({len(blob)} bytes)")
    if n % 8:
        raise Invalid(f"header size {n} not a multiple of 8")
    raw = blob[8:8 + n]
    text = raw.decode("utf-8")  # strict: raises on invalid UTF-8
    if not text.startswith("{"):
        raise Invalid("header does not begin with '{'")
    end = text.rindex("}")
    if text[end + 1:].strip(" "):
        raise Invalid("header padding is not only spaces")
    header = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=reject_constant)
    if not isinstance(header, dict):
        raise Invalid("header is not an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise Invalid("__metadata__ must map strings to strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise Invalid(f"{name}: entry must have exactly dtype, shape, data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in BITS:
            raise Invalid(f"{name}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(is_uint(d) for d in shape):
            raise Invalid(f"{name}: bad shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_uint(o) for o in offsets):
            raise Invalid(f"{name}: bad data_offsets {offsets!r}")
        begin, stop = offsets
        numel = 1
        for d in shape:
            numel *= d
        bits = numel * BITS[dtype]
        if bits % 8 or stop - begin != bits // 8:
            raise Invalid(f"{name}: {dtype} {shape} does not match data_offsets {offsets}")
        if BITS[dtype] >= 8 and stop > begin and begin % (BITS[dtype] // 8):
            raise Invalid(f"{name}: data not aligned")
        entries.append((name, dtype, shape, begin, stop))
    covered = 0
    for name, _, _, begin, stop in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin != covered:
            raise Invalid(f"{name}: starts at {begin}, expected {covered} (gap or overlap)")
        covered = stop
    if 8 + n + covered != len(blob):
        raise Invalid(f"data covers {covered} bytes, file holds {len(blob) - 8 - n}")
    print("ok metadata " + json.dumps(metadata, sort_keys=True))
    for name, dtype, shape, begin, stop in entries:
        print(f"{name} {dtype} {shape} {begin} {stop}")


def check_checkpoint(folder):
    complete = json.loads(open(os.path.join(folder, "COMPLETE"), "rb").read(), object_pairs_hook=no_duplicates)
    manifest_bytes = open(os.path.join(folder, "MANIFEST.json"), "rb").read()
    if len(manifest_bytes) != complete["manifest_bytes"]:
        raise Invalid("MANIFEST.json size differs from COMPLETE")
    if f"{zlib.crc32(manifest_bytes):08x}" != complete["manifest_crc32"]:
        raise Invalid("MANIFEST.json CRC-32 differs from COMPLETE")
    manifest = json.loads(manifest_bytes, object_pairs_hook=no_duplicates)
    if manifest.get("format") != "tarn-checkpoint" or manifest.get("version") != 1:
        raise Invalid("not a version 1 tarn checkpoint manifest")
    for f in manifest["files"]:
        data = open(os.path.join(folder, f["name"]), "rb").read()
        if len(data) != f["bytes"]:
            raise Invalid(f"{f['name']}: {len(data)} bytes, manifest says {f['bytes']}")
        if f"{zlib.crc32(data):08x}" != f["crc32"]:
            raise Invalid(f"{f['name']}: CRC-32 mismatch")
    print("ok checkpoint " + " ".join(f"{f['name']}:{f['bytes']}" for f in manifest["files"]))


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "--checkpoint":
            check_checkpoint(argv[2])
        elif len(argv) == 2:
            check_safetensors(argv[1])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (Invalid, ValueError, KeyError, OSError, TypeError) as e:
        print(f"{argv[-1]}: invalid: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
