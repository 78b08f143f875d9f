"""Rewrites the body size and checksum of an engine file (format version 2: a
40-byte header with the body size and its FNV-1a 64 at offsets 16 and 24), as
the engine fuzz target does before loading, so that a reproducer found by
fuzzing loads in s4dexec too.

usage: fix_engine_header.py IN OUT
"""
import struct
import sys

HEADER = 40


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


if __name__ == "__main__":
    blob = bytearray(open(sys.argv[1], "rb").read())
    if len(blob) >= HEADER:
        struct.pack_into("<QQ", blob, 16, len(blob) - HEADER, fnv1a64(blob[HEADER:]))
    open(sys.argv[2], "wb").write(blob)
