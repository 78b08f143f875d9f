"""Rewrites the body size and checksum of an engine file (format version 1),
as the engine fuzz target does before loading, so that a reproducer found by
fuzzing loads in s4dexec too.

usage: fix_engine_header.py IN OUT
"""
import struct
import sys


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


if __name__ == "__main__":
    blob = bytearray(open(sys.argv[1], "rb").read())
    if len(blob) >= 32:
        struct.pack_into("<QQ", blob, 16, len(blob) - 32, fnv1a64(blob[32:]))
    open(sys.argv[2], "wb").write(blob)
