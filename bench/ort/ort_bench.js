// ONNX Runtime (CPU) side of the s4d comparison: times one model.
//
//   node bench/ort/ort_bench.js MODEL.onnx INPUT_DIR THREADS ITERATIONS WARMUP
//
// INPUT_DIR holds <input name>.npy for every graph input. Prints one JSON
// line: {"runtime":"onnxruntime",...,"median_ms":..,"min_ms":..,"mean_ms":..}.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

// Minimal .npy reader (version 1/2/3, little-endian, C order).
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const raw = buf.subarray(hstart + hlen);
  const copy = (Ctor) => {
    const n = raw.length / Ctor.BYTES_PER_ELEMENT;
    const out = new Ctor(n);
    new Uint8Array(out.buffer).set(raw);
    return out;
  };
  const types = {
    '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array],
    '<i4': ['int32', Int32Array], '|b1': ['bool', Uint8Array], '|u1': ['uint8', Uint8Array],
  };
  if (!types[descr]) throw new Error(`${file}: dtype ${descr} not handled`);
  const [type, Ctor] = types[descr];
  return new ort.Tensor(type, copy(Ctor), shape);
}

async function main() {
  const [model, inputDir, threads, iterations, warmup] = process.argv.slice(2);
  if (!model || !inputDir) {
    console.error('usage: ort_bench.js MODEL.onnx INPUT_DIR THREADS ITERATIONS WARMUP');
    process.exit(2);
  }
  const nthreads = Number(threads || 1);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: nthreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const name of session.inputNames) {
    const file = path.join(inputDir, `${name}.npy`);
    if (!fs.existsSync(file)) throw new Error(`missing input ${file}`);
    feeds[name] = readNpy(file);
  }
  for (let i = 0; i < Number(warmup || 1); i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < Number(iterations || 5); i++) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  console.log(JSON.stringify({
    runtime: 'onnxruntime', version: ort.env.versions.common, model: path.basename(model), threads: nthreads,
    iterations: times.length, median_ms: +median.toFixed(3), min_ms: +times[0].toFixed(3), mean_ms: +mean.toFixed(3),
  }));
}

main().catch((e) => {
  console.error(`ort_bench: ${e.message}`);
  process.exit(1);
});
