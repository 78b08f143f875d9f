// ONNX Runtime's side of bench/conv/e2e.sh: like bench/ort/ort_bench.js, plus
// the process's CPU time per inference (user + system, every thread).
//
//   node bench/conv/ort_cputime.js MODEL.onnx INPUT_DIR THREADS ITERATIONS WARMUP
//
// Needs bench/ort/node_modules (bench/ort/run.sh installs it). Prints one JSON
// line. ONNX Runtime's pool threads spin while they wait, so on more than one
// thread its CPU time counts the spinning too.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', 'ort', 'node_modules', 'onnxruntime-node'));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  if (!/'descr':\s*'<f4'/.test(header)) throw new Error(`${file}: only float32 inputs are handled`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const raw = buf.subarray(hstart + hlen);
  const data = new Float32Array(raw.length / 4);
  new Uint8Array(data.buffer).set(raw);
  return new ort.Tensor('float32', data, shape);
}

async function main() {
  const [model, inputDir, threads, iterations, warmup] = process.argv.slice(2);
  if (!model || !inputDir) {
    console.error('usage: ort_cputime.js MODEL.onnx INPUT_DIR THREADS ITERATIONS WARMUP');
    process.exit(2);
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads || 1), interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const name of session.inputNames) feeds[name] = readNpy(path.join(inputDir, `${name}.npy`));
  for (let i = 0; i < Number(warmup || 1); i++) await session.run(feeds);
  const wall = [], cpu = [];
  for (let i = 0; i < Number(iterations || 5); i++) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    wall.push(Number(process.hrtime.bigint() - t0) / 1e6);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1e3);
  }
  wall.sort((a, b) => a - b);
  cpu.sort((a, b) => a - b);
  const mid = (v) => +v[Math.floor(v.length / 2)].toFixed(3);
  console.log(JSON.stringify({
    runtime: 'onnxruntime', version: ort.env.versions.common, threads: Number(threads || 1), iterations: wall.length,
    cpu_median_ms: mid(cpu), cpu_min_ms: +cpu[0].toFixed(3), wall_median_ms: mid(wall), wall_min_ms: +wall[0].toFixed(3),
  }));
}

main().catch((e) => {
  console.error(`ort_cputime: ${e.message}`);
  process.exit(1);
});
