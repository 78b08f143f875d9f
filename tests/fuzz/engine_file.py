"""Reads and writes s4d engine files (format version 2, docs/engine-format.md)
field by field, so that tests can make a valid engine inconsistent in one
chosen way: the reproducers of tests/fuzz/corpus/engine/regress-* and of
test_hostile.c come from seeds edited with this module
(make_engine_regressions.py).

    e = EngineFile.load(path)
    e.tensors[0]["dims"] = [4, 4]
    e.save(path2)          # recomputes sizes, padding and the checksum

Only the fields a test edits are parsed; unknown trailing bytes of a record
are kept as they were.
"""
import struct

MAGIC = b"S4DENGIN"
VERSION = 2
HEADER = 40
ALIGN = 64
SEC_HEADER = 16
NUM_DEVICES = 2

ATTR_FLOAT, ATTR_INT, ATTR_STRING, ATTR_TENSOR = 1, 2, 3, 4
ATTR_FLOATS, ATTR_INTS, ATTR_STRINGS = 6, 7, 8
PLACE_ARENA, PLACE_WEIGHT, PLACE_INPUT, PLACE_OUTPUT, PLACE_VIEW = 0, 1, 2, 3, 4
LAYER_OP, LAYER_PLUGIN, LAYER_COPY = 0, 1, 2

DTYPE_SIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
              16: 2}


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def sec_id(tag):
    return struct.unpack("<I", tag.encode())[0]


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("engine file ends early")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def f32(self):
        return struct.unpack("<f", self.take(4))[0]

    def str(self):
        return self.take(self.u32()).decode("utf-8", "surrogateescape")

    def rest(self):
        return self.take(len(self.data) - self.pos)


class Writer:
    def __init__(self):
        self.out = bytearray()

    def u32(self, v):
        self.out += struct.pack("<I", v & 0xFFFFFFFF)

    def u64(self, v):
        self.out += struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)

    def i64(self, v):
        self.out += struct.pack("<q", v)

    def f32(self, v):
        self.out += struct.pack("<f", v)

    def str(self, s):
        b = s.encode("utf-8", "surrogateescape")
        self.u32(len(b))
        self.out += b

    def raw(self, b):
        self.out += b


def read_attr(r):
    a = {"name": r.str(), "type": r.u32()}
    t = a["type"]
    if t == ATTR_FLOAT:
        a["value"] = r.f32()
    elif t == ATTR_INT:
        a["value"] = r.i64()
    elif t == ATTR_STRING:
        a["value"] = r.take(r.u64())
    elif t == ATTR_TENSOR:
        dt, rank = r.u32(), r.u32()
        dims = [r.i64() for _ in range(rank)]
        a["value"] = (dt, dims, r.take(r.u64()))
    elif t == ATTR_FLOATS:
        a["value"] = [r.f32() for _ in range(r.u64())]
    elif t == ATTR_INTS:
        a["value"] = [r.i64() for _ in range(r.u64())]
    elif t == ATTR_STRINGS:
        a["value"] = [r.str() for _ in range(r.u64())]
    else:
        raise ValueError(f"attribute type {t}")
    return a


def write_attr(w, a):
    w.str(a["name"])
    w.u32(a["type"])
    t, v = a["type"], a["value"]
    if t == ATTR_FLOAT:
        w.f32(v)
    elif t == ATTR_INT:
        w.i64(v)
    elif t == ATTR_STRING:
        w.u64(len(v))
        w.raw(v)
    elif t == ATTR_TENSOR:
        dt, dims, data = v
        w.u32(dt)
        w.u32(len(dims))
        for d in dims:
            w.i64(d)
        w.u64(len(data))
        w.raw(data)
    elif t == ATTR_FLOATS:
        w.u64(len(v))
        for x in v:
            w.f32(x)
    elif t == ATTR_INTS:
        w.u64(len(v))
        for x in v:
            w.i64(x)
    elif t == ATTR_STRINGS:
        w.u64(len(v))
        for x in v:
            w.str(x)


class EngineFile:
    """The sections of one engine file as dicts and lists; save() writes them back."""

    @classmethod
    def load(cls, path):
        return cls.parse(open(path, "rb").read())

    @classmethod
    def parse(cls, data):
        self = cls()
        if data[:8] != MAGIC:
            raise ValueError("not an engine file")
        version, hsize, body, _, nsec, _ = struct.unpack_from("<IIQQII", data, 8)
        if version != VERSION or hsize != HEADER or body != len(data) - HEADER:
            raise ValueError("not an engine file of format version 2")
        self.sections = []  # [tag, flags] in file order
        pos = HEADER
        for _ in range(nsec):
            while (pos + SEC_HEADER) % ALIGN:
                pos += 1
            ident, flags, size = struct.unpack_from("<IIQ", data, pos)
            pos += SEC_HEADER
            payload = data[pos:pos + size]
            pos += size
            tag = struct.pack("<I", ident).decode("latin-1")
            self.sections.append([tag, flags])
            getattr(self, "_read_" + tag, self._read_other(tag))(Reader(payload))
        return self

    def _read_other(self, tag):
        def keep(r):
            setattr(self, "raw_" + tag, r.rest())
        return keep

    def _read_META(self, r):
        m = {"library_version": r.str(), "device": r.u32(), "target_name": r.str(),
             "target_arch": r.str(), "target_libraries": r.str(), "fp16": r.u32(),
             "tf32": r.u32(), "allow_fallback": r.u32(), "num_devices": r.u32()}
        m["arena_size"], m["arena_size_unplanned"], m["workspace_size"] = [], [], []
        for _ in range(NUM_DEVICES):
            m["arena_size"].append(r.u64())
            m["arena_size_unplanned"].append(r.u64())
            m["workspace_size"].append(r.u64())
        m["tail"] = r.rest()
        self.meta = m

    def _read_TNSR(self, r):
        self.tensors = []
        for _ in range(r.u32()):
            rec = Reader(r.take(r.u32()))
            t = {"name": rec.str(), "dtype": rec.u32()}
            t["dims"] = [0] * rec.u32()
            t["dims"] = [rec.i64() for _ in t["dims"]]
            # offset: for a view (PLACE_VIEW), the index of the tensor it views
            t.update(bytes=rec.u64(), device=rec.u32(), place=rec.u32(), offset=rec.u64(),
                     flags=rec.u32(), tail=rec.rest())
            self.tensors.append(t)

    def _read_IOIO(self, r):
        self.inputs = [r.u32() for _ in range(r.u32())]
        self.outputs = [r.u32() for _ in range(r.u32())]
        self.io_tail = r.rest()

    def _read_LAYR(self, r):
        self.layers = []
        for _ in range(r.u32()):
            rec = Reader(r.take(r.u32()))
            l = {"name": rec.str(), "kind": rec.u32(), "device": rec.u32(),
                 "precision": rec.u32(), "format": rec.u32(), "domain": rec.str(),
                 "op_type": rec.str(), "opset": rec.u32(), "workspace": rec.u64()}
            l["inputs"] = [rec.u32() for _ in range(rec.u32())]
            l["outputs"] = [rec.u32() for _ in range(rec.u32())]
            l["attrs"] = [read_attr(rec) for _ in range(rec.u32())]
            if l["kind"] == LAYER_PLUGIN:
                l["plugin"] = (rec.str(), rec.str(), rec.str(), rec.take(rec.u64()))
            l["backend_payload"] = rec.take(rec.u64())
            l["tail"] = rec.rest()
            self.layers.append(l)

    def _read_WGHT(self, r):
        self.weights = r.rest()

    # ---- writing ----

    def _write_META(self, w):
        m = self.meta
        w.str(m["library_version"])
        w.u32(m["device"])
        w.str(m["target_name"])
        w.str(m["target_arch"])
        w.str(m["target_libraries"])
        for k in ("fp16", "tf32", "allow_fallback", "num_devices"):
            w.u32(m[k])
        for d in range(NUM_DEVICES):
            w.u64(m["arena_size"][d])
            w.u64(m["arena_size_unplanned"][d])
            w.u64(m["workspace_size"][d])
        w.raw(m["tail"])

    def _write_TNSR(self, w):
        w.u32(len(self.tensors))
        for t in self.tensors:
            rec = Writer()
            rec.str(t["name"])
            rec.u32(t["dtype"])
            rec.u32(len(t["dims"]))
            for d in t["dims"]:
                rec.i64(d)
            rec.u64(t["bytes"])
            rec.u32(t["device"])
            rec.u32(t["place"])
            rec.u64(t["offset"])
            rec.u32(t["flags"])
            rec.raw(t["tail"])
            w.u32(len(rec.out))
            w.raw(rec.out)

    def _write_IOIO(self, w):
        for lst in (self.inputs, self.outputs):
            w.u32(len(lst))
            for i in lst:
                w.u32(i)
        w.raw(self.io_tail)

    def _write_LAYR(self, w):
        w.u32(len(self.layers))
        for l in self.layers:
            rec = Writer()
            rec.str(l["name"])
            for k in ("kind", "device", "precision", "format"):
                rec.u32(l[k])
            rec.str(l["domain"])
            rec.str(l["op_type"])
            rec.u32(l["opset"])
            rec.u64(l["workspace"])
            for lst in (l["inputs"], l["outputs"]):
                rec.u32(len(lst))
                for i in lst:
                    rec.u32(i)
            rec.u32(len(l["attrs"]))
            for a in l["attrs"]:
                write_attr(rec, a)
            if l["kind"] == LAYER_PLUGIN:
                ns, name, version, payload = l["plugin"]
                rec.str(ns)
                rec.str(name)
                rec.str(version)
                rec.u64(len(payload))
                rec.raw(payload)
            rec.u64(len(l["backend_payload"]))
            rec.raw(l["backend_payload"])
            rec.raw(l["tail"])
            w.u32(len(rec.out))
            w.raw(rec.out)

    def _write_WGHT(self, w):
        w.raw(self.weights)

    def serialize(self):
        body = bytearray()
        for tag, flags in self.sections:
            while (HEADER + len(body) + SEC_HEADER) % ALIGN:
                body.append(0)
            w = Writer()
            if hasattr(self, "_write_" + tag):
                getattr(self, "_write_" + tag)(w)
            else:
                w.raw(getattr(self, "raw_" + tag))
            body += struct.pack("<IIQ", sec_id(tag), flags, len(w.out))
            body += w.out
        head = MAGIC + struct.pack("<IIQQII", VERSION, HEADER, len(body), fnv1a64(body),
                                   len(self.sections), 0)
        return bytes(head + body)

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.serialize())

    # ---- helpers for edits ----

    def tensor(self, name):
        for i, t in enumerate(self.tensors):
            if t["name"] == name:
                return i, t
        raise KeyError(name)

    def layer(self, op_type):
        for l in self.layers:
            if l["op_type"] == op_type:
                return l
        raise KeyError(op_type)

    def set_dims(self, name, dims):
        """Changes a tensor's shape and keeps its byte count consistent with it."""
        _, t = self.tensor(name)
        t["dims"] = list(dims)
        n = 1
        for d in dims:
            n *= d
        t["bytes"] = n * DTYPE_SIZE[t["dtype"]]
